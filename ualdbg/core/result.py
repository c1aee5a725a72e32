"""What a finished trace is, whatever engine made it or document it was read from: the program,
the counts, each site with its source location and data, the records, what the engine knows it
did not see, and the sections some engines add (core/sections.py). Engines make it (a debugger
session from its recorder, the agent and the native stepper from what their native code saw,
several processes merged as these objects, never as JSON); render/, the advice, the gate,
baselines and merges read it. The JSON document is its picture: core/document.py builds it and
loads it back, and no other module reads or writes that JSON."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field

from ..lazyclass import dataclass
from .cost import add_counts
from .dataref import DataRef
from .model import AccessKind, Fault, SourceLoc
from .sections import AgentSummary, AttachState, NativeStep, Process, StepSummary
from .trace import TraceBuffer


@dataclass
class ProgramInfo:
    path: str | None = None
    args: list[str] = field(default_factory=list)
    pid: int | None = None
    exit_status: int | None = None
    exit_signal: int | None = None


# Why a site kept trapping when it trapped no more than --patch-after times in any process (the
# agent engine's hot-site patching, issue 34): the agent never tried.
FEW_TRAPS = "too few traps in its process to be patched"


@dataclass
class Site:
    """One faulting instruction: where it is, how often it faulted, with which sizes and access,
    and what the data at its first faulting address is."""

    loc: SourceLoc
    count: int
    sizes: set[int]
    access: AccessKind | None
    data: DataRef | None = None
    # The agent's hot-site patching (issue 21): a patched site's count is exact, `trapped` of its
    # faults trapped (and have records); an unpatchable site says why it traps at every fault.
    patched: bool = False
    trapped: int | None = None
    unpatchable: str | None = None
    # What its accesses cost on x86 (issue 33; core/cost.py): the count of each class (empty: the
    # engine could not tell), and whether a SIMD register moves the data.
    classes: dict[str, int] = field(default_factory=dict)
    vector: bool = False

    @property
    def pc(self) -> int:
        return self.loc.pc

    def absorb(self, other: Site) -> None:
        """Add the faults of the same instruction in another process image."""
        self.count += other.count
        if other.patched:
            before = self.trapped if self.trapped is not None else self.count - other.count
            self.trapped = before + (other.trapped or 0)
            self.patched = True
        elif self.patched:
            self.trapped = (self.trapped or 0) + other.count
        if other.unpatchable is not None and (self.unpatchable is None or self.unpatchable == FEW_TRAPS):
            self.unpatchable = other.unpatchable  # (a refusal says more than too few traps somewhere)
        self.sizes = self.sizes | other.sizes
        self.classes = dict(self.classes)
        add_counts(self.classes, other.classes)
        self.vector = self.vector or other.vector
        if other.access is not None:
            self.access = other.access if self.access is None else self.access.merge(other.access)


def sites_of(buffer: TraceBuffer, resolve: Callable[[int], SourceLoc],
             data_at: Mapping[int, DataRef] | None = None) -> list[Site]:
    """The buffer's per-PC counters as sites, hottest first, each named by `resolve`."""
    return [Site(resolve(c.pc), c.count, set(c.sizes), c.access, data_at.get(c.pc) if data_at is not None else None,
                 classes=dict(c.classes), vector=c.vector)
            for c in buffer.sites()]


@dataclass(frozen=True, slots=True)
class Record:
    """One fault the ring kept: when, where (thread, CPU), its PC and the access it made (VA,
    size, read/write) when the instruction was decoded. `run`: which document of a merge."""

    seq: int
    time: float  # seconds since the trace started, to the microsecond
    cpu: int | None
    pid: int | None
    tid: int | None
    pc: int
    va: int | None
    size: int | None
    access: AccessKind | None
    run: int | None = None
    cost: str | None = None  # its cost class on x86 (issue 33; core/cost.py), `class` in the JSON

    @classmethod
    def of_fault(cls, f: Fault) -> Record:
        return cls(f.seq, round(f.time, 6), f.cpu, f.pid, f.tid, f.pc, f.va, f.size, f.access, cost=f.cost)


@dataclass(frozen=True)
class FaultReport:
    """What a break stop reports of one fault (render/report.py writes it): the fault, where it
    is, its source line (when the `source` setting is on), what its data is, and whether the step
    engine checked the access before it executed."""

    fault: Fault
    loc: SourceLoc
    source_text: str | None = None
    data: DataRef | None = None
    checked_before: bool = False


