"""Rich tables for people: `trace show` (one row per fault, FLT SHOW TRACE) and
`trace show --summary` (counts per exception PC or group, FLT SHOW TRACE/SUMMARY)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.cost import CostTable, rank_by_time
from .console import shown
from .jsondoc import group_sites

if TYPE_CHECKING:  # rich is imported by the tables that need it: a run with nothing to tabulate prints
    from rich.console import Group  # the header alone, without it (issue 34)
    from rich.table import Table


def _where(site: dict[str, Any]) -> str:
    if site.get("function"):
        return f"{shown(site['function'])}+{shown(site['function_offset'] or '0x0')}"
    return "?"


def _module_offset(site: dict[str, Any]) -> str:
    if site.get("module") and site.get("offset"):
        return f"{shown(site['module'])}+{shown(site['offset'])}"
    return shown(site.get("module") or "?")


def _source(site: dict[str, Any]) -> str:
    text = f"{shown(site['file'])}:{site['line']}" if site.get("file") and site.get("line") else "?"
    for frame in site.get("inlined_from") or []:
        text += (f"\n  inlined into {shown(frame['function'])} at {shown(frame.get('file') or '?')}:"
                 f"{shown(frame.get('line') or '?')}")
    return text


def header(doc: dict[str, Any]) -> str:
    total, ignored = doc["faults_total"], doc["faults_ignored"]
    dur = doc.get("duration_s") or 0.0
    rate = total / dur if dur > 0 else 0.0
    buf = doc.get("buffer", {})
    ring = f"{len(doc['records'])} of {buf.get('capacity', '?')} records kept"
    if doc.get("records_dropped"):
        ring += f", {doc['records_dropped']} older dropped"
    prog = doc.get("program", {})
    via = "in-process" if doc.get("debugger") == "none" else f"via {doc.get('debugger')}"
    if doc.get("engine") == "step" and doc.get("debugger") == "none":
        via = "native ptrace stepper"
    status = ""
    if prog.get("exit_signal") is not None:
        status = f", killed by signal {prog['exit_signal']}"
    elif prog.get("exit_status") is not None:
        status = f", exit status {prog['exit_status']}"
    if doc.get("partial"):
        status += f"; PARTIAL: interrupted by {doc.get('interrupted_by') or 'a signal'}"
    if doc.get("merged"):
        status += f"; {doc['merged']} run{'s' if doc['merged'] != 1 else ''} merged"
    return shown(
        f"Unaligned accesses in {programs_named(doc)}{status}\n"
        f"  {total} in scope ({doc.get('scope', '')}), {ignored} ignored elsewhere\n"
        f"  {dur:.3f} s, {rate:,.0f}/s; engine {doc.get('engine')} {via}; {ring}", newlines=True)


def _names(paths: list[str], most: int = 3) -> str:
    """`a, b and c`, `a, b, c and 4 more`: each program once, in order."""
    seen = list(dict.fromkeys(shown(p) for p in paths))
    if len(seen) > most:
        return f"{', '.join(seen[:most])} and {len(seen) - most} more"
    return seen[0] if len(seen) == 1 else f"{', '.join(seen[:-1])} and {seen[-1]}"


def programs_named(doc: dict[str, Any]) -> str:
    """Whose accesses the report counts: every program of a merged document (not only the
    first run's); the programs that faulted when the one named on the command line did not (a
    driver such as make or a shell: `check -- make check`); else the program."""
    prog: dict[str, Any] = doc["program"] if isinstance(doc.get("program"), dict) else {}
    path = prog.get("path") or "the program"
    runs = [r for r in doc.get("runs") or [] if isinstance(r, dict)]
    run_paths = [r["program"]["path"] for r in runs
                 if isinstance(r.get("program"), dict) and isinstance(r["program"].get("path"), str)]
    if run_paths:
        return _names(run_paths)

    def faults(p: dict[str, Any]) -> int:
        n = p.get("faults_total")
        return n if isinstance(n, int) else 0

    procs = [p for p in doc.get("processes") or [] if isinstance(p, dict) and isinstance(p.get("path"), str)]
    root = next((p for p in procs if p.get("pid") == prog.get("pid")), None)
    faulted = [p["path"] for p in procs if p is not root and faults(p)]
    if faulted and (root is None or not faults(root)):
        return f"{_names(faulted)} (run by {shown(path)})"
    return shown(path)


def patch_note(doc: dict[str, Any]) -> str | None:
    """The agent's note that patched sites left faults without a record (engines/agent.py), for
    where the records are shown or written."""
    agent: dict[str, Any] = doc["agent"] if isinstance(doc.get("agent"), dict) else {}
    patching: dict[str, Any] = agent["patching"] if isinstance(agent.get("patching"), dict) else {}
    note = patching.get("note")
    return shown(note) if isinstance(note, str) else None


def blind_lines(doc: dict[str, Any]) -> list[str]:
    """What the run did not see (the document's blind_spots, issue 29), one line each."""
    spots = [b for b in doc.get("blind_spots") or [] if isinstance(b, dict)]
    if not spots:
        return []
    return [f"INCOMPLETE: {len(spots)} part{'s' if len(spots) != 1 else ''} of the run not seen:"] + [
        f"  not seen: {shown(b.get('text') or b.get('kind'))}" for b in spots]


_SHORT = {"inside-line": "in line", "line-split": "line split", "page-split": "page split",
          "split-lock": "SPLIT LOCK", "traps": "traps", "unknown": "unknown"}


def cost_cell(site: dict[str, Any]) -> str:
    """`3 in line, 5 line split, 7 page split; vector` (issue 33), `?` without classes."""
    classes = site.get("classes")
    if not isinstance(classes, dict) or not classes:
        return "?"
    text = ", ".join(f"{n} {_SHORT.get(c, c)}" for c, n in classes.items() if n)
    return text + ("; vector" if site.get("vector") else "")


def _ns(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns >= 1e6 else f"{ns / 1e3:,.2f} us" if ns >= 1e3 else f"{ns:,.1f} ns"


def cost_lines(costs: CostTable) -> list[str]:
    """What the estimate column is and how its prices were measured."""
    prices = ", ".join(f"{c} {v:.2f}" for c, v in costs.ns.items())
    return [f"est. extra: an ESTIMATE of the time the misalignment cost, count x the extra ns per access over an "
            f"aligned one ({prices}), {costs.how}" + (f"; {costs.note}" if costs.note else "")]


def summary_table(doc: dict[str, Any], by: str = "pc", costs: CostTable | None = None,
                  limit: int | None = None) -> Table | Group:
    """Counts per site or group, hottest first; with `costs` (the cost probe's prices, issue 33)
    ranked by the estimated extra time instead, in a column of its own; `limit`: the first N rows
    only, and a line saying how many were left out."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .advice import data_advice_table

    sites = group_sites(doc["sites"], by)
    classed = any(isinstance(s.get("classes"), dict) for s in sites)
    estimates: dict[int, float | None] = {}
    if costs is not None and classed:
        ranked = rank_by_time(sites, costs)
        sites = [s for s, _t in ranked]
        estimates = {id(s): t for s, t in ranked}
    left_out = len(sites) - limit if limit and len(sites) > limit else 0
    if limit and left_out:
        sites = sites[:limit]
    total = doc["faults_total"] or 1
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
        row = [str(s["count"]), f"{100.0 * s['count'] / total:.1f}%"]
        if by == "pc":
            row.append(s["pc"])
        row.append(_module_offset(s) if by in ("pc", "line") else (s.get("module") or "?"))
        if by == "pc":
            row.append(_where(s))
        elif by != "module":
            row.append(s.get("function") or "?")
        if by in ("pc", "line"):
            row.append(_source(s))
        row.append(",".join(str(x) for x in s["sizes"]) or "?")
        row.append(s["access"] or "?")
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
    extra = data_advice_table(doc, {s["pc"] for s in sites} if left_out else None) if by == "pc" else None
    if extra is not None:
        parts.append(extra)
    return table if len(parts) == 1 else Group(*parts)


def _with_data(source: str, data: str) -> str:
    """The source cell of a record, with what its VA is on a second line when known (issue 9)."""
    return source if data == "-" else f"{source}\n{data}"


def records_table(doc: dict[str, Any], limit: int | None = None, tid: int | None = None) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from .advice import record_data

    sites = {s["pc"]: s for s in doc["sites"]}
    records = doc["records"]
    if tid is not None:
        records = [r for r in records if r["tid"] == tid]
    if limit:
        records = records[-limit:]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, just in (("seq", "right"), ("time", "right"), ("cpu", "right"), ("pid", "right"),
                       ("tid", "right"), ("PC", "left"), ("VA", "left"), ("size", "right"),
                       ("access", "left"), ("routine+offset", "left"), ("source", "left")):
        table.add_column(name, justify=just, overflow="fold")  # type: ignore[arg-type]
    for r in records:
        s = sites.get(r["pc"], {})
        src = f"{s['file']}:{s['line']}" if s.get("file") and s.get("line") else "?"
        table.add_row(*[Text(shown(x, newlines=True)) for x in (
            str(r["seq"]), f"{r['time']:.6f}", "?" if r["cpu"] is None else str(r["cpu"]),
            str(r["pid"]), str(r["tid"]), r["pc"], r["va"] or "?", str(r["size"] or "?"),
            r["access"] or "?", _where(s) if s else "?", _with_data(src, record_data(s, r["va"])))])
    return table
