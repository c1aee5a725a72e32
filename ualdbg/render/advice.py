"""The per-site table under `trace show --summary`: what the data is (a site's DataRef), the range
its records touched, and which remedy fits (ualdbg.core.advice), hottest site first."""
from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.advice import advice_by_pc, vas_by_pc
from ..core.result import Site, TraceResult
from .console import shown


def data_advice_table(result: TraceResult, only: set[int] | None = None) -> Table | None:
    """None when no site has data or advice (an old trace, a stripped program); `only`: the
    sites of these PCs."""
    advice = advice_by_pc(result)
    sites = [s for s in result.sites if (s.data is not None or s.pc in advice) and (only is None or s.pc in only)]
    if not sites:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="data and advice per site", title_justify="left")
    table.add_column("count", justify="right", overflow="fold")
    table.add_column("site", overflow="fold")
    table.add_column("data", overflow="fold")
    table.add_column("advice", overflow="fold")
    per_line: dict[tuple[str | None, int | None], int] = {}
    for s in result.sites:
        per_line[(s.loc.file, s.loc.line)] = per_line.get((s.loc.file, s.loc.line), 0) + 1
    vas = vas_by_pc(result)
    for s in sites:
        where = f"{s.loc.file}:{s.loc.line}" if s.loc.file and s.loc.line else f"{s.pc:#x}"
        if s.loc.file and s.loc.line and per_line[(s.loc.file, s.loc.line)] > 1:
            # several sites on one line (a read and a write, template instances): which one
            where += f"\n{s.loc.function or '?'} {s.pc:#x}"
        text = (s.data.text if s.data is not None else None) or "unknown"
        via = s.data.via if s.data is not None else None
        if via is not None:
            text += f"\nvia {via.path} ({via.type} {via.pointer} in {via.function})"
        span = touched_text(s, vas.get(s.pc) or [])
        if span:
            text += f"\n{span}"
        a = advice.get(s.pc)
        table.add_row(Text(str(s.count)), Text(shown(where, newlines=True)), Text(shown(text, newlines=True)),
                      Text(shown(f"{a.remedy}: {a.text}" if a else "-", newlines=True)))
    return table


def touched_text(site: Site, vas: Sequence[int]) -> str | None:
    """The range of data a site touched: `touched table[0].stamp+0 .. table[3].stamp+0, 4 distinct
    addresses in 8 records` (the agent names both ends; else they are named from the site's
    data, or given as addresses), with how many of its faults those records are."""
    t = site.data.touched if site.data is not None else None
    first: str
    last: str
    if t is not None:
        first, last, distinct, records = shown(t.first), shown(t.last), t.distinct, t.records
    else:
        addrs = sorted(set(vas))
        if len(addrs) < 2:
            return None
        lo, hi = addrs[0], addrs[-1]
        first = record_data(site, lo) if record_data(site, lo) != "-" else f"{lo:#x}"
        last = record_data(site, hi) if record_data(site, hi) != "-" else f"{hi:#x}"
        distinct, records = len(addrs), len(vas)
    of = f" (of {site.count} faults: the others have no record)" if records < site.count else ""
    return f"touched {first} .. {last}, {distinct} distinct addresses in {records} records{of}"


def record_data(site: Site | None, va: int | None) -> str:
    """What one trace record's VA is, from its site's data (no symbols are read): the variable
    and element when the VA lies in the variable the site's first fault named, else "-"."""
    data = site.data if site is not None else None
    if va is None or data is None or data.start is None or not data.size:
        return "-"
    start = data.start
    if not start <= va < start + data.size:
        return "-"
    if data.kind == "heap":  # a malloc'd block a debugger found
        return f"block {start:#x}+{va - start}"
    if not data.name:
        return "-"
    if va == data.va:
        return f"{data.path}+{data.offset}"
    esize = data.element_size
    if esize and data.path == f"{data.name}[{(data.va - start) // esize}]":
        # a one-dimensional array of scalars: the element index follows from the address
        return f"{data.name}[{(va - start) // esize}]+{(va - start) % esize}"
    return f"{data.name}+{va - start}"
