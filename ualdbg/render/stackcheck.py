"""Rendering a stackcheck document: a header saying what was varied and added, the table of
variants (addresses reduced modulo the alignment, 64 and 4096), the verdicts, timing and trace."""
from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from .console import shown


def header(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    n = len(doc["variants"])
    aslr = doc["aslr_runs"]
    lines = [
        f"Stack alignment of {doc['program']['path']} ({doc['arch']}) across {n} variant{'s' if n != 1 else ''}"
        + (f" ({aslr} with ASLR on)" if aslr else "") + f", measured with {doc['debugger']} in {doc['duration_s']:.1f} s",
        f"  environment: {env['base_variables']} variables, {env['base_bytes']} bytes as given; {env['padding']['meaning']}",
    ]
    if env.get("note"):
        lines.append(f"  {env['note']}")
    lines.append("  argv, environment and ASLR are set exactly by ualdbg's exec helper in every run: the debugger adds nothing")
    for note in doc.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _cell(entry: dict[str, Any] | None, item: dict[str, Any]) -> Text:
    if entry is None or entry.get("address") is None:
        return Text("-")
    addr = "…" + entry["address"][-5:]  # the rest is the same stack; the JSON has it all
    if item["align"] > 1:
        mods = f"{entry.get('align', 0)}/{entry['64']}/{entry['4096']}"
    else:
        mods = f"{entry['8']}/{entry['64']}/{entry['4096']}"
    style = "bold red" if item["align"] > 1 and entry.get("align") else ""
    return Text(f"{addr} {mods}", style=style)


def variants_table(doc: dict[str, Any], limit: int | None = None) -> Table:
    items = doc["items"]
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              caption="address (last 5 hex digits) and its value mod the item's alignment (mod 8 for strings) / mod 64 / mod 4096",
              caption_justify="left")
    for col in ("variant", "argv0", "pad", "aslr"):
        t.add_column(col)
    for it in items:
        name = {"sp_entry": "sp@entry", "sp_main": "sp@main"}.get(it["id"], it["id"])
        t.add_column(f"{name} ({it['align']})" if it["align"] > 1 else name)
    has_time = any("time" in v for v in doc["variants"])
    has_trace = any("trace" in v for v in doc["variants"])
    if has_time:
        t.add_column("time (median, spread)")
    if has_trace:
        t.add_column("unaligned")
    rows = doc["variants"] if limit is None else doc["variants"][:limit]
    for v in rows:
        cells = [Text(v["id"]), Text("as given" if v["argv0_as_given"] else str(v["argv0_length"])), Text(str(v["env_pad"])),
                 Text("on" if v["aslr"] else "off")]
        for it in items:
            cells.append(_cell(v["addresses"].get(it["id"]), it))
        if has_time:
            tm = v.get("time")
            cells.append(Text("-" if not tm else f"{tm['median_s'] * 1000:.2f} ms ±{tm['spread_pct']:.0f}%"))
        if has_trace:
            tr = v.get("trace") or {}
            if tr.get("error"):
                cells.append(Text("error", style="red"))
            else:
                n = tr.get("faults_total", 0)
                cells.append(Text(str(n), style="bold red" if n else ""))
        if v.get("error"):
            cells[0] = Text(shown(f"{v['id']} ({v['error']})"), style="red")
        t.add_row(*cells)
    return t


def verdicts_table(doc: dict[str, Any]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("item", "type", "align", "verdict"):
        t.add_column(col)
    types = {it["id"]: it["type"] for it in doc["items"]}
    for v in doc["verdicts"]:
        style = "bold red" if v["verdict"] == "misaligned" else ""
        t.add_row(Text(shown(v["item"])), Text(shown(types.get(v["item"], ""))), Text(str(v["align"])),
                  Text(shown(v["text"]), style=style))
    return t


def timing_lines(doc: dict[str, Any]) -> list[str]:
    tm = doc.get("timing")
    if not tm:
        return []
    lines = [f"Run time (native, {doc['variants'][0].get('time', {}).get('runs', 0)} runs per variant): medians "
             f"{tm['median_min_s'] * 1000:.2f}-{tm['median_max_s'] * 1000:.2f} ms, spread {tm['spread_pct']:.1f}% "
             f"(run-to-run noise {tm['noise_pct']:.1f}%)"
             + (f"; --max-spread {tm['max_spread_pct']}% {'EXCEEDED' if tm['exceeded'] else 'kept'}" if tm['max_spread_pct'] is not None else "")]
    for tr in tm.get("tracks", []):
        groups = ", ".join(f"{k}: {g['median_s'] * 1000:.2f} ms ({g['variants']})" for k, g in tr["groups"].items())
        word = "TRACKS" if tr["tracks"] else ("cannot tell (a class has one variant) whether it tracks" if tr.get("too_few") else "does not track")
        lines.append(f"  time {word} {tr['item']} {tr['by']} ({tr['difference_pct']:.1f}% between groups; {groups})")
    if not tm.get("tracks"):
        lines.append("  no measured item changes alignment class across the variants: nothing for the time to track")
    return lines


def trace_lines(doc: dict[str, Any]) -> list[str]:
    tr = doc.get("trace")
    if not tr:
        return []
    faulty = tr["variants_with_faults"]
    lines = [f"Traced {tr['variants']} variants: {len(faulty)} made unaligned accesses"
             + (": " + ", ".join(tr["labels"][:20]) + (" ..." if len(faulty) > 20 else "") if faulty else "")]
    sites: dict[str, list[str]] = {}
    for v in doc["variants"]:
        for s in (v.get("trace") or {}).get("sites", []):
            sites.setdefault(f"{s['location']} ({'/'.join(map(str, s['sizes']))}-byte {s['access']})", []).append(v["id"])
    for where, vids in sites.items():
        lines.append(f"  {where}: in {len(vids)} variant(s): {', '.join(vids[:24])}{' ...' if len(vids) > 24 else ''}")
    for vid, err in tr.get("errors", {}).items():
        lines.append(f"  {vid}: trace failed: {err}")
    return lines


def verdict_line(doc: dict[str, Any]) -> str:
    if doc["exit"]:
        return "ualdbg stackcheck: FAIL: " + "; ".join(doc["reasons"])
    return "ualdbg stackcheck: ok: no item misaligned for its type in any variant"


def render(doc: dict[str, Any], limit: int | None = None) -> list[Any]:
    out: list[Any] = [header(doc), variants_table(doc, limit), verdicts_table(doc)]
    out += timing_lines(doc)
    out += trace_lines(doc)
    out.append(verdict_line(doc))
    return out
