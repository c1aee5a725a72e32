"""Rendering `ualdbg audit`: a header saying what was checked and what is missing, the findings
(with the hits of a trace when one was given), COMMON blocks with their member offsets, and
for a file without DWARF the symbol table's data objects."""
from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from .console import shown


def _table(*columns: str, title: str | None = None) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold", no_wrap=c == "declared",
                     justify="right" if c in ("offset", "align", "size", "hits", "mod 8") else "left")
    return t


_KIND = {"packed-member": "packed member", "misaligned-variable": "misaligned variable", "common-member": "COMMON member"}


def render(doc: dict[str, Any]) -> list[Any]:
    """Strings and rich tables for the adapter's or the CLI's sink."""
    checked = doc["checked"]
    n = len(doc["findings"])
    out: list[Any] = [
        f"Alignment audit of {doc['path']} ({'DWARF' if doc['dwarf'] else 'symbol table only'}): "
        f"{n} finding{'s' if n != 1 else ''}; {checked['structs']} struct/union layouts, {checked['variables']} "
        f"variables at fixed addresses, {len(doc['commons'])} COMMON block{'s' if len(doc['commons']) != 1 else ''} checked"
    ]
    for note in doc["missing"]:
        out.append(f"  missing: {note}")
    trace = doc.get("trace")
    if doc["findings"]:
        cols = ["kind", "what", "type", "offset", "align", "declared"] + (["hits", "sites"] if trace is not None else [])
        t = _table(*cols)
        for f in doc["findings"]:
            offset = str(f["offset"]) if f.get("offset") is not None else f.get("address", "?")
            row = [_KIND.get(f["kind"], f["kind"]), f["what"], f.get("type", "?"), offset, str(f["align"]),
                   f"{f['file']}:{f['line']}" if f.get("file") and f.get("line") else "?"]
            if trace is not None:
                row += [str(f.get("hits", 0)), "\n".join(f.get("sites", [])) or "-"]
            t.add_row(*[Text(shown(x, newlines=True), style="bold red" if trace is not None and col == "hits" and f.get("hits") else "")
                        for col, x in zip(cols, row)])
        out.append(t)
    for c in doc["commons"]:
        t = _table("member", "offset", "type", "size", "8-byte view", "declared",
                   title=f"COMMON /{c['name']}/ at {c['address']} ({c['size']} bytes, symbol {c.get('symbol') or '?'})")
        for m in c["members"]:
            t.add_row(*[Text(shown(x)) for x in (m["name"], str(m["offset"]), m.get("type") or "?", str(m.get("size", "?")),
                                          "MISALIGNED" if m["misaligns_8_byte_view"] else "ok",
                                          f"{m['file']}:{m['line']}" if m.get("file") else "?")])
        out.append(t)
    if not doc["dwarf"] and doc.get("symbols"):
        t = _table("symbol", "address", "size", "mod 8", "binding", title="data objects in the symbol table (types unknown)")
        for s in doc["symbols"]:
            t.add_row(*[Text(shown(x)) for x in (s["name"], s["address"], str(s["size"]), str(s["mod8"]), s["kind"])])
        out.append(t)
    if trace is not None:
        out.append(f"Trace of {trace.get('program') or '?'}: {trace['faults_explained']} of {trace['faults_total']} unaligned "
                   f"accesses explained by these findings" + (f"; {trace['faults_without_data']} had no data description"
                                                              if trace["faults_without_data"] else ""))
        for u in trace["unexplained"]:
            out.append(f"  not a finding of the audit: {u['site']} ({u['count']}): {u['data']}")
    return out