# The kinds of blind spot, `blind_spots[].kind` in the JSON (docs/CI.md, "Incomplete runs").
BLIND_KINDS = {
    "sigbus-blocked": "threads ran armed with SIGBUS blocked by the program (its mask): AC was clear there",
    "handler-unarmed": "the program's signal handlers ran with SIGBUS blocked, unarmed",
    "sigbus-taken": "the program took SIGBUS over without libc's sigaction: its faults reached the program",
    "untraced-process": "processes the agent could not enter (static, setuid, another architecture, LD_PRELOAD "
                        "stripped, a seccomp filter)",
    "uncounted-faults": "faults the engine stepped over without counting (the site table was full)",
}


@dataclass(frozen=True)
class BlindSpot:
    """Part of a run that no engine watched: a fault there is neither trapped nor counted. `count`
    counts what the kind is about (times a thread went blind, processes, faults). `run`: which
    document of a merge."""

    kind: str
    text: str  # one line for a person
    count: int
    threads: int | None = None
    seconds: float | None = None
    pid: int | None = None
    path: str | None = None
    run: int | None = None


@dataclass(frozen=True)
class Run:
    """One document of a merge (`report --merge`): its file, program, engine and figures."""

    file: str
    program: ProgramInfo
    engine: str | None
    faults_total: int
    duration: float | None


@dataclass
class TraceResult:
    """One trace: every field of the JSON document (core/document.py), typed. The optional
    sections are None (or False) where the engine has none: `step` (a step engine), `processes`
    and `agent` (the agent), `notes`, `partial` and `interrupted_by` (a run cut short by a
    signal), `attached` (--pid), `runs` and `merged` (`report --merge`), `fail_on` (`report
    --fail-on`)."""

    engine: str | None
    debugger: str | None
    arch: str | None
    version: str
    program: ProgramInfo
    scope: str | None  # which code counts, in words
    duration: float | None  # seconds, to the microsecond (duration_s)
    faults_total: int
    faults_ignored: int
    ignored_by_module: dict[str, int]  # in the order the document has them
    capacity: int | None  # the ring's
    recording: bool
    sites: list[Site]
    records: Sequence[Record]  # the ring, oldest first (the agent's: a table, engines/records.py)
    records_dropped: int
    # What the engine knows it did not see (issue 29): a gate cannot call such a run clean.
    blind_spots: list[BlindSpot] = field(default_factory=list)
    step: StepSummary | NativeStep | None = None
    processes: list[Process] | None = None
    agent: AgentSummary | None = None
    notes: list[str] | None = None
    partial: bool = False
    interrupted_by: str | None = None
    attached: AttachState | None = None
    runs: list[Run] | None = None
    merged: int | None = None
    fail_on: str | None = None  # report --fail-on: the cost classes this trace keeps (ci/costfilter.py)

    @classmethod
    def of_buffer(cls, buffer: TraceBuffer, *, engine: str, debugger: str, arch: str, version: str,
                  program: ProgramInfo, scope: str, sites: list[Site], recording: bool,
                  records: Sequence[Record] | None = None, unrecorded: int = 0) -> TraceResult:
        """A trace from an engine's buffer: its counts and duration, and its records (the ring's
        faults unless the engine has them as a table). `unrecorded`: faults counted without a
        record (the agent's patched sites), which did not fall out of the ring."""
        if records is None:
            records = [Record.of_fault(f) for f in buffer.records]
        return cls(engine=engine, debugger=debugger, arch=arch, version=version, program=program, scope=scope,
                   duration=round(buffer.duration, 6), faults_total=buffer.total, faults_ignored=buffer.ignored,
                   ignored_by_module=dict(sorted(buffer.ignored_by_module.items())), capacity=buffer.capacity,
                   recording=recording, sites=sites, records=records,
                   records_dropped=max(0, buffer.total - len(records) - unrecorded))

    def note(self, text: str) -> None:
        """Add a note for the reader of the report and the document."""
        if self.notes is None:
            self.notes = []
        self.notes.append(text)

    def interrupt(self, by: str) -> None:
        """The run was cut short by the signal `by`: what was recorded up to then is kept."""
        self.partial, self.interrupted_by = True, by
