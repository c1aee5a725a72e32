"""The per-site table under `trace show --summary`: what the data is (site.data) and which
remedy fits (ualdbg.core.advice), hottest site first."""
from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.advice import advice_by_pc, vas_by_pc
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
    per_line: dict[tuple[Any, Any], int] = {}
    for s in doc.get("sites", []):
        per_line[(s.get("file"), s.get("line"))] = per_line.get((s.get("file"), s.get("line")), 0) + 1
    vas = vas_by_pc(doc)
    for s in sites:
        where = f"{s['file']}:{s['line']}" if s.get("file") and s.get("line") else s["pc"]
        if s.get("file") and s.get("line") and per_line[(s["file"], s["line"])] > 1:
            # several sites on one line (a read and a write, template instances): which one
            where += f"\n{s.get('function') or '?'} {s['pc']}"
        data = s.get("data") or {}
        text = data.get("text") or "unknown"
        via = data.get("via")
        if via:
            text += f"\nvia {via['path']} ({via['type']} {via['pointer']} in {via['function']})"
        span = touched_text(s, vas.get(s["pc"]) or [])
        if span:
            text += f"\n{span}"
        a = advice.get(s["pc"])
        table.add_row(Text(str(s["count"])), Text(shown(where, newlines=True)), Text(shown(text, newlines=True)),
                      Text(shown(f"{a.remedy}: {a.text}" if a else "-", newlines=True)))
    return table


def touched_text(site: dict[str, Any], vas: list[str]) -> str | None:
    """The range of data a site touched: `touched table[0].stamp+0 .. table[3].stamp+0, 4 distinct
    addresses in 8 records` (the agent names both ends; else they are named from the site's
    data, or given as addresses), with how many of its faults those records are."""
    data = site.get("data") or {}
    t = data.get("touched") if isinstance(data.get("touched"), dict) else None
    if t is not None:
        first, last, distinct, records = (shown(t.get(k)) if k in ("first", "last") else t.get(k)
                                          for k in ("first", "last", "distinct", "records"))
    else:
        addrs = sorted({int(v, 16) for v in vas})
        if len(addrs) < 2:
            return None
        lo, hi = f"{addrs[0]:#x}", f"{addrs[-1]:#x}"
        first = record_data(site, lo) if record_data(site, lo) != "-" else lo
        last = record_data(site, hi) if record_data(site, hi) != "-" else hi
        distinct, records = len(addrs), len(vas)
    count = int(site.get("count") or 0)
    of = f" (of {count} faults: the others have no record)" if isinstance(records, int) and records < count else ""
    return f"touched {first} .. {last}, {distinct} distinct addresses in {records} records{of}"


def record_data(site: dict[str, Any], va: str | None) -> str:
    """What one trace record's VA is, from its site's data (no symbols are read): the variable
    and element when the VA lies in the variable the site's first fault named, else "-"."""
    data = site.get("data") or {}
    if not va or "start" not in data or not data.get("size"):
        return "-"
    addr, start = int(va, 16), int(data["start"], 16)
    if not start <= addr < start + data["size"]:
        return "-"
    if data.get("kind") == "heap":  # a malloc'd block a debugger found
        return f"block {data['start']}+{addr - start}"
    if not data.get("name"):
        return "-"
    if addr == int(data["va"], 16):
        return f"{data['path']}+{data['offset']}"
    esize = data.get("element_size")
    if esize and data.get("path") == f"{data['name']}[{(int(data['va'], 16) - start) // esize}]":
        # a one-dimensional array of scalars: the element index follows from the address
        return f"{data['name']}[{(addr - start) // esize}]+{(addr - start) % esize}"
    return f"{data['name']}+{addr - start}"
