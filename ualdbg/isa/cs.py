"""The one place capstone decodes a single instruction for ualdbg's decoders (decode.py and the
capstone-based ones in arch/)."""
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
