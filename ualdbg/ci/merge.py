"""`ualdbg report --merge a.json b.json ...`: many runs (the processes of a test suite, many CI
jobs) as one trace: the counts of each instruction summed, every site of every input kept (its
faults add up to faults_total), each run's program and processes kept as that run's."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from ..core.model import AccessKind
from ..core.result import BlindSpot, Record, Run, Site, TraceResult
from ..core.sections import Process
from .costfilter import absorb_classes
from .fingerprint import instruction_key

R = TypeVar("R", Process, Record, BlindSpot)


def _runs_of(name: str, result: TraceResult) -> list[Run]:
    """The runs a trace holds: its own, or a merged trace's runs (a merge of merges keeps every
    run, numbered anew)."""
    if result.merged and result.runs:
        return list(result.runs)
    return [Run(name, result.program, result.engine, result.faults_total, result.duration)]


def _renumbered(items: Iterable[R], base: int, own: bool) -> list[R]:
    """A trace's processes, records or blind spots, each with the number of its run in the merged
    trace (`own`: the trace is one run; else each item keeps its run, shifted)."""
    return [replace(item, run=base if own or item.run is None else base + item.run) for item in items]


def merge(results: list[tuple[str, TraceResult]]) -> TraceResult:
    """The traces named (by file) as one: the first's program and sections, everyone's counts,
    sites (by instruction), records, processes and blind spots, each tagged with its run."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0][1]
    sites: dict[tuple[Any, ...], Site] = {}
    runs: list[Run] = []
    processes: list[Process] = []
    records: list[Record] = []
    blind: list[BlindSpot] = []
    ignored: dict[str, int] = {}
    total = ignored_total = dropped = 0
    for name, r in results:
        total += r.faults_total
        ignored_total += r.faults_ignored
        dropped += r.records_dropped
        for module, n in r.ignored_by_module.items():
            ignored[module] = ignored.get(module, 0) + n
        base, inner = len(runs), _runs_of(name, r)
        own = len(inner) == 1 and not r.merged
        runs += inner
        processes += _renumbered(r.processes or [], base, own)
        records += _renumbered(r.records, base, own)
        blind += _renumbered(r.blind_spots, base, own)  # what a run did not see, the merge did not either
        for site in r.sites:
            key = instruction_key(site)
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
                   processes=processes, runs=runs, merged=len(runs), blind_spots=blind,
                   duration=sum(float(r.duration or 0) for _n, r in results))
