"""An instruction's cost class on x86 (core/cost.py): whether it is locked (a `lock` prefix, or
`xchg` with memory, which the CPU locks without one) and whether it is a vector access (an xmm,
ymm or zmm register moves the data: SSE, AVX, AVX-512, scalar forms included), and the class of
one of its accesses. On a strict CPU (a signal-mode CPU under qemu-user) every access traps."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.cost import cost_class
from ..core.model import Access

if TYPE_CHECKING:
    from .insn import Insn

_VECTOR_REGS = ("xmm", "ymm", "zmm")


def is_locked(insn: Insn | None) -> bool:
    """A locked read-modify-write: `lock`-prefixed, or xchg with a memory operand (implicitly
    locked, Intel SDM XCHG)."""
    if insn is None or insn.arch not in ("x86_64", "i386"):
        return False
    words = insn.mnemonic.split()
    return "lock" in words or (bool(insn.operands) and (insn.name or words[-1]) == "xchg")


def is_vector(insn: Insn | None) -> bool:
    """The data moves through a SIMD register (xmm/ymm/zmm)."""
    return insn is not None and insn.arch in ("x86_64", "i386") and any(r in insn.op_str for r in _VECTOR_REGS)


def is_strict(arch: str) -> bool:
    """A CPU whose misaligned accesses trap (no cost class but `traps`): the CPUs that trap
    natively or by prctl; not x86 (#AC is ualdbg's own doing) nor arm64 (the step engine only)."""
    from . import arch as archmod  # the CPU table: only for a trace of another CPU
    from .arch.info import MECH_NATIVE, MECH_PRCTL

    try:
        info = archmod.arch_by_name(arch)
    except ValueError:
        return False
    return info.mechanism in (MECH_NATIVE, MECH_PRCTL)


def classify(insn: Insn | None, access: Access | None, arch: str = "x86_64") -> str:
    """The cost class of `access` by `insn` (core/cost.py's names)."""
    if arch not in ("x86_64", "i386") and is_strict(arch):
        return cost_class(None, None, False, strict=True)
    if access is None:
        return cost_class(None, None, False)
    return cost_class(access.va, access.size, is_locked(insn))
