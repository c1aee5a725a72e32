"""Rich tables for people: `trace show` (one row per fault, FLT SHOW TRACE) and
`trace show --summary` (counts per exception PC or group, FLT SHOW TRACE/SUMMARY), and the
header and blind-spot lines above them, all from a TraceResult (core/result.py)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..ci.costfilter import absorb_classes
from ..core.cost import CostTable, classes_json, rank_by_time
from ..core.model import AccessKind
from ..core.result import ProgramInfo, Site, TraceResult
from .console import shown

if TYPE_CHECKING:  # rich is imported by the tables that need it: a run with nothing to tabulate prints
    from rich.console import Group  # the header alone, without it (issue 34)
    from rich.table import Table

GROUPS = ("pc", "line", "function", "module")


def group_sites(sites: list[Site], by: str) -> list[Site]:
    """Aggregate per-PC sites by line, function or module (counts add, sizes union), hottest
    first; each group is named by its first site."""
    if by == "pc":
        return sites

    def key(s: Site) -> tuple[Any, ...]:
        loc = s.loc
        if by == "line":
            return (loc.module_name, loc.file, loc.line) if loc.line else (loc.module_name, loc.pc)
        if by == "function":
            return (loc.module_name, loc.function or loc.pc)
        return (loc.module_name,)

    groups: dict[tuple[Any, ...], Site] = {}
    for s in sites:
        k = key(s)
        g = groups.get(k)
        if g is None:
            groups[k] = replace(s, sizes=set(s.sizes))
            continue
        g.count += s.count
        absorb_classes(g, s)
        g.sizes = g.sizes | s.sizes
        if g.access != s.access:
            g.access = AccessKind.READ_WRITE if g.access and s.access else (g.access or s.access)
    return sorted(groups.values(), key=lambda g: -g.count)


def where(site: Site) -> str:
    """function+offset, or "?"."""
    if site.loc.function:
        return f"{shown(site.loc.function)}+{site.loc.function_offset or 0:#x}"
    return "?"


def _module_offset(site: Site) -> str:
    loc = site.loc
    if loc.module_name and loc.offset is not None:
        return f"{shown(loc.module_name)}+{loc.offset:#x}"
    return shown(loc.module_name or "?")


def _source(site: Site) -> str:
    loc = site.loc
    text = f"{shown(loc.file)}:{loc.line}" if loc.file and loc.line else "?"
    for frame in loc.inlined_from:
        text += f"\n  inlined into {shown(frame.function)} at {shown(frame.file or '?')}:{shown(frame.line or '?')}"
    return text


def header(result: TraceResult) -> str:
    total, ignored = result.faults_total, result.faults_ignored
    dur = result.duration or 0.0
    rate = total / dur if dur > 0 else 0.0
    ring = f"{len(result.records)} of {'?' if result.capacity is None else result.capacity} records kept"
    if result.records_dropped:
        ring += f", {result.records_dropped} older dropped"
    prog = result.program
    via = "in-process" if result.debugger == "none" else f"via {result.debugger}"
    if result.engine == "step" and result.debugger == "none":
        via = "native ptrace stepper"
    status = ""
    if prog.exit_signal is not None:
        status = f", killed by signal {prog.exit_signal}"
    elif prog.exit_status is not None:
        status = f", exit status {prog.exit_status}"
    if result.partial:
        status += f"; PARTIAL: interrupted by {result.interrupted_by or 'a signal'}"
    if result.merged:
        status += f"; {result.merged} run{'s' if result.merged != 1 else ''} merged"
    return shown(
        f"Unaligned accesses in {programs_named(result)}{status}\n"
        f"  {total} in scope ({result.scope}), {ignored} ignored elsewhere\n"
        f"  {dur:.3f} s, {rate:,.0f}/s; engine {result.engine} {via}; {ring}", newlines=True)


def _names(paths: list[str], most: int = 3) -> str:
    """`a, b and c`, `a, b, c and 4 more`: each program once, in order."""
    seen = list(dict.fromkeys(shown(p) for p in paths))
    if len(seen) > most:
        return f"{', '.join(seen[:most])} and {len(seen) - most} more"
    return seen[0] if len(seen) == 1 else f"{', '.join(seen[:-1])} and {seen[-1]}"


def programs_named(result: TraceResult) -> str:
    """Whose accesses the report counts: every program of a merged trace (not only the first
    run's); the programs that faulted when the one named on the command line did not (a driver
    such as make or a shell: `check -- make check`); else the program."""
    prog: ProgramInfo = result.program
    path = prog.path or "the program"
    run_paths = [r.program.path for r in result.runs or [] if isinstance(r.program.path, str)]
    if run_paths:
        return _names(run_paths)
    procs = [p for p in result.processes or [] if isinstance(p.path, str)]
    root = next((p for p in procs if p.pid == prog.pid), None)
    faulted = [p.path for p in procs if p is not root and p.faults_total and p.path is not None]
    if faulted and (root is None or not root.faults_total):
        return f"{_names(faulted)} (run by {shown(path)})"
    return shown(path)


def patch_note(result: TraceResult) -> str | None:
    """The agent's note that patched sites left faults without a record (engines/agent.py), for
    where the records are shown or written."""
    note = result.agent.patching.note if result.agent is not None else None
    return shown(note) if isinstance(note, str) else None


def blind_lines(result: TraceResult) -> list[str]:
    """What the run did not see (the trace's blind spots, issue 29), one line each."""
    spots = result.blind_spots
    if not spots:
        return []
    return [f"INCOMPLETE: {len(spots)} part{'s' if len(spots) != 1 else ''} of the run not seen:"] + [
        f"  not seen: {shown(b.text or b.kind)}" for b in spots]


_SHORT = {"inside-line": "in line", "line-split": "line split", "page-split": "page split",
          "split-lock": "SPLIT LOCK", "traps": "traps", "unknown": "unknown"}


def cost_cell(site: Site) -> str:
    """`3 in line, 5 line split, 7 page split; vector` (issue 33), `?` without classes."""
    if not site.classes:
        return "?"
    text = ", ".join(f"{n} {_SHORT.get(c, c)}" for c, n in classes_json(site.classes).items() if n)
    return text + ("; vector" if site.vector else "")


def _ns(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns >= 1e6 else f"{ns / 1e3:,.2f} us" if ns >= 1e3 else f"{ns:,.1f} ns"


def cost_lines(costs: CostTable) -> list[str]:
    """What the estimate column is and how its prices were measured."""
    prices = ", ".join(f"{c} {v:.2f}" for c, v in costs.ns.items())
    return [f"est. extra: an ESTIMATE of the time the misalignment cost, count x the extra ns per access over an "
            f"aligned one ({prices}), {costs.how}" + (f"; {costs.note}" if costs.note else "")]


def summary_table(result: TraceResult, by: str = "pc", costs: CostTable | None = None,
                  limit: int | None = None) -> Table | Group:
    """Counts per site or group, hottest first; with `costs` (the cost probe's prices, issue 33)
    ranked by the estimated extra time instead, in a column of its own; `limit`: the first N rows
    only, and a line saying how many were left out."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .advice import data_advice_table

    sites = group_sites(result.sites, by)
    classed = any(s.classes for s in sites)
    estimates: dict[int, float | None] = {}
    if costs is not None and classed:
        ranked = rank_by_time(sites, costs)
        sites = [s for s, _t in ranked]
        estimates = {id(s): t for s, t in ranked}
    left_out = len(sites) - limit if limit and len(sites) > limit else 0
    if limit and left_out:
        sites = sites[:limit]
    total = result.faults_total or 1
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    # overflow="fold": on a narrow terminal a cell wraps; an address cut to "0x5555…" is useless.
    table.add_column("count", justify="right", overflow="fold")
    table.add_column("share", justify="right", overflow="fold")
    if by == "pc":
        table.add_column("PC", overflow="fold")
    table.add_column("module+offset" if by in ("pc", "line") else "module", overflow="fold")
    if by != "module":
        table.add_column("routine+offset" if by == "pc" else "routine", overflow="fold")
    if by in ("pc", "line"):
        table.add_column("source", overflow="fold")
    table.add_column("size", overflow="fold")
    table.add_column("access", overflow="fold")
    if classed:
        table.add_column("cost class", overflow="fold")
    if estimates:
        table.add_column("est. extra", justify="right", overflow="fold")
    for s in sites:
        row = [str(s.count), f"{100.0 * s.count / total:.1f}%"]
        if by == "pc":
            row.append(f"{s.pc:#x}")
        row.append(_module_offset(s) if by in ("pc", "line") else (s.loc.module_name or "?"))
        if by == "pc":
            row.append(where(s))
        elif by != "module":
            row.append(s.loc.function or "?")
        if by in ("pc", "line"):
            row.append(_source(s))
        row.append(",".join(str(x) for x in sorted(s.sizes)) or "?")
        row.append(s.access.value if s.access else "?")
        if classed:
            row.append(cost_cell(s))
        if estimates:
            t = estimates.get(id(s))
            row.append("?" if t is None else _ns(t))
        table.add_row(*[Text(shown(x, newlines=True)) for x in row])
    parts: list[Any] = [table]
    if limit and left_out:
        rows = ("site" if by == "pc" else by) + ("s" if limit != 1 else "")
        parts.append(Text(f"the first {limit:,} {rows} of {limit + left_out:,} shown (--limit N; --limit 0 shows all)"))
    if estimates and costs is not None:
        parts += [Text(shown(line)) for line in cost_lines(costs)]
    # what the data is, and the fix (issue 9), for the sites shown
    extra = data_advice_table(result, {s.pc for s in sites} if left_out else None) if by == "pc" else None
    if extra is not None:
        parts.append(extra)
    return table if len(parts) == 1 else Group(*parts)


def _with_data(source: str, data: str) -> str:
    """The source cell of a record, with what its VA is on a second line when known (issue 9)."""
    return source if data == "-" else f"{source}\n{data}"


def records_table(result: TraceResult, limit: int | None = None, tid: int | None = None) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from .advice import record_data

    sites = {s.pc: s for s in result.sites}
    records = result.records
    if tid is not None:
        records = [r for r in records if r.tid == tid]
    if limit:
        records = records[-limit:]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, just in (("seq", "right"), ("time", "right"), ("cpu", "right"), ("pid", "right"),
                       ("tid", "right"), ("PC", "left"), ("VA", "left"), ("size", "right"),
                       ("access", "left"), ("routine+offset", "left"), ("source", "left")):
        table.add_column(name, justify=just, overflow="fold")  # type: ignore[arg-type]
    for r in records:
        s = sites.get(r.pc)
        src = f"{s.loc.file}:{s.loc.line}" if s is not None and s.loc.file and s.loc.line else "?"
        table.add_row(*[Text(shown(x, newlines=True)) for x in (
            str(r.seq), f"{r.time:.6f}", "?" if r.cpu is None else str(r.cpu),
            str(r.pid), str(r.tid), f"{r.pc:#x}", "?" if r.va is None else f"{r.va:#x}", str(r.size or "?"),
            r.access.value if r.access else "?", where(s) if s is not None else "?",
            _with_data(src, record_data(s, r.va)))])
    return table
