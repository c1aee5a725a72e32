"""Alignment policies: whether one decoded access counts as unaligned — x86 #AC semantics as
measured (docs PLATFORM.md), natural alignment for strict-alignment ports, cache-line and page
splits for performance work — and the cross-check that a trapped #AC is explained by a decode."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from .decode import Insn
from .model import Access

__all__ = [
    "AcPolicy",
    "CachelinePolicy",
    "NaturalPolicy",
    "PagePolicy",
    "POLICY_NAMES",
    "Policy",
    "explains_fault",
    "policy_by_name",
    "required_alignment",
    "violations",
]


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def violates(self, access: Access, insn: Insn | None) -> bool: ...


# Operand sizes that are not a power of two, with the alignment x86 checks them at (Intel SDM
# vol. 3 "Alignment requirements by data type"): x87 extended real and m16:64 far pointers at 8,
# m16:32 far pointers at 4, FSTENV/FSAVE areas at 4 (32-bit form) or 2 (16-bit form).
_ODD_SIZES = {10: 8, 6: 4, 28: 4, 108: 4, 14: 2, 94: 2}


def required_alignment(size: int) -> int:
    """The alignment an operand of `size` bytes needs: its size up to 8, 16 for anything of 16
    bytes or more (vector operands, measured: 32-byte AVX operands are checked at 16)."""
    if size in _ODD_SIZES:
        return _ODD_SIZES[size]
    if size >= 16:
        return 16
    if size <= 1:
        return 1
    return 1 << (size.bit_length() - 1)  # an odd size no table knows: its largest power of two


def _misaligned(access: Access) -> bool:
    return access.va % required_alignment(access.size) != 0


def _crosses(access: Access, unit: int) -> bool:
    return access.size > 0 and access.va // unit != (access.va + access.size - 1) // unit


@dataclass(frozen=True)
class AcPolicy:
    """What raises #AC on x86 with EFLAGS.AC set (measured on Zen 3, PLATFORM.md)."""

    name: ClassVar[str] = "ac"

    def violates(self, access: Access, insn: Insn | None) -> bool:
        if access.size <= 1:  # also rep movsb/stosb, which never fault
            return False
        if insn is not None and (insn.vsib or insn.masked or insn.gp_align):
            # gathers and masked moves never check; movaps & co, cmpxchg16b, fxsave, xsave take
            # #GP (SIGSEGV) instead, which is not an alignment-check fault
            return False
        return _misaligned(access)


@dataclass(frozen=True)
class NaturalPolicy:
    """Every operand aligned to its size (16 at most): what a strict-alignment CPU demands."""

    name: ClassVar[str] = "natural"

    def violates(self, access: Access, insn: Insn | None) -> bool:
        # No instruction exemptions: a gather lane or a masked move at a misaligned address is
        # just as fatal on SPARC or ARMv5 (each gather lane is its own element-sized access).
        # An instruction that itself demands more (vmovaps ymm: 32, xsave: 64) is held to that:
        # the step engine sees the operand before the #GP would kill the program.
        if access.size <= 1:
            return False
        align = required_alignment(access.size)
        if insn is not None and insn.gp_align > align:
            align = insn.gp_align
        return access.va % align != 0


@dataclass(frozen=True)
class CachelinePolicy:
    """The access spans two cache lines (a split load/store: slower, never trapped by x86)."""

    name: ClassVar[str] = "cacheline"
    line: int = 64

    def violates(self, access: Access, insn: Insn | None) -> bool:
        return _crosses(access, self.line)


@dataclass(frozen=True)
class PagePolicy:
    """The access spans two pages (two TLB lookups, possibly two faults)."""

    name: ClassVar[str] = "page"
    page: int = 4096

    def violates(self, access: Access, insn: Insn | None) -> bool:
        return _crosses(access, self.page)


_POLICIES: dict[str, type[AcPolicy] | type[NaturalPolicy] | type[CachelinePolicy] | type[PagePolicy]] = {
    cls.name: cls for cls in (AcPolicy, NaturalPolicy, CachelinePolicy, PagePolicy)
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def policy_by_name(name: str) -> Policy:
    """The policy called `name` (case-insensitive); ValueError naming the valid ones otherwise."""
    cls = _POLICIES.get(name.strip().lower())
    if cls is None:
        raise ValueError(f"unknown alignment policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}")
    return cls()


def violations(policy: Policy, insn: Insn | None, accesses: Sequence[Access]) -> list[Access]:
    """The accesses of one instruction execution that break `policy`, in execution order."""
    return [a for a in accesses if policy.violates(a, insn)]


def explains_fault(insn: Insn | None, accesses: Sequence[Access]) -> bool | None:
    """Whether a SIGBUS/BUS_ADRALN at this instruction is explained by one of its decoded
    accesses under x86 #AC rules. None when the decoder cannot tell: nothing was decoded, or the
    instruction touches memory the decoder does not fully model (far transfers, xsave) and none
    of the accesses it does model would fault."""
    if insn is None:
        return None
    if violations(AcPolicy(), insn, accesses):
        return True
    return False if insn.exact else None
