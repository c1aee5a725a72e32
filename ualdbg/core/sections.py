"""The sections of a trace that only some runs have (core/result.py's TraceResult): what a step
engine stepped, the processes and the summary of the agent, the state of an attach (the runs of a
merge are core/result.py's Run). Typed as the JSON document has them (core/document.py)."""
from __future__ import annotations

from dataclasses import field

from ..lazyclass import dataclass


@dataclass(frozen=True)
class StepSummary:
    """A debugger's step engine (engines/step.py): its scope, its policy, what it stepped."""

    scope: str
    policy: str
    steps: int
    entries: int
    calls_run: int


@dataclass(frozen=True)
class SteppedScope:
    """The native stepper's scope: its kind (functions, ranges, everywhere), its label, the
    address ranges [lo, hi) and how many entry points it has."""

    kind: str
    label: str
    ranges: tuple[tuple[int, int], ...]
    entries: int


@dataclass(frozen=True)
class NativeStep:
    """The native stepper (engines/stepnative.py): its scope and policy, and what it cost."""

    scope: SteppedScope
    policy: str
    armed_at: str
    tracer_cpu: int | None
    seconds_in_scope: float  # summed over threads
    instructions_stepped: int
    scope_entries: int
    unmodelled_executions: int
    decoded_on_demand: int
    # steps over the stepper's own int3s: run from a copy elsewhere, or with every other thread stopped
    int3_steps_displaced: int
    int3_steps_stopping_others: int


@dataclass(frozen=True)
class Process:
    """One process image the agent traced (an exec makes a new image of the same pid). `run`:
    which document of a merge."""

    pid: int | None
    ppid: int | None
    image: int | None
    path: str | None
    args: list[str]
    faults_total: int
    faults_ignored: int
    armed: bool | None
    end: str | None  # exited, exec, ended without exit
    note: str | None
    run: int | None = None


@dataclass(frozen=True)
class OutOfScope:
    """What the agent did with faults out of scope: traps taken, routines run unarmed instead."""

    traps: int
    routine_calls_run_unarmed: int
    skipping: bool


@dataclass(frozen=True)
class Patching:
    """What hot-site patching did (issue 21), over every process image."""

    after_traps: int
    sites_patched: int
    faults_counted_by_patches: int
    unpatchable: dict[str, int]  # why, and at how many sites
    faults_in_scope_without_record: int
    # For the records' readers (the JSON, report's records): hot sites in scope were patched and
    # faults lack a record; None when every fault in scope has its record.
    note: str | None = None
    # The patcher's code maps (a module's function extents and entry points, docs/AGENT.md): how
    # many processes swept a module for one, read one another process of the run had made, or
    # read one kept from an earlier run. None: not known (a document from an older ualdbg).
    code_maps: dict[str, int] | None = None


@dataclass
class AgentSummary:
    """How the agent ran: its library and the environment it added, what it followed and where it
    armed, the faults it did not record, and whether it was injected (--pid)."""

    library: str
    environment_added: dict[str, str]
    follow_children: bool
    armed_at: str
    out_of_scope: OutOfScope
    emulated: int
    single_stepped: int
    threads: int
    threads_started_with_sigbus_blocked: int
    sites_dropped: int
    patching: Patching
    injected: bool = False


@dataclass(frozen=True)
class AttachState:
    """A trace of a running process (--pid): whether ualdbg detached (and why) or it exited. The
    agent's (`engine` "agent") also says how many threads it armed, what it left in the process
    and how long the process stood stopped at the attach and the detach."""

    pid: int
    detached: bool
    ended_by: str | None  # q, duration, a signal's name, exit
    engine: str
    threads_armed: int | None = None
    agent_left: str | None = None
    stopped_s: dict[str, float] = field(default_factory=dict)  # attach, detach
