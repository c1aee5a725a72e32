"""PA-RISC (32-bit Linux userland): the kernel fixes up unaligned accesses unless the program
asked for prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS); then SIGBUS/BUS_ADRALN with the data address
(regs->ior) in si_addr (arch/parisc/kernel/unaligned.c). Big-endian, and the stack grows up.
capstone 5 has no PA-RISC (capstone 6.0.0a11's loses fldw/fstw's register half: measured in
docs/ARCHITECTURES.md): the loads and stores that can be misaligned (ldh/ldw/sth/stw and the
FPU's fldw/fldd/fstw/fstd, displacement and indexed forms) are decoded here, as the kernel's
fix-up handler does, into the one instruction model (isa/insn.py)."""
from __future__ import annotations

from functools import partial

from ...core.model import AccessKind
from ..cpu import CallConvention, Cpu, Strict, WordDecoder
from ..insn import Insn, MemOperand
from .info import MECH_PRCTL, ArchInfo

GPRS = ("r0", "r1", "rp", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
        "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26", "dp",
        "ret0", "ret1", "sp", "r31")

HPPA = ArchInfo(
    name="hppa",
    pc="pc",  # gdb's pc is the head of the PC queue without its privilege bits (pcoqh has them)
    sp="sp",
    gdb_names=("hppa",),
    e_machine=15,  # EM_PARISC
    elf_class=32,
    endian="big",
    gprs=GPRS,
    zero_regs=("r0",),
    npc="pcoqt",
    pc_write="pcoqh",  # the PC queue: head and tail, both advanced (like SPARC's nPC)
    mechanism=MECH_PRCTL,
    native_sigbus=10,
    si_addr="data",
    qemu="qemu-hppa",
    triplet="hppa-linux-gnu",
)
CALL = CallConvention(args=("r26", "r25", "r24", "r23"), ret="ret0", return_address="rp", stack_align=64,
                      stack_grows_up=True)


def _insn(word: int, pc: int, name: str, size: int, kind: str, reg: int, base: int, index: int | None, scaled: bool,
          disp: int, float_reg: bool = False, right: bool = False) -> Insn:
    """One load or store in the one instruction model. The data registers as gdb names them, in
    address order: a double is gdb's two 32-bit halves frN (the high word, first in memory) and
    frNR; fldw/fstw's `right` is the right half of the 64-bit float register (frNR)."""
    if not float_reg:
        data: tuple[str, ...] = (GPRS[reg],)
    elif size == 8:
        data = (f"fr{reg}", f"fr{reg}R")
    else:
        data = (f"fr{reg}" + ("R" if right else ""),)
    where = f"{GPRS[index]}({GPRS[base]})" if index is not None else f"{disp}({GPRS[base]})"
    name += ",s" if scaled else ""
    ops = f"{where},{data[0]}" if kind == "load" else f"{data[0]},{where}"
    # base + index * size for the scaled indexed form
    op = MemOperand(base=GPRS[base], index=GPRS[index] if index is not None else None, scale=size if scaled else 1,
                    disp=disp, segment=None, size=size, kind=AccessKind.READ if kind == "load" else AccessKind.WRITE,
                    implicit=False, addr_size=4, data=data, float_data=float_reg)
    return Insn(pc=pc, size=4, mnemonic=name, op_str=ops, rep=False, operands=(op,), flow="next", name=name,
                raw=word.to_bytes(4, "big"), arch="hppa")


def _low_sign_ext(value: int, bits: int) -> int:
    """PA-RISC immediates keep their sign in the lowest bit."""
    return (value >> 1) - ((value & 1) << (bits - 1))


# Major opcodes with a 14-bit displacement: ldh/ldw, sth/stw (bytes cannot be misaligned;
# ldwm/stwm modify the base: not decoded, so not performed).
_DISP14 = {0x11: ("ldh", 2, "load"), 0x12: ("ldw", 4, "load"), 0x19: ("sth", 2, "store"), 0x1A: ("stw", 4, "store")}
# Opcode 0x03, by ext4: the indexed and short-displacement forms.
_EXT4 = {1: ("ldh", 2, "load"), 2: ("ldw", 4, "load"), 9: ("sth", 2, "store"), 10: ("stw", 4, "store")}


def decode(word: int, pc: int = 0) -> Insn | None:
    """A PA-RISC 1.1 load or store that can fault on alignment, else None."""
    op = word >> 26
    base, field = (word >> 21) & 0x1F, (word >> 16) & 0x1F
    if op in _DISP14:
        name, size, kind = _DISP14[op]
        return _insn(word, pc, name, size, kind, field, base, None, False, _low_sign_ext(word & 0x3FFF, 14))
    modify, short, ua = (word >> 5) & 1, (word >> 12) & 1, (word >> 13) & 1
    if op in (0x09, 0x0B):  # coprocessor word/doubleword: fldw/fstw, fldd/fstd
        if modify or (word >> 7) & 3:
            return None  # a base update, or a coprocessor other than the FPU (uid)
        store = bool((word >> 9) & 1)
        size = 4 if op == 0x09 else 8
        name = ("fst" if store else "fld") + ("w" if size == 4 else "d")
        disp = _low_sign_ext(field, 5) if short else 0
        return _insn(word, pc, name, size, "store" if store else "load", word & 0x1F, base, None if short else field,
                       bool(ua) and not short, disp, float_reg=True, right=size == 4 and bool((word >> 6) & 1))
    if op != 0x03:
        return None
    ext4 = (word >> 6) & 0xF
    if ext4 not in _EXT4 or modify:
        return None  # a base register update (,ma/,mb/,m) is not performed here
    name, size, kind = _EXT4[ext4]
    if short:
        if kind == "load":
            return _insn(word, pc, name, size, kind, word & 0x1F, base, None, False, _low_sign_ext(field, 5))
        return _insn(word, pc, name, size, kind, field, base, None, False, _low_sign_ext(word & 0x1F, 5))
    if kind != "load":
        return None  # stores have no indexed form
    return _insn(word, pc, name, size, kind, word & 0x1F, base, field, bool(ua), 0)


CPUS = (Cpu(HPPA, strict=Strict(partial(WordDecoder, HPPA.name, decode, 4, "big"), call=CALL)),)
