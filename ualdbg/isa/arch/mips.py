"""MIPS32 (o32), big-endian (Debian `mips`) and little-endian (`mipsel`): every misaligned
lh/lhu/sh, lw/sw, lwc1/swc1 and ldc1/sdc1 raises an address error. Linux fixes these up in the
kernel (arch/mips/kernel/unaligned.c; `debugfs mips/unaligned_action` says whether it also
sends SIGBUS) and has no PR_SET_UNALIGN; qemu-user performs no fix-up and delivers SIGBUS
(MIPS numbers it 10) with the data address in si_addr, so under qemu the CPU "traps by itself".

Branches have a delay slot, and gcc fills most slots with loads and stores. qemu-mips reports a
fault in a slot with the PC at the slot (Linux's EPC is the branch, with Cause.BD) and keeps
its own "in a delay slot" state, so whatever the PC is set to runs as the slot of the branch:
the fix-up performs the access, points the PC at a `nop`, which one step runs as the slot, and
sets the PC to where the branch goes (`branch_continuation`; engines/fixup.py, as on SH-4).
gdb steps MIPS in software, by a breakpoint after the `nop`, which a taken branch never reaches:
the step also stops at the branch's destination (`slot_catch`)."""
from __future__ import annotations

from collections.abc import Callable

from .info import MECH_NATIVE, ArchInfo

GPRS = ("zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
        "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp", "sp", "s8", "ra")

_COMMON = dict(
    pc="pc",
    sp="sp",
    gdb_names=("mips",),
    e_machine=8,  # EM_MIPS
    elf_class=32,
    gprs=GPRS,
    zero_regs=("zero",),
    insn_size=4,
    mechanism=MECH_NATIVE,
    native_sigbus=10,
    si_addr="data",
    prctl_nr=4192,  # o32: 4000 + 192 (no PR_SET_UNALIGN on MIPS: unused)
    call_args=("a0", "a1", "a2", "a3"),
    call_ret="v0",
    return_address="ra",
    call_target="t9",  # o32 PIC: a callee computes its gp from t9
    stack_align=8,
    insn_module="mips_insn",
)

MIPS = ArchInfo(name="mips", endian="big", qemu="qemu-mips", triplet="mips-linux-gnu", **_COMMON)  # type: ignore[arg-type]
MIPSEL = ArchInfo(name="mipsel", endian="little", qemu="qemu-mipsel", triplet="mipsel-linux-gnu", **_COMMON)  # type: ignore[arg-type]

# MIPS64 n64 (Debian `mips64el`): 64-bit registers, $8-$15 are a4-a7 and t0-t3 (gdb's names),
# ld/sd/lwu and 64-bit FPRs (FR=1: ldc1/sdc1 move one $fN). The same traps, slots and fix-up.
GPRS64 = GPRS[:8] + ("a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3") + GPRS[16:]
MIPS64EL = ArchInfo(**{**_COMMON, "gdb_names": ("mips:isa64", "mips:5000", "mips:octeon", "mips:loongson"),
                       "elf_class": 64, "gprs": GPRS64, "prctl_nr": 5153, "stack_align": 16,
                       "call_args": ("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"), "fpr64": True},  # type: ignore[arg-type]
                    name="mips64el", endian="little", qemu="qemu-mips64el", triplet="mips64el-linux-gnuabi64")

NOP = 0x00000000  # sll zero, zero, 0

# REGIMM (opcode 1) branches by rt: (condition on rs, likely)
_REGIMM = {0: ("ltz", False), 1: ("gez", False), 2: ("ltz", True), 3: ("gez", True),
           16: ("ltz", False), 17: ("gez", False), 18: ("ltz", True), 19: ("gez", True)}
# Opcodes of the I-type branches comparing rs (and rt): (condition, likely)
_BRANCH = {4: ("eq", False), 5: ("ne", False), 6: ("lez", False), 7: ("gtz", False),
           20: ("eq", True), 21: ("ne", True), 22: ("lez", True), 23: ("gtz", True)}


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _signed64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def is_delayed_branch(w: int) -> bool:
    """A MIPS32 (pre-R6) branch or jump: the next instruction is its delay slot."""
    op = w >> 26
    if op == 0:
        return (w & 0x3F) in (8, 9)  # jr, jalr
    if op == 1:
        return ((w >> 16) & 0x1F) in _REGIMM
    if op in (2, 3) or op in _BRANCH:
        return True
    return op == 17 and ((w >> 21) & 0x1F) == 8  # bc1f, bc1t, bc1fl, bc1tl


def branch_continuation(w: int, branch_pc: int, reg: Callable[[str], int]) -> int | None:
    """Where a branch goes once its slot has run, from the registers read before the slot's own
    effect is performed (a link register was written by the branch already: never compared)."""
    return _continuation(w, branch_pc, reg, GPRS, 32)


def branch_continuation64(w: int, branch_pc: int, reg: Callable[[str], int]) -> int | None:
    """branch_continuation on MIPS64 n64: 64-bit registers and addresses, n64's register names."""
    return _continuation(w, branch_pc, reg, GPRS64, 64)


def _continuation(w: int, branch_pc: int, reg: Callable[[str], int], gprs: tuple[str, ...],
                  bits: int) -> int | None:
    op = w >> 26
    mask = (1 << bits) - 1
    signed = _signed32 if bits == 32 else _signed64
    rs, rt = gprs[(w >> 21) & 0x1F], gprs[(w >> 16) & 0x1F]
    fall = (branch_pc + 8) & mask
    rel = (branch_pc + 4 + (_signed32((w & 0xFFFF) << 16) >> 14)) & mask

    def value(name: str) -> int:
        return 0 if name == "zero" else signed(reg(name))

    if op == 0:  # jr, jalr
        return reg(rs) & mask
    if op in (2, 3):  # j, jal: the 256 MB region of the slot
        return ((branch_pc + 4) & mask & ~0x0FFFFFFF) | ((w & 0x03FFFFFF) << 2)
    if op == 17:  # bc1f/bc1t: FCSR condition bit cc (bit 23 for cc 0, 24 + cc for the others)
        cc = (w >> 18) & 7
        fcsr = reg("fsr")
        bit = (fcsr >> (23 if cc == 0 else 24 + cc)) & 1
        return rel if bit == ((w >> 16) & 1) else fall
    if op == 1:
        cond, _ = _REGIMM[(w >> 16) & 0x1F]
        v = value(rs)
        taken = v < 0 if cond == "ltz" else v >= 0
        return rel if taken else fall
    cond, _ = _BRANCH[op]
    a = value(rs)
    taken = {"eq": a == value(rt), "ne": a != value(rt), "lez": a <= 0, "gtz": a > 0}[cond]
    # A branch-likely runs its slot only when taken: a fault in its slot means it was.
    return rel if taken or _BRANCH[op][1] else fall
