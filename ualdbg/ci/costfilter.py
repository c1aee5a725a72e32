"""`--fail-on split-lock|page-split|line-split|any` (issue 33): which accesses a gate, a report and
a baseline count, by cost class (core/cost.py): the class named and every costlier one; `any`
(the default) is every unaligned access ualdbg counts, as before classes existed."""
from __future__ import annotations

from dataclasses import replace

from ..core.result import Site, TraceResult

FAIL_ON = ("split-lock", "page-split", "line-split", "any")
# core/cost.py's classes, cheapest first (tests/unit/test_cost.py holds the two to the same
# names); traps (a strict CPU) and unknown rank with the costliest.
RANK = {"inside-line": 0, "line-split": 1, "page-split": 2, "split-lock": 3}
_FAIL_RANK = {"split-lock": 3, "page-split": 2, "line-split": 1, "any": 0}

HELP = ("which unaligned accesses count, by what they cost on x86: split-lock (locked instructions across "
        "a cache line), page-split (also accesses across a 4 KiB page), line-split (also across a 64-byte "
        "line), any (every unaligned access: the default)")
NOUNS = {  # (one, many)
    "split-lock": ("split lock", "split locks"),
    "page-split": ("page split or split lock", "page splits or split locks"),
    "line-split": ("line split, page split or split lock", "line splits, page splits or split locks"),
    "any": ("unaligned access", "unaligned accesses"),
}


def noun(fail_on: str, n: int) -> str:
    """`3 split locks`, `1 unaligned access`."""
    one, many = NOUNS[fail_on]
    return f"{n:,} {one if n == 1 else many}"


def selected(cls: str, fail_on: str) -> bool:
    """Whether an access of class `cls` counts under `--fail-on fail_on`: its class and every
    costlier one; an access whose class is unknown, or a strict CPU's trap, counts under every
    filter (the gate does not call what it cannot tell cheap)."""
    return RANK.get(cls, 4) >= _FAIL_RANK[fail_on]


def site_selected_count(site: Site, fail_on: str) -> int:
    """A site's accesses that count under `fail_on`: all of them for `any`, or for a site
    without classes (a document of an engine or version that has none: not known to be cheap)."""
    if fail_on == "any" or not site.classes:
        return site.count
    return sum(n for c, n in site.classes.items() if selected(c, fail_on))


def selected_total(result: TraceResult, fail_on: str) -> int:
    """The trace's accesses in scope that count under `fail_on` (faults_total for `any`)."""
    if fail_on == "any":
        return result.faults_total
    return sum(site_selected_count(s, fail_on) for s in result.sites)


def absorb_classes(into: Site, site: Site) -> None:
    """A site's classes and vector flag added to another's (merged runs, --by groups); a site
    without classes makes the sum's unknown (its classes go)."""
    if into.classes and site.classes:
        mine = into.classes = dict(into.classes)
        for cls, n in site.classes.items():
            mine[cls] = mine.get(cls, 0) + n
        into.vector = into.vector or site.vector
    else:
        into.classes, into.vector = {}, False


def selected_sites(result: TraceResult, fail_on: str) -> list[Site]:
    """The trace's sites with an access that counts under `fail_on`."""
    return [s for s in result.sites if site_selected_count(s, fail_on)]


def filtered(result: TraceResult, fail_on: str) -> TraceResult:
    """A copy of the trace with only what counts under `fail_on`: each site's count becomes its
    selected accesses (its classes too), records of other classes go, `faults_total` is their
    sum, and `fail_on` says which filter made it. `any`: the trace itself."""
    if fail_on == "any":
        return result
    sites = [replace(s, count=site_selected_count(s, fail_on),
                     classes={c: n for c, n in s.classes.items() if selected(c, fail_on)})
             for s in selected_sites(result, fail_on)]
    keep = {s.pc for s in sites}
    records = [r for r in result.records if r.pc in keep and selected(r.cost or "unknown", fail_on)]
    return replace(result, sites=sites, records=records, faults_total=sum(s.count for s in sites), fail_on=fail_on,
                   records_dropped=0 if not records else result.records_dropped)
