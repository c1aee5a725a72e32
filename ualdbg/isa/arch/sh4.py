"""SuperH SH-4: the kernel fixes up unaligned accesses (and can warn) unless the program asked
for prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS); then SIGBUS/BUS_ADRALN with the data address
(arch/sh/kernel/traps_32.c). Little-endian as Debian builds it; 16-bit instructions. capstone 5
has SH but does not give operands ualdbg can perform: the moves that can be misaligned (mov.w,
mov.l and fmov.s in every addressing mode but the PC-relative ones, which are aligned by
construction) are decoded here, as the kernel's handle_unaligned_ins does, into the one
instruction model (isa/insn.py). Measured against capstone 5's and 6's SH: docs/ARCHITECTURES.md.

Branches have a delay slot. qemu-sh4 reports a fault in a slot with the PC at the slot (Linux
puts it at the branch) and keeps its own "in a delay slot" state, so whatever the PC is set to
runs as the slot before the branch is taken, to a target qemu may hold stale: the fix-up
performs the access, steps once through a `nop` and sets the PC to where the branch goes
(`branch_continuation`; engines/fixup.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from ...core.model import AccessKind
from ..cpu import CallConvention, Cpu, Strict, WordDecoder
from ..insn import Insn, MemOperand
from .info import MECH_PRCTL, ArchInfo

SH4 = ArchInfo(
    name="sh4",
    pc="pc",
    sp="r15",
    gdb_names=("sh4", "sh2a-or-sh4", "sh"),
    e_machine=42,  # EM_SH
    elf_class=32,
    gprs=tuple(f"r{n}" for n in range(16)) + ("pr", "gbr", "mach", "macl", "sr"),
    insn_size=2,
    mechanism=MECH_PRCTL,
    native_sigbus=7,
    si_addr="data",
    qemu="qemu-sh4",
    triplet="sh4-linux-gnu",
)
CALL = CallConvention(args=("r4", "r5", "r6", "r7"), ret="r0", return_address="pr", stack_align=4)

NOP = 0x0009
FPSCR_SZ = 1 << 20  # fmov moves 64-bit register pairs


def _insn(w: int, pc: int, name: str, size: int, kind: str, reg: str, base: str, index: str | None, disp: int,
          update: int = 0, float_reg: bool = False) -> Insn:
    """One move in the one instruction model. `update`: @Rm+ moves the base by +size after the
    access, @-Rn by -size before it (disp is -size then): the recipe's writeback. A mov.w/mov.l
    load sign-extends into 32 bits."""
    if index:
        where = f"@(r0,{base})"
    elif update > 0:
        where = f"@{base}+"
    elif update < 0:
        where = f"@-{base}"
    elif disp or base == "gbr":
        where = f"@({disp},{base})"
    else:
        where = f"@{base}"
    load = kind == "load"
    op = MemOperand(base=base, index=index, scale=1, disp=disp, segment=None, size=size,
                    kind=AccessKind.READ if load else AccessKind.WRITE, implicit=False, addr_size=4, data=(reg,),
                    signed=load and not float_reg, float_data=float_reg, writeback=update)
    return Insn(pc=pc, size=2, mnemonic=name, op_str=f"{where},{reg}" if load else f"{reg},{where}", rep=False,
                operands=(op,), flow="next", name=name, raw=w.to_bytes(2, "little"), arch="sh4")


def refine(insn: Insn, op: MemOperand, fpscr: int) -> tuple[Insn, MemOperand]:
    """What the instruction word alone does not say: fmov moves 8 bytes (a register pair) while
    FPSCR.SZ is set; such a pair is not performed (no data registers)."""
    if not op.float_data or not fpscr & FPSCR_SZ:
        return insn, op
    op = replace(op, size=8, data=(), writeback=op.writeback * 2, disp=op.disp * 2)
    return replace(insn, mnemonic=insn.mnemonic.replace("fmov.s", "fmov"), operands=(op,)), op


def _r(n: int) -> str:
    return f"r{n}"


def decode(w: int, pc: int = 0) -> Insn | None:
    """An SH-4 move that can fault on alignment, else None (bytes cannot be misaligned)."""
    top, n, m, lo = w >> 12, (w >> 8) & 0xF, (w >> 4) & 0xF, w & 0xF
    if top == 0x2 and lo in (1, 2, 5, 6):  # mov.w/mov.l Rm,@Rn and Rm,@-Rn
        size = 2 if lo in (1, 5) else 4
        pre = lo in (5, 6)
        return _insn(w, pc, f"mov.{'w' if size == 2 else 'l'}", size, "store", _r(m), _r(n), None,
                       -size if pre else 0, -size if pre else 0)
    if top == 0x6 and lo in (1, 2, 5, 6):  # mov.w/mov.l @Rm,Rn and @Rm+,Rn
        size = 2 if lo in (1, 5) else 4
        post = lo in (5, 6)  # @Rm+ into Rm itself: the loaded value wins (engines/fixup.py)
        return _insn(w, pc, f"mov.{'w' if size == 2 else 'l'}", size, "load", _r(n), _r(m), None, 0,
                       size if post else 0)
    if top == 0x0 and lo in (5, 6, 0xD, 0xE):  # @(R0,Rn)
        size = 2 if lo in (5, 0xD) else 4
        load = lo >= 0xD
        return _insn(w, pc, f"mov.{'w' if size == 2 else 'l'}", size, "load" if load else "store",
                       _r(n) if load else _r(m), _r(m) if load else _r(n), "r0", 0)
    if top == 0x1:  # mov.l Rm,@(disp,Rn)
        return _insn(w, pc, "mov.l", 4, "store", _r(m), _r(n), None, lo * 4)
    if top == 0x5:  # mov.l @(disp,Rm),Rn
        return _insn(w, pc, "mov.l", 4, "load", _r(n), _r(m), None, lo * 4)
    if top == 0x8 and n in (1, 5):  # mov.w R0,@(disp,Rn) / mov.w @(disp,Rm),R0
        return _insn(w, pc, "mov.w", 2, "store" if n == 1 else "load", "r0", _r(m), None, lo * 2)
    if top == 0xC and n in (1, 2, 5, 6):  # @(disp,GBR)
        size = 2 if n in (1, 5) else 4
        return _insn(w, pc, f"mov.{'w' if size == 2 else 'l'}", size, "store" if n <= 2 else "load", "r0", "gbr",
                       None, (w & 0xFF) * size)
    if top == 0xF and lo in (6, 7, 8, 9, 0xA, 0xB):  # fmov.s (4 bytes while FPSCR.SZ is 0)
        load = lo in (6, 8, 9)
        reg = f"fr{n}" if load else f"fr{m}"
        base = _r(m) if load else _r(n)
        update = 4 if lo == 9 else -4 if lo == 0xB else 0
        return _insn(w, pc, "fmov.s", 4, "load" if load else "store", reg, base, "r0" if lo in (6, 7) else None,
                       -4 if update < 0 else 0, update, float_reg=True)
    return None


def is_delayed_branch(w: int) -> bool:
    """bra, bsr, braf, bsrf, jmp, jsr, rts, rte, bt/s, bf/s: the next instruction is their slot."""
    return ((w & 0xE000) == 0xA000 or (w & 0xFD00) == 0x8D00 or (w & 0xF0DF) == 0x0003
            or (w & 0xF0DF) == 0x400B or w in (0x000B, 0x002B))


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def branch_continuation(w: int, branch_pc: int, reg: Callable[[str], int]) -> int | None:
    """Where a delayed branch goes once its slot has run, from the registers as they were when
    it was taken (read them before the slot's own effect is performed). None for rte."""
    top = w >> 12
    if top in (0xA, 0xB):  # bra, bsr (bsr has set pr already)
        return (branch_pc + 4 + 2 * _signed(w & 0xFFF, 12)) & 0xFFFFFFFF
    if (w & 0xFD00) == 0x8D00:  # bt/s (0x8D), bf/s (0x8F)
        t = reg("sr") & 1
        taken = t == 1 if (w & 0xFF00) == 0x8D00 else t == 0
        return (branch_pc + 4 + 2 * _signed(w & 0xFF, 8)) & 0xFFFFFFFF if taken else branch_pc + 4
    n = (w >> 8) & 0xF
    if (w & 0xF0DF) == 0x0003:  # braf, bsrf: PC-relative by a register
        return (branch_pc + 4 + reg(f"r{n}")) & 0xFFFFFFFF
    if (w & 0xF0DF) == 0x400B:  # jmp, jsr
        return reg(f"r{n}") & 0xFFFFFFFF
    if w == 0x000B:  # rts
        return reg("pr") & 0xFFFFFFFF
    return None


def _refine(insn: Insn, op: MemOperand, reg: Callable[[str], int]) -> tuple[Insn, MemOperand]:
    """Signal mode's refine: an fmov's size from FPSCR.SZ, which the word alone does not say."""
    if not op.float_data:
        return insn, op
    try:
        fpscr = reg("fpscr")
    except Exception:
        fpscr = 0  # gdb's plain `sh` has no FPU registers: the ELF is no SH-4 FPU program
    return refine(insn, op, fpscr)


CPUS = (Cpu(SH4, strict=Strict(partial(WordDecoder, SH4.name, decode, 2, "little"),
                               delay_slot=(is_delayed_branch, branch_continuation), nop=(NOP, 2), refine=_refine,
                               call=CALL)),)
