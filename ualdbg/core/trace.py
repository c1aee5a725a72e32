"""The FLT-style trace buffer: a bounded ring of fault records plus exact per-PC counters that
stay exact however often the ring wraps."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import field
from typing import Iterator

from ..lazyclass import dataclass
from .model import AccessKind, Fault

DEFAULT_BUFFER = 100_000


@dataclass
class PcCounter:
    """Everything the summary needs about one exception PC, kept exactly."""

    pc: int
    count: int = 0
    sizes: set[int] = field(default_factory=set)
    access: AccessKind | None = None
    insn: str | None = None
    # accesses per cost class (core/cost.py), exactly; whether the instruction is a vector one
    classes: dict[str, int] = field(default_factory=dict)
    vector: bool = False

    def add(self, fault: Fault) -> None:
        self.count += 1
        if fault.cost is not None:
            self.classes[fault.cost] = self.classes.get(fault.cost, 0) + 1
        self.vector = self.vector or fault.vector
        if fault.size is not None:
            self.sizes.add(fault.size)
        if fault.access is not None:
            self.access = fault.access if self.access is None else self.access.merge(fault.access)
        if self.insn is None:
            self.insn = fault.insn


class TraceBuffer:
    """Records faults in scope; counts the ones out of scope as ignored."""

    def __init__(self, capacity: int = DEFAULT_BUFFER) -> None:
        if capacity <= 0:
            raise ValueError(f"buffer size must be a positive number of records, not {capacity}")
        self.capacity = capacity
        self.records: deque[Fault] = deque(maxlen=capacity)
        self.counters: dict[int, PcCounter] = {}
        self.total = 0
        self.ignored = 0
        self.ignored_by_module: dict[str, int] = {}
        self.started_at = time.monotonic()
        self.stopped_at: float | None = None
        self.recording = False

    # -- recording -------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.started_at

    def next_seq(self) -> int:
        return self.total + 1

    def add(self, fault: Fault) -> None:
        self.total += 1
        self.records.append(fault)
        counter = self.counters.get(fault.pc)
        if counter is None:
            counter = self.counters[fault.pc] = PcCounter(fault.pc)
        counter.add(fault)

    def ignore(self, module: str | None, count: int = 1) -> None:
        """`count` faults out of scope, in `module` (None: not in a known module)."""
        self.ignored += count
        key = module or "?"
        self.ignored_by_module[key] = self.ignored_by_module.get(key, 0) + count

    def count_site(self, pc: int, count: int, insn: str | None = None) -> PcCounter:
        """`count` faults in scope at `pc`, counted by an engine's native code (the agent's site
        table, the stepper's): their counter, for the caller to add sizes and accesses to."""
        counter = self.counters[pc] = PcCounter(pc, count=count, insn=insn)
        self.total += count
        return counter

    def clear(self) -> None:
        self.records.clear()
        self.counters.clear()
        self.total = 0
        self.ignored = 0
        self.ignored_by_module.clear()
        self.started_at = time.monotonic()
        self.stopped_at = None

    def resize(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"buffer size must be a positive number of records, not {capacity}")
        self.capacity = capacity
        self.records = deque(self.records, maxlen=capacity)

    # -- reading ---------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        return self.total - len(self.records)

    @property
    def duration(self) -> float:
        end = self.stopped_at if self.stopped_at is not None else time.monotonic()
        return max(0.0, end - self.started_at)

    def rate(self) -> float:
        d = self.duration
        return self.total / d if d > 0 else 0.0

    def sites(self) -> list[PcCounter]:
        """Per-PC counters, hottest first (ties by PC so output is stable)."""
        return sorted(self.counters.values(), key=lambda c: (-c.count, c.pc))

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.records)
