"""The break report: OpenVMS's `SET BREAK/UNALIGNED_DATA` message, with Linux detail. Both
debuggers' adapters print it at the stop the user sees (`break_text`)."""
from __future__ import annotations

from ..core.dataref import DataRef
from ..core.model import Fault, SourceLoc
from ..core.result import FaultReport
from .console import shown, to_text


def _loc_line(loc: SourceLoc) -> str:
    parts = [loc.where()]
    if loc.file is not None:
        parts.append(f"{loc.file}:{loc.line}" if loc.line else loc.file)
    return ", ".join(parts)


def data_lines(data: DataRef | None) -> list[str]:
    """What the data is (symbols/data.py DataRef): the object, then the pointer it was reached by."""
    if data is None:
        return []
    lines = [f"  data: {data.text}"]
    via = data.via
    if via is not None:
        extra = []
        if via.packed:
            extra.append(f"member of packed {via.struct} at offset {via.member_offset}, needs {via.member_align}")
        elif via.pointer_misaligned:
            extra.append(f"{via.pointer} itself is not {via.target_align}-byte aligned")
        lines.append(f"  via: {via.path} ({via.type} {via.pointer} in {via.function})" + (f"; {extra[0]}" if extra else ""))
    return lines


def fault_report(fault: Fault, loc: SourceLoc, source_text: str | None = None, data: DataRef | None = None,
                 *, checked_before: bool = False) -> list[str]:
    """The report of one fault at `loc`, with its source line and what its data is when known.
    `checked_before`: the step engine's, which checks each access against the policy before it
    executes (the report then says which policy it breaks)."""
    va = f"{fault.va:#x}" if fault.va is not None else "unknown (instruction not decoded)"
    lines = [f"Unaligned data access: virtual address = {va}, PC = {fault.pc:#x}"]
    size = f"{fault.size}-byte" if fault.size else "unknown-size"
    access = fault.access.value if fault.access else "access"
    where = _loc_line(loc)
    lines.append(f"  {size} {access}, {where}" + (f"  [thread {fault.tid}]" if fault.tid != fault.pid else ""))
    if fault.cost is not None:  # what it costs (issue 33)
        lines.append(f"  cost: {fault.cost}{' (vector)' if fault.vector else ''}: {COST_TEXT.get(fault.cost, fault.cost)}")
    for frame in loc.inlined_from:
        at = f"{frame.file}:{frame.line}" if frame.file else "?"
        lines.append(f"  inlined into {frame.function} at {at}")
    lines.extend(data_lines(data))
    if fault.insn:
        lines.append(f"  instruction: {fault.insn}")
    if fault.explained is False:
        lines.append("  note: no decoded operand of this instruction breaks the alignment rule; VA and size are the decoder's best guess")
    elif fault.explained is None:
        lines.append("  note: the instruction could not be decoded; VA, size and access are unknown")
    if source_text is not None and loc.line:
        lines.append(f"  {loc.line:<8}{source_text.rstrip()}")
    if checked_before:
        lines.insert(2, f"  policy: {fault.policy} ({POLICY_TEXT.get(fault.policy, fault.policy)}), checked before it executes")
    return [shown(line, newlines=True) for line in lines]  # names from a hostile DWARF, escaped


POLICY_TEXT = {"ac": "x86 alignment check", "natural": "not aligned to its size",
               "cacheline": "crosses a 64-byte cache line", "page": "crosses a 4 KiB page"}


def break_text(report: FaultReport | None, color: bool) -> str | None:
    """A stop's break report (engines/stops.py, Stops.take_report) as the debugger prints it."""
    if report is None:
        return None
    return to_text(fault_report(report.fault, report.loc, report.source_text, report.data,
                                checked_before=report.checked_before), color=color)


COST_TEXT = {"inside-line": "inside one 64-byte line (almost free on x86)",
             "line-split": "spans two 64-byte lines (a second access)",
             "page-split": "spans two 4 KiB pages (a second access and page walk)",
             "split-lock": "a locked instruction across two lines: a bus lock for every core (Linux may slow or kill it)",
             "traps": "a trap on this CPU", "unknown": "address or size not known"}
