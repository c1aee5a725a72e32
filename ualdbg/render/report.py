"""The break report: OpenVMS's `SET BREAK/UNALIGNED_DATA` message, with Linux detail."""
from __future__ import annotations

from typing import Any

from ..model import Fault, SourceLoc


def _loc_line(loc: SourceLoc) -> str:
    parts = [loc.where()]
    if loc.file is not None:
        parts.append(f"{loc.file}:{loc.line}" if loc.line else loc.file)
    return ", ".join(parts)


def fault_report(fault: Fault, loc: SourceLoc, source_text: str | None = None) -> list[str]:
    va = f"{fault.va:#x}" if fault.va is not None else "unknown (instruction not decoded)"
    lines = [f"Unaligned data access: virtual address = {va}, PC = {fault.pc:#x}"]
    size = f"{fault.size}-byte" if fault.size else "unknown-size"
    access = fault.access.value if fault.access else "access"
    where = _loc_line(loc)
    lines.append(f"  {size} {access}, {where}" + (f"  [thread {fault.tid}]" if fault.tid != fault.pid else ""))
    for frame in loc.inlined_from:
        at = f"{frame.file}:{frame.line}" if frame.file else "?"
        lines.append(f"  inlined into {frame.function} at {at}")
    if fault.insn:
        lines.append(f"  instruction: {fault.insn}")
    if fault.explained is False:
        lines.append("  note: no decoded operand of this instruction breaks the alignment rule; VA and size are the decoder's best guess")
    elif fault.explained is None:
        lines.append("  note: the instruction could not be decoded; VA, size and access are unknown")
    if source_text is not None and loc.line:
        lines.append(f"  {loc.line:<8}{source_text.rstrip()}")
    return lines


def last_fault_report(session: Any) -> list[str]:
    """The break report of the session's last recorded fault, with its source line when the
    `source` setting is on: what every adapter prints at a break stop."""
    fault = session.last_fault
    if fault is None:
        return []
    loc = session.resolve(fault.pc)
    src = None
    if session.config["source"] and loc.file and loc.line and session.symbolizer is not None:
        src = session.symbolizer.source_line(loc.file, loc.line)
    return fault_report(fault, loc, src)
