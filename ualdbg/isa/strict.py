"""Signal mode on CPUs that trap a misaligned access (SPARC, Alpha, PA-RISC, SH-4, arm64's
exclusive and acquire/release forms, MIPS, 32-bit ARM): per architecture, the decoder that
turns the faulting instruction into the one instruction model (insn.py) and the facts the
fix-up (engines/fixup.py) needs beside it: delay slots, the `nop` a fault in a slot resumes
through, whether gdb steps the CPU in software, and what the instruction word alone does not
say (SH's FPSCR.SZ). Which decoder each architecture keeps, and why: docs/ARCHITECTURES.md."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .arch import aarch64_insn, alpha, hppa, mips, sh4, sparc64
from .insn import Insn, MemOperand

# code, pc, instruction set ("thumb" or "") -> the instruction, None when it is no access the
# architecture traps
DecodeFn = Callable[[bytes, int, str], "Insn | None"]
# the delayed branch's word, its address, a register reader -> where it goes (None: not emulated)
Continuation = Callable[[int, int, Callable[[str], int]], "int | None"]
# the instruction, its transfer, a register reader -> what the word alone does not say
Refine = Callable[[Insn, MemOperand, Callable[[str], int]], "tuple[Insn, MemOperand]"]


def _words(decode: Callable[[int, int], Insn | None], width: int, order: str) -> Callable[[], DecodeFn]:
    """A hand-written decoder of fixed-size words, as a DecodeFn."""
    def make() -> DecodeFn:
        def run(code: bytes, pc: int, mode: str = "") -> Insn | None:
            if len(code) < width:
                return None
            return decode(int.from_bytes(code[:width], order), pc)  # type: ignore[arg-type]
        return run
    return make


def _capstone(arch: str) -> Callable[[], DecodeFn]:
    """decode.Decoder (capstone and the arch/*_insn recipes, as the step engine uses them)."""
    def make() -> DecodeFn:
        from .decode import Decoder

        return Decoder(arch).decode
    return make


def _aarch64() -> DecodeFn:
    def run(code: bytes, pc: int, mode: str = "") -> Insn | None:
        return aarch64_insn.signal_decode(code, pc)
    return run


def _sh4_refine(insn: Insn, op: MemOperand, reg: Callable[[str], int]) -> tuple[Insn, MemOperand]:
    if not op.float_data:
        return insn, op
    try:
        fpscr = reg("fpscr")
    except Exception:
        fpscr = 0  # gdb's plain `sh` has no FPU registers: the ELF is no SH-4 FPU program
    return sh4.refine(insn, op, fpscr)


@dataclass(frozen=True)
class Strict:
    """What signal mode needs of one architecture besides its ArchInfo."""

    decoder: Callable[[], DecodeFn]  # makes the decoder (once per engine)
    # a delayed branch: is this word one (the faulting instruction after it is its slot), and
    # where does it go
    delay_slot: tuple[Callable[[int], bool], Continuation] | None = None
    nop: tuple[int, int] | None = None  # the `nop` a fault in a slot resumes through: (word, bytes)
    # gdb single-steps it in software (a breakpoint after the instruction): running the `nop`
    # as a slot goes where a taken branch goes, so the step must stop there too
    software_step: bool = False
    refine: Refine | None = None


_MIPS32 = dict(delay_slot=(mips.is_delayed_branch, mips.branch_continuation), nop=(mips.NOP, 4), software_step=True)

STRICT: dict[str, Strict] = {
    "sparc64": Strict(_words(sparc64.decode, 4, "big")),
    "alpha": Strict(_words(alpha.decode, 4, "little")),
    "hppa": Strict(_words(hppa.decode, 4, "big")),
    "sh4": Strict(_words(sh4.decode, 2, "little"), delay_slot=(sh4.is_delayed_branch, sh4.branch_continuation),
                  nop=(sh4.NOP, 2), refine=_sh4_refine),
    "aarch64": Strict(_aarch64),
    "mips": Strict(_capstone("mips"), **_MIPS32),  # type: ignore[arg-type]
    "mipsel": Strict(_capstone("mipsel"), **_MIPS32),  # type: ignore[arg-type]
    "mips64el": Strict(_capstone("mips64el"), delay_slot=(mips.is_delayed_branch, mips.branch_continuation64),
                       nop=(mips.NOP, 4), software_step=True),
    "armhf": Strict(_capstone("armhf")),
    "armel": Strict(_capstone("armel")),
}


def strict(arch: str) -> Strict | None:
    """Signal mode's decoder and facts for this architecture; None: it has none."""
    return STRICT.get(arch)
