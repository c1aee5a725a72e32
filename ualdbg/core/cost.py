"""What an unaligned access costs on x86 (issue 33): its cost class (inside one 64-byte line,
splitting a line, splitting a 4 KiB page, a split lock), the per-site counts of each, and the
estimate of time spent from the classes' measured prices (`--fail-on`: ci/costfilter.py)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any, Protocol, TypeVar

from ..lazyclass import dataclass

LINE = 64
PAGE = 4096

INSIDE = "inside-line"  # misaligned, within one cache line: almost free on x86
LINE_SPLIT = "line-split"  # spans two cache lines: a second access
PAGE_SPLIT = "page-split"  # spans two pages: a second access and possibly a second page walk
SPLIT_LOCK = "split-lock"  # a locked read-modify-write spanning two lines: a bus lock for every core
TRAPS = "traps"  # a strict CPU (under qemu-user): every counted access is a trap
UNKNOWN = "unknown"  # the engine could not tell the access's address or size

# Cheapest first: the order of a site's classes in the document and the summary (ci/costfilter.py
# ranks them the same way for --fail-on).
CLASSES = (INSIDE, LINE_SPLIT, PAGE_SPLIT, SPLIT_LOCK)
ALL_CLASSES = (*CLASSES, TRAPS, UNKNOWN)
_SEVERITY = {INSIDE: 0, LINE_SPLIT: 1, PAGE_SPLIT: 2, SPLIT_LOCK: 3, TRAPS: 4, UNKNOWN: 4}


def cost_class(va: int | None, size: int | None, locked: bool, strict: bool = False) -> str:
    """The class of one access of `size` bytes at `va`; `locked`: a locked read-modify-write
    (a lock prefix, or xchg with memory); `strict`: a CPU that traps at every misaligned access."""
    if strict:
        return TRAPS
    if va is None or size is None or size <= 0:
        return UNKNOWN
    last = va + size - 1
    if va // LINE == last // LINE:
        return INSIDE
    if locked:
        return SPLIT_LOCK
    return PAGE_SPLIT if va // PAGE != last // PAGE else LINE_SPLIT


def severity(cls: str) -> int:
    """How costly a class is, for ordering (traps and unknown rank with the costliest)."""
    return _SEVERITY.get(cls, 4)


def add_counts(into: dict[str, int], more: Mapping[str, int]) -> None:
    for cls, n in more.items():
        if n:
            into[cls] = into.get(cls, 0) + n


def classes_json(classes: Mapping[str, int]) -> dict[str, int]:
    """The counts as the document has them: cheapest first, classes without a count left out."""
    return {c: classes[c] for c in sorted(classes, key=severity) if classes[c]}


def split_counts(count: int, line_splits: int, page_splits: int, locked: bool) -> dict[str, int]:
    """A site's classes from what native code counted (the agent, the native stepper): of
    `count` accesses, `line_splits` spanned two lines, `page_splits` of them two pages too."""
    page = min(page_splits, line_splits)
    if locked:
        return {INSIDE: count - line_splits, SPLIT_LOCK: line_splits}
    return {INSIDE: count - line_splits, LINE_SPLIT: line_splits - page, PAGE_SPLIT: page}


@dataclass(frozen=True)
class CostTable:
    """What the misalignment of one access of each class costs on this CPU, in ns over its aligned
    counterpart (an aligned load, an aligned locked add: the cost probe, docs/ALIGNMENT.md "What
    it costs"), the probe's own figures, and how they were measured."""

    ns: Mapping[str, float] = field(hash=False)  # extra ns per access, by class
    measured: Mapping[str, float] = field(hash=False)  # the probe's ns per access, by what it ran
    how: str  # one line: what was measured, how, on which CPU
    note: str = ""  # what was not measured and why (a split lock the kernel would kill)

    def estimate_ns(self, classes: Mapping[str, int]) -> float | None:
        """Time spent by these accesses, or None when a class with a count has no price."""
        total = 0.0
        for cls, n in classes.items():
            if not n:
                continue
            price = self.ns.get(cls)
            if price is None:
                return None
            total += n * price
        return total

    def to_json(self) -> dict[str, Any]:
        return {"extra_ns_per_access": {c: round(v, 3) for c, v in self.ns.items()},
                "measured_ns_per_access": {c: round(v, 3) for c, v in self.measured.items()},
                "how": self.how, "note": self.note, "estimate": True}


class Costed(Protocol):
    """A site as the ranking reads it (core/result.py's Site)."""

    @property
    def count(self) -> int: ...
    @property
    def classes(self) -> Mapping[str, int]: ...


C = TypeVar("C", bound=Costed)


def rank_by_time(sites: Iterable[C], table: CostTable) -> list[tuple[C, float | None]]:
    """Sites with their estimated time (count x measured price per class), costliest first;
    sites whose time cannot be estimated (no classes, or a class without a price) last, by count."""
    out = [(s, table.estimate_ns(s.classes) if s.classes else None) for s in sites]
    return sorted(out, key=lambda p: (p[1] is None, -(p[1] or 0.0), -p[0].count))
