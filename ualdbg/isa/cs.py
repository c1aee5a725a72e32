"""The one place capstone decodes a single instruction for the capstone-based decoders of
isa/arch/ (ARM, AArch64, MIPS, RISC-V; x86-64's reads capstone's whole detail itself)."""
from __future__ import annotations

from typing import Any

import capstone


def first_insn(cs: capstone.Cs, code: bytes, pc: int, mask: int, n: int = 4) -> Any:
    """The instruction capstone decodes at `pc` (masked to the address width) from the first `n`
    bytes of `code`, or None when they are not one."""
    try:
        return next(cs.disasm(bytes(code[:n]), pc & mask, 1), None)
    except capstone.CsError:
        return None
