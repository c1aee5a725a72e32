"""The CPU-neutral door to decoding: a CPU's decoder by name, and the evaluation of a decoded
instruction's recipes (insn.py) against live registers into `Access` records, each done by the
module of isa/arch/ that declares the instruction's CPU (isa/cpu.py: the contract)."""
from __future__ import annotations

from collections.abc import Mapping

from ..core.model import Access
from .arch import CPUS
from .cpu import InsnDecoder
from .insn import Insn, MemOperand, RegisterUnavailable, Vsib

__all__ = ["DECODABLE", "Insn", "InsnDecoder", "MemOperand", "RegisterUnavailable", "Vsib", "accesses", "decoder_for"]

# The CPUs whose every instruction ualdbg decodes (the step engine's): x86-64 first.
DECODABLE: tuple[str, ...] = tuple(name for name, cpu in CPUS.items() if cpu.decoder is not None)


def decoder_for(arch: str = "x86_64") -> InsnDecoder:
    """A new decoder of every instruction of `arch`; ValueError where ualdbg has none (SPARC,
    Alpha, PA-RISC, SH-4: only signal mode decodes their faulting instructions)."""
    cpu = CPUS.get(arch)
    if cpu is None or cpu.decoder is None:
        raise ValueError(f"unsupported architecture {arch!r}; supported: {', '.join(DECODABLE)}")
    return cpu.decoder()


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    """The memory accesses `insn` makes when it executes with these registers, as its CPU's
    module evaluates them (x86-64: isa/arch/x86_64.py `accesses`, which says what `regs` holds).
    Raises RegisterUnavailable (a KeyError) when a register it needs is missing."""
    evaluate = CPUS[insn.arch].accesses
    if evaluate is None:
        raise ValueError(f"ualdbg does not evaluate {insn.arch} instructions outside signal mode")
    return evaluate(insn, regs)
