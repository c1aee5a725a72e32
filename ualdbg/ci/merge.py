"""`ualdbg report --merge a.json b.json ...`: many runs (the processes of a test suite, many CI
jobs) as one document: per-site counts summed, each run's program and processes kept."""
from __future__ import annotations

from typing import Any

from .baseline import keys_of
from .costfilter import absorb_json


def merge(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0][1]
    sites: dict[str, dict[str, Any]] = {}
    runs, processes, records, blind = [], [], [], []
    ignored: dict[str, int] = {}
    total = ignored_total = dropped = 0
    for index, (name, doc) in enumerate(docs):
        total += int(doc.get("faults_total") or 0)
        ignored_total += int(doc.get("faults_ignored") or 0)
        dropped += int(doc.get("records_dropped") or 0)
        for module, n in (doc.get("ignored_by_module") or {}).items():
            ignored[module] = ignored.get(module, 0) + int(n)
        runs.append({"file": name, "program": doc.get("program"), "engine": doc.get("engine"),
                     "faults_total": doc.get("faults_total"), "duration_s": doc.get("duration_s")})
        processes += [dict(p, run=index) for p in doc.get("processes") or [] if isinstance(p, dict)]
        records += [dict(r, run=index) for r in doc.get("records") or [] if isinstance(r, dict)]
        blind += [dict(b, run=index) for b in doc.get("blind_spots") or [] if isinstance(b, dict)]
        for key, site in keys_of(doc).items():
            have = sites.get(key)
            if have is None:
                sites[key] = dict(site, sizes=list(site.get("sizes") or []))
                continue
            have["count"] += int(site.get("count") or 0)
            absorb_json(have, site)
            have["sizes"] = sorted(set(have["sizes"]) | set(site.get("sizes") or []))
            if have.get("access") != site.get("access"):
                have["access"] = "read-write"
    out = {k: v for k, v in first.items() if k not in ("sites", "records", "processes", "data")}
    out.update(faults_total=total, faults_ignored=ignored_total, ignored_by_module=ignored,
               sites=sorted(sites.values(), key=lambda s: -int(s.get("count") or 0)),
               records=records, records_dropped=dropped, processes=processes, runs=runs, merged=len(docs),
               blind_spots=blind,  # what any run did not see: the merged run did not see it either
               duration_s=sum(float(d.get("duration_s") or 0) for _n, d in docs))
    return out
