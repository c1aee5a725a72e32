"""What a finished trace is, whatever engine made it: the program, the counts, each site with its
source location and what its data is, the records. render/jsondoc.py writes it as the JSON
document; engines make it: a debugger session from its recorder (engines/session.py), the agent
and the native stepper from what their native code saw (engines/agent.py, stepnative.py), several
processes merged as these objects (engines/agent.py), never as JSON."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cost import add_counts
from .model import AccessKind, SourceLoc
from .trace import TraceBuffer


class ViaDescription(Protocol):
    """The pointer a faulting address was reached through (symbols/data.py: Via)."""

    @property
    def pointer(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def function(self) -> str: ...
    @property
    def struct(self) -> str | None: ...
    @property
    def member_offset(self) -> int | None: ...
    @property
    def member_align(self) -> int | None: ...
    @property
    def packed(self) -> bool: ...
    @property
    def target_align(self) -> int | None: ...
    @property
    def pointer_misaligned(self) -> bool: ...


class DataDescription(Protocol):
    """What the data at a faulting address is (symbols/data.py: DataRef), as render/ reads it."""

    @property
    def text(self) -> str: ...
    @property
    def via(self) -> ViaDescription | None: ...
    def to_json(self) -> dict[str, Any]: ...


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
    data: DataDescription | None = None
    # The agent's hot-site patching (issue 21): a patched site's count is exact, `trapped` of its
    # faults trapped (and have records); an unpatchable site says why it traps at every fault.
    patched: bool = False
    trapped: int | None = None
    unpatchable: str | None = None
    # What its accesses cost on x86 (issue 33; core/cost.py): the count of each class (empty: the
    # engine could not tell), and whether a SIMD register moves the data.
    classes: dict[str, int] = field(default_factory=dict)
    vector: bool = False

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
             data_at: Mapping[int, DataDescription] | None = None) -> list[Site]:
    """The buffer's per-PC counters as sites, hottest first, each named by `resolve`."""
    return [Site(resolve(c.pc), c.count, set(c.sizes), c.access, data_at.get(c.pc) if data_at is not None else None,
                 classes=dict(c.classes), vector=c.vector)
            for c in buffer.sites()]


@dataclass
class StepSummary:
    """A debugger's step engine (engines/step.py): its scope, its policy, what it stepped."""

    scope: str
    policy: str
    steps: int
    entries: int
    calls_run: int


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
    counts what the kind is about (times a thread went blind, processes, faults)."""

    kind: str
    text: str  # one line for a person
    count: int
    threads: int | None = None
    seconds: float | None = None
    pid: int | None = None
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "count": self.count, "text": self.text}
        for key in ("threads", "seconds", "pid", "path"):
            value = getattr(self, key)
            if value is not None:
                out[key] = round(value, 6) if isinstance(value, float) else value
        return out


@dataclass
class TraceResult:
    """One trace, as the JSON document has it (render/jsondoc.py, build_document)."""

    engine: str
    debugger: str
    arch: str
    version: str
    program: ProgramInfo
    scope: str  # which code counts, in words
    buffer: TraceBuffer  # the counts, the ignored faults, the records and the duration
    sites: list[Site]
    recording: bool
    # Faults counted without a record (the agent's patched sites): not records the ring dropped.
    unrecorded: int = 0
    step: StepSummary | None = None
    # What the engine knows it did not see (issue 29): a gate cannot call such a run clean.
    blind_spots: list[BlindSpot] = field(default_factory=list)

    @property
    def records_dropped(self) -> int:
        return max(0, self.buffer.dropped - self.unrecorded)
