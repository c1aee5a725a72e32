"""The per-site table under `trace show --summary`: what the data is (a site's DataRef) and which
remedy fits (ualdbg.core.advice), hottest site first."""
from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.advice import advice_by_pc
from ..core.result import Site, TraceResult
from .console import shown


def data_advice_table(result: TraceResult) -> Table | None:
    """None when no site has data or advice (an old trace, a stripped program)."""
    advice = advice_by_pc(result)
    sites = [s for s in result.sites if s.data is not None or s.pc in advice]
    if not sites:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="data and advice per site", title_justify="left")
    table.add_column("count", justify="right", overflow="fold")
    table.add_column("site", overflow="fold")
    table.add_column("data", overflow="fold")
    table.add_column("advice", overflow="fold")
    for s in sites:
        where = f"{s.loc.file}:{s.loc.line}" if s.loc.file and s.loc.line else f"{s.pc:#x}"
        text = (s.data.text if s.data is not None else None) or "unknown"
        via = s.data.via if s.data is not None else None
        if via is not None:
            text += f"\nvia {via.path} ({via.type} {via.pointer} in {via.function})"
        a = advice.get(s.pc)
        table.add_row(Text(str(s.count)), Text(shown(where, newlines=True)), Text(shown(text, newlines=True)),
                      Text(shown(f"{a.remedy}: {a.text}" if a else "-", newlines=True)))
    return table


def record_data(site: Site | None, va: int | None) -> str:
    """What one trace record's VA is, from its site's data (no symbols are read): the variable
    and element when the VA lies in the variable the site's first fault named, else "-"."""
    data = site.data if site is not None else None
    if va is None or data is None or data.start is None or not data.size or not data.name:
        return "-"
    start = data.start
    if not start <= va < start + data.size:
        return "-"
    if va == data.va:
        return f"{data.path}+{data.offset}"
    esize = data.element_size
    if esize and data.path == f"{data.name}[{(data.va - start) // esize}]":
        # a one-dimensional array of scalars: the element index follows from the address
        return f"{data.name}[{(va - start) // esize}]+{(va - start) % esize}"
    return f"{data.name}+{va - start}"
