"""`ualdbg report --merge a.json b.json ...`: many runs (the processes of a test suite, many CI
jobs) as one trace: per-site counts summed, each run's program and processes kept."""
from __future__ import annotations

from dataclasses import replace

from ..core.model import AccessKind
from ..core.result import BlindSpot, Record, Run, Site, TraceResult
from ..core.sections import Process
from .baseline import keys_of
from .costfilter import absorb_classes


def merge(results: list[tuple[str, TraceResult]]) -> TraceResult:
    """The traces named (by file) as one: the first's program and sections, everyone's counts,
    sites (by baseline key), records, processes and blind spots, each tagged with its run."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0][1]
    sites: dict[str, Site] = {}
    runs: list[Run] = []
    processes: list[Process] = []
    records: list[Record] = []
    blind: list[BlindSpot] = []
    ignored: dict[str, int] = {}
    total = ignored_total = dropped = 0
    for index, (name, r) in enumerate(results):
        total += r.faults_total
        ignored_total += r.faults_ignored
        dropped += r.records_dropped
        for module, n in r.ignored_by_module.items():
            ignored[module] = ignored.get(module, 0) + n
        runs.append(Run(name, r.program, r.engine, r.faults_total, r.duration))
        processes += [replace(p, run=index) for p in r.processes or []]
        records += [replace(rec, run=index) for rec in r.records]
        blind += [replace(b, run=index) for b in r.blind_spots]
        for key, site in keys_of(r).items():
            have = sites.get(key)
            if have is None:
                sites[key] = replace(site, sizes=set(site.sizes), classes=dict(site.classes))
                continue
            have.count += site.count
            absorb_classes(have, site)
            have.sizes = have.sizes | site.sizes
            if have.access != site.access:
                have.access = AccessKind.READ_WRITE
    return replace(first, faults_total=total, faults_ignored=ignored_total, ignored_by_module=ignored,
                   sites=sorted(sites.values(), key=lambda s: -s.count), records=records, records_dropped=dropped,
                   processes=processes, runs=runs, merged=len(results),
                   blind_spots=blind,  # what any run did not see: the merged run did not see it either
                   duration=sum(float(r.duration or 0) for _n, r in results))
