"""`--fail-on split-lock|page-split|line-split|any` (issue 33): which accesses a gate, a report and
a baseline count, by cost class (core/cost.py): the class named and every costlier one; `any`
(the default) is every unaligned access ualdbg counts, as before classes existed."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAIL_ON = ("split-lock", "page-split", "line-split", "any")
# core/cost.py's classes, cheapest first (ci does not import core: tests/unit/test_cost.py holds
# the two to the same names); traps (a strict CPU) and unknown rank with the costliest.
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


def absorb_json(into: dict[str, Any], site: Mapping[str, Any]) -> None:
    """A JSON site's classes and vector flag added to another's (merged runs, --by groups); a
    site without classes makes the sum's unknown (the key goes)."""
    mine, theirs = into.get("classes"), site.get("classes")
    if isinstance(mine, dict) and isinstance(theirs, dict):
        mine = into["classes"] = dict(mine)
        for cls, n in theirs.items():
            mine[cls] = mine.get(cls, 0) + n
        into["vector"] = bool(into.get("vector")) or bool(site.get("vector"))
    else:
        into.pop("classes", None)
        into.pop("vector", None)


def selected_sites(doc: dict[str, Any], fail_on: str) -> list[dict[str, Any]]:
    """The document's sites with an access that counts under `fail_on`."""
    return [s for s in doc.get("sites") or [] if isinstance(s, dict) and site_selected_count(s, fail_on)]


def filtered(doc: dict[str, Any], fail_on: str) -> dict[str, Any]:
    """A copy of the document with only what counts under `fail_on`: each site's count becomes
    its selected accesses (its classes too), records of other classes go, `faults_total` is
    their sum, and `fail_on` says which filter made it. `any`: the document itself."""
    if fail_on == "any":
        return doc
    sites = []
    for s in selected_sites(doc, fail_on):
        site = dict(s, count=site_selected_count(s, fail_on))
        if isinstance(s.get("classes"), dict):
            site["classes"] = {c: n for c, n in s["classes"].items() if selected(c, fail_on)}
        sites.append(site)
    keep = {s["pc"] for s in sites}
    records = [r for r in doc.get("records") or []
               if r.get("pc") in keep and selected(str(r.get("class", "unknown")), fail_on)]
    out = dict(doc, sites=sites, records=records, faults_total=sum(s["count"] for s in sites), fail_on=fail_on)
    out["records_dropped"] = 0 if not records else doc.get("records_dropped", 0)
    return out


