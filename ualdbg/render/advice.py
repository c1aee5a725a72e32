"""The per-site table under `trace show --summary`: what the data is (site.data) and which
remedy fits (ualdbg.core.advice), hottest site first."""
from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.advice import advice_by_pc
from .console import shown


def data_advice_table(doc: dict[str, Any], only: set[str] | None = None) -> Table | None:
    """None when no site has data or advice (an old trace, a stripped program); `only`: the
    sites of these PCs."""
    advice = advice_by_pc(doc)
    sites = [s for s in doc.get("sites", []) if (s.get("data") or s["pc"] in advice) and (only is None or s["pc"] in only)]
    if not sites:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="data and advice per site", title_justify="left")
    table.add_column("count", justify="right", overflow="fold")
    table.add_column("site", overflow="fold")
    table.add_column("data", overflow="fold")
    table.add_column("advice", overflow="fold")
    for s in sites:
        where = f"{s['file']}:{s['line']}" if s.get("file") and s.get("line") else s["pc"]
        data = s.get("data") or {}
        text = data.get("text") or "unknown"
        via = data.get("via")
        if via:
            text += f"\nvia {via['path']} ({via['type']} {via['pointer']} in {via['function']})"
        a = advice.get(s["pc"])
        table.add_row(Text(str(s["count"])), Text(shown(where, newlines=True)), Text(shown(text, newlines=True)),
                      Text(shown(f"{a.remedy}: {a.text}" if a else "-", newlines=True)))
    return table


def record_data(site: dict[str, Any], va: str | None) -> str:
    """What one trace record's VA is, from its site's data (no symbols are read): the variable
    and element when the VA lies in the variable the site's first fault named, else "-"."""
    data = site.get("data") or {}
    if not va or "start" not in data or not data.get("size") or not data.get("name"):
        return "-"
    addr, start = int(va, 16), int(data["start"], 16)
    if not start <= addr < start + data["size"]:
        return "-"
    if addr == int(data["va"], 16):
        return f"{data['path']}+{data['offset']}"
    esize = data.get("element_size")
    if esize and data.get("path") == f"{data['name']}[{(int(data['va'], 16) - start) // esize}]":
        # a one-dimensional array of scalars: the element index follows from the address
        return f"{data['name']}[{(addr - start) // esize}]+{(addr - start) % esize}"
    return f"{data['name']}+{addr - start}"
