"""`ualdbg report --merge a.json b.json ...`: many runs (the processes of a test suite, many CI
jobs) as one document: the counts of each instruction summed, every site of every input kept (its
faults add up to faults_total), each run's program and processes kept as that run's."""
from __future__ import annotations

from typing import Any

from .costfilter import absorb_json
from .fingerprint import instruction_key


def _runs_of(name: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a document holds: its own, or a merged document's runs (a merge of merges keeps
    every run, numbered anew)."""
    inner = doc.get("runs")
    if doc.get("merged") and isinstance(inner, list) and inner and all(isinstance(r, dict) for r in inner):
        return [dict(r) for r in inner]
    return [{"file": name, "program": doc.get("program"), "engine": doc.get("engine"),
             "faults_total": doc.get("faults_total"), "duration_s": doc.get("duration_s")}]


def _renumbered(items: Any, base: int, own: bool) -> list[dict[str, Any]]:
    """A document's processes, records or blind spots, each with the number of its run in the
    merged document (`own`: the document is one run; else each item keeps its run, shifted)."""
    out = []
    for item in items or []:
        if isinstance(item, dict):
            run = item.get("run")
            out.append(dict(item, run=base if own or not isinstance(run, int) else base + run))
    return out


def merge(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0][1]
    sites: dict[tuple[Any, ...], dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    blind: list[dict[str, Any]] = []
    ignored: dict[str, int] = {}
    total = ignored_total = dropped = 0
    for name, doc in docs:
        total += int(doc.get("faults_total") or 0)
        ignored_total += int(doc.get("faults_ignored") or 0)
        dropped += int(doc.get("records_dropped") or 0)
        for module, n in (doc.get("ignored_by_module") or {}).items():
            ignored[module] = ignored.get(module, 0) + int(n)
        base, inner = len(runs), _runs_of(name, doc)
        own = len(inner) == 1 and not doc.get("merged")
        runs += inner
        processes += _renumbered(doc.get("processes"), base, own)
        records += _renumbered(doc.get("records"), base, own)
        blind += _renumbered(doc.get("blind_spots"), base, own)  # what a run did not see, the merge did not either
        for site in doc.get("sites") or []:
            key = instruction_key(site)
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
               records=records, records_dropped=dropped, processes=processes, runs=runs, merged=len(runs),
               blind_spots=blind, duration_s=sum(float(d.get("duration_s") or 0) for _n, d in docs))
    return out
