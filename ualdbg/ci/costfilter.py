"""`--fail-on split-lock|page-split|line-split|any` (issue 33): which accesses a gate, a report and
a baseline count, by cost class (core/cost.py): the class named and every costlier one; `any`
(the default) is every unaligned access ualdbg counts, as before classes existed."""
from __future__ import annotations

from typing import Any

from ..core.cost import FAIL_ON, selected, site_selected_count

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


__all__ = ["FAIL_ON", "HELP", "filtered", "noun", "selected_sites"]
