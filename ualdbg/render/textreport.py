"""The `text` format (render/formats.py), and what the shell prints after a trace: the header,
the sites (with what their data is and the fix), the faults of each program, the notes and what
the run did not see, from a TraceResult."""
from __future__ import annotations

from typing import IO, Any

from ..core.cost import CostTable
from ..core.result import TraceResult
from .console import make_console
from .formats import Context
from .tables import blind_lines, header, patch_note, summary_table


def per_program(result: TraceResult) -> str | None:
    """Several programs (a script, a test suite): the faults of each, by program."""
    procs = [p for p in result.processes or [] if p.path]
    if len({p.path for p in procs}) < 2:
        return None
    by: dict[str, list[int]] = {}
    for p in procs:
        assert p.path is not None
        counts = by.setdefault(p.path, [0, 0, 0])
        counts[0] += 1
        counts[1] += p.faults_total or 0
        counts[2] += p.faults_ignored or 0
    lines = ["per program (processes: unaligned accesses in scope, ignored):"]
    for path, (n, total, ignored) in sorted(by.items(), key=lambda kv: (-kv[1][1], kv[0])):
        lines.append(f"  {total:>9,}  {path}  ({n} process{'es' if n != 1 else ''}, {ignored:,} ignored)")
    return "\n".join(lines)


def report_items(result: TraceResult, by: str = "pc", *, programs: bool = True, costs: CostTable | None = None,
                 records_written: bool = False, limit: int | None = None) -> list[Any]:
    """The report's parts in order: lines of text and rich tables (a console prints them).
    `costs`: the prices the summary ranks by (isa/costclass.costs_for); `records_written`: the
    records go to a file too, so the agent's note that some faults have none is said (issue 31);
    `limit`: the summary's first N rows only (None: all)."""
    items: list[Any] = [header(result)]
    if result.sites:
        items.append(summary_table(result, by, costs, limit=limit))
    text = per_program(result) if programs else None
    if text:
        items.append(text)
    items += [f"note: {note}" for note in result.notes or []]
    if records_written and patch_note(result):
        items.append(f"note: {patch_note(result)}")
    items += blind_lines(result)
    return items


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    """The report as plain text, 120 columns wide."""
    console = make_console(out, color=False)
    for item in report_items(result):
        console.print(item, soft_wrap=isinstance(item, str))
