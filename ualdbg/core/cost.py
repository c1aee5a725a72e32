"""What an unaligned access costs on x86 (issue 33): its cost class (inside one 64-byte line,
splitting a line, splitting a 4 KiB page, a split lock), the per-site counts of each, the filter
`--fail-on` gates with, and the estimate of time spent from the classes' measured prices."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LINE = 64
PAGE = 4096

INSIDE = "inside-line"  # misaligned, within one cache line: almost free on x86
LINE_SPLIT = "line-split"  # spans two cache lines: a second access
PAGE_SPLIT = "page-split"  # spans two pages: a second access and possibly a second page walk
SPLIT_LOCK = "split-lock"  # a locked read-modify-write spanning two lines: a bus lock for every core
TRAPS = "traps"  # a strict CPU (under qemu-user): every counted access is a trap
UNKNOWN = "unknown"  # the engine could not tell the access's address or size

# Cheapest first: the order of the summary's columns, and of `--fail-on` (each name selects its
# class and every costlier one, so that a gate can start at split-lock and tighten later).
CLASSES = (INSIDE, LINE_SPLIT, PAGE_SPLIT, SPLIT_LOCK)
ALL_CLASSES = (*CLASSES, TRAPS, UNKNOWN)
FAIL_ON = ("split-lock", "page-split", "line-split", "any")
_SEVERITY = {INSIDE: 0, LINE_SPLIT: 1, PAGE_SPLIT: 2, SPLIT_LOCK: 3, TRAPS: 4, UNKNOWN: 4}
_FAIL_RANK = {"split-lock": 3, "page-split": 2, "line-split": 1, "any": 0}


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


def selected(cls: str, fail_on: str) -> bool:
    """Whether an access of class `cls` counts under `--fail-on fail_on`: its class and every
    costlier one; an access whose class is unknown, or a strict CPU's trap, counts under every
    filter (the gate does not call what it cannot tell cheap)."""
    return severity(cls) >= _FAIL_RANK[fail_on]


def check_fail_on(name: str) -> str:
    """`name` if it is a --fail-on value; ValueError naming the valid ones otherwise."""
    if name not in _FAIL_RANK:
        raise ValueError(f"unknown --fail-on {name!r}; valid: {', '.join(FAIL_ON)}")
    return name


def site_selected_count(site: Mapping[str, Any], fail_on: str) -> int:
    """A JSON site's accesses that count under `fail_on`: all of them for `any`, or for a site
    without classes (a document of an engine or version that has none: not known to be cheap)."""
    classes = site.get("classes")
    if fail_on == "any" or not isinstance(classes, dict):
        return int(site.get("count") or 0)
    return sum(int(n) for c, n in classes.items() if isinstance(n, int) and selected(str(c), fail_on))


def selected_total(doc: Mapping[str, Any], fail_on: str) -> int:
    """The document's accesses in scope that count under `fail_on` (faults_total for `any`)."""
    if fail_on == "any":
        return int(doc.get("faults_total") or 0)
    return sum(site_selected_count(s, fail_on) for s in doc.get("sites") or [] if isinstance(s, dict))


def worst(classes: Mapping[str, int]) -> str | None:
    """The costliest class with a count."""
    have = [c for c, n in classes.items() if n]
    return max(have, key=severity) if have else None


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


def rank_by_time(sites: Iterable[dict[str, Any]], table: CostTable) -> list[tuple[dict[str, Any], float | None]]:
    """JSON sites with their estimated time (count x measured price per class), costliest first;
    sites whose time cannot be estimated last, by count."""
    out = [(s, table.estimate_ns(s["classes"]) if isinstance(s.get("classes"), dict) else None) for s in sites]
    return sorted(out, key=lambda p: (p[1] is None, -(p[1] or 0.0), -int(p[0].get("count") or 0)))


def absorb_json(into: dict[str, Any], site: Mapping[str, Any]) -> None:
    """A JSON site's classes and vector flag added to another's (merged runs, --by groups); a
    site without classes makes the sum's unknown (the key goes)."""
    mine, theirs = into.get("classes"), site.get("classes")
    if isinstance(mine, dict) and isinstance(theirs, dict):
        mine = into["classes"] = dict(mine)
        add_counts(mine, theirs)
        into["vector"] = bool(into.get("vector")) or bool(site.get("vector"))
    else:
        into.pop("classes", None)
        into.pop("vector", None)
