"""Rich tables for people: `trace show` (one row per fault, FLT SHOW TRACE) and
`trace show --summary` (counts per exception PC or group, FLT SHOW TRACE/SUMMARY), and the
header and blind-spot lines above them, all from a TraceResult (core/result.py)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.model import AccessKind
from ..core.result import Site, TraceResult
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
        status += f"; {result.merged} runs merged"
    return shown(
        f"Unaligned accesses in {shown(prog.path or 'the program')}{status}\n"
        f"  {total} in scope ({result.scope}), {ignored} ignored elsewhere\n"
        f"  {dur:.3f} s, {rate:,.0f}/s; engine {result.engine} {via}; {ring}", newlines=True)


def blind_lines(result: TraceResult) -> list[str]:
    """What the run did not see (the trace's blind spots, issue 29), one line each."""
    spots = result.blind_spots
    if not spots:
        return []
    return [f"INCOMPLETE: {len(spots)} part{'s' if len(spots) != 1 else ''} of the run not seen:"] + [
        f"  not seen: {shown(b.text or b.kind)}" for b in spots]


def summary_table(result: TraceResult, by: str = "pc") -> Table | Group:
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .advice import data_advice_table

    sites = group_sites(result.sites, by)
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
        table.add_row(*[Text(shown(x, newlines=True)) for x in row])
    extra = data_advice_table(result) if by == "pc" else None  # what the data is, and the fix (issue 9)
    return table if extra is None else Group(table, extra)


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
