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
the step also stops at the branch's destination (`slot_catch`).

Its decoder: MIPS32 loads and stores as recipes of the one instruction model (isa/insn.py), from
capstone 5 (CS_ARCH_MIPS): the memory operand of each (base + 16-bit displacement; the indexed
FPU forms base + index), the data registers as gdb names them, and signedness, for the step
engine and for the fix-up of signal mode alike. lwl/lwr/swl/swr are the unaligned-access idiom itself (they never trap, each touches
the bytes up to a word boundary): no recipe. A double (ldc1/sdc1) lives in an even/odd pair of
32-bit registers (FR=0, qemu's default 24Kf and Debian's o32): $f(n) holds the low word.

MIPS64 n64 (mips64el): capstone's MIPS64 mode adds ld/sd/lwu and lld/scd (ldl/ldr/sdl/sdr are
the unaligned idiom again: no recipe); addresses and registers are 64-bit, $8-$15 are gdb's
a4-a7 and t0-t3 (capstone prints o32's names), and a double is one 64-bit $fN (FR=1)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import capstone
from capstone import mips

from ...core.model import Access, AccessKind
from ..cpu import CallConvention, Continuation, Cpu, Strict
from ..cs import first_insn
from ..insn import Insn, MemOperand, RegisterUnavailable
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
)
# o32 PIC: a callee computes its gp from t9
CALL32 = CallConvention(args=("a0", "a1", "a2", "a3"), ret="v0", return_address="ra", target="t9", stack_align=8)

MIPS = ArchInfo(name="mips", endian="big", qemu="qemu-mips", triplet="mips-linux-gnu", **_COMMON)  # type: ignore[arg-type]
MIPSEL = ArchInfo(name="mipsel", endian="little", qemu="qemu-mipsel", triplet="mipsel-linux-gnu", **_COMMON)  # type: ignore[arg-type]

# MIPS64 n64 (Debian `mips64el`): 64-bit registers, $8-$15 are a4-a7 and t0-t3 (gdb's names),
# ld/sd/lwu and 64-bit FPRs (FR=1: ldc1/sdc1 move one $fN). The same traps, slots and fix-up.
GPRS64 = GPRS[:8] + ("a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3") + GPRS[16:]
MIPS64EL = ArchInfo(**{**_COMMON, "gdb_names": ("mips:isa64", "mips:5000", "mips:octeon", "mips:loongson"),
                       "elf_class": 64, "gprs": GPRS64, "fpr64": True},  # type: ignore[arg-type]
                    name="mips64el", endian="little", qemu="qemu-mips64el", triplet="mips64el-linux-gnuabi64")
CALL64 = CallConvention(args=("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"), ret="v0", return_address="ra",
                        target="t9", stack_align=16)

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


# --------------------------------------------------------------------------------------------
# The decoder

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1

# mnemonic -> (bytes, kind, signed, float)
_R, _W = AccessKind.READ, AccessKind.WRITE
_MEM: dict[str, tuple[int, AccessKind, bool, bool]] = {
    "lb": (1, _R, True, False), "lbu": (1, _R, False, False), "sb": (1, _W, False, False),
    "lh": (2, _R, True, False), "lhu": (2, _R, False, False), "sh": (2, _W, False, False),
    "lw": (4, _R, True, False), "sw": (4, _W, False, False), "lwu": (4, _R, False, False),
    "ld": (8, _R, False, False), "sd": (8, _W, False, False),
    "ll": (4, _R, True, False), "sc": (4, _W, False, False), "lld": (8, _R, False, False), "scd": (8, _W, False, False),
    "lwc1": (4, _R, False, True), "swc1": (4, _W, False, True),
    "ldc1": (8, _R, False, True), "sdc1": (8, _W, False, True),
    "lwxc1": (4, _R, False, True), "swxc1": (4, _W, False, True),
    "ldxc1": (8, _R, False, True), "sdxc1": (8, _W, False, True),
}
_ALIASES = {"fp": "s8"}  # capstone's name of $30; gdb's is s8


_O32 = ("zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7")
_N64 = dict(zip(_O32[8:], ("a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3")))


def _gdb(name: str, n64: bool = False) -> str:
    name = _ALIASES.get(name, name)
    return _N64.get(name, name) if n64 else name


def _flow(ci: capstone.CsInsn, mask: int = MASK32) -> tuple[str, int | None]:
    imm = [o.imm & mask for o in ci.operands if o.type == mips.MIPS_OP_IMM]
    target = imm[-1] if imm else None
    name = ci.mnemonic
    if name in ("jal", "bal", "jalr", "bgezal", "bltzal"):
        return "call", target if name in ("jal", "bal") else None
    if name == "jr" and ci.op_str == "$ra":
        return "ret", None
    if name in ("j", "b", "jr"):
        return "jump", target if name != "jr" else None
    if ci.group(capstone.CS_GRP_JUMP) or ci.group(capstone.CS_GRP_BRANCH_RELATIVE):
        return "cond", target
    if name in ("syscall", "break", "teq", "sdbbp"):
        return "other", None
    return "next", None


class MipsDecoder:
    """capstone's MIPS32 or MIPS64 decoder with the recipes (an InsnDecoder, isa/cpu.py)."""

    max_insn_len = 4

    def __init__(self, endian: str, arch: str = "") -> None:
        order = capstone.CS_MODE_BIG_ENDIAN if endian == "big" else capstone.CS_MODE_LITTLE_ENDIAN
        self.endian = endian
        self.arch = arch or ("mips" if endian == "big" else "mipsel")
        self.n64 = self.arch == "mips64el"
        self.mask = MASK64 if self.n64 else MASK32
        self._cs = capstone.Cs(capstone.CS_ARCH_MIPS, (capstone.CS_MODE_MIPS64 if self.n64 else capstone.CS_MODE_MIPS32)
                               | order)
        self._cs.detail = True

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        ci = first_insn(self._cs, code, pc, self.mask)
        if ci is None:
            return None
        flow, target = _flow(ci, self.mask)
        return Insn(pc=ci.address, size=4, mnemonic=ci.mnemonic, op_str=ci.op_str, rep=False,
                    operands=self.operands(ci), flow=flow, name=ci.mnemonic, target=target, raw=bytes(ci.bytes),
                    arch=self.arch)

    def operands(self, ci: capstone.CsInsn) -> tuple[MemOperand, ...]:
        spec = _MEM.get(ci.mnemonic)
        if spec is None:
            return ()
        size, kind, signed, flt = spec
        regs = [_gdb(ci.reg_name(o.reg), self.n64) for o in ci.operands if o.type == mips.MIPS_OP_REG]
        mems = [o for o in ci.operands if o.type == mips.MIPS_OP_MEM]
        if ci.mnemonic.endswith("xc1"):  # lwxc1 fd, index(base): capstone gives fd, index, base
            if len(regs) < 3:
                return ()
            data, index, base, disp = regs[0], regs[1], regs[2], 0
        else:
            if not mems or not regs:
                return ()
            data, index, base, disp = regs[0], None, _gdb(ci.reg_name(mems[0].mem.base), self.n64), mems[0].mem.disp
        if flt and size == 8 and not self.n64:
            n = int(data[1:]) & ~1
            pair = (f"f{n}", f"f{n + 1}")  # low word, high word
            names: tuple[str, ...] = pair if self.endian == "little" else pair[::-1]
        else:
            names = (data,)
        return (MemOperand(base=base, index=index, scale=1, disp=disp, segment=None, size=size, kind=kind,
                           implicit=False, addr_size=8 if self.n64 else 4, data=names, signed=signed,
                           float_data=flt, exclusive=ci.mnemonic in ("ll", "sc", "lld", "scd"),
                           ),)


def _read(regs: Mapping[str, int], name: str, mask: int) -> int:
    if name == "zero":
        return 0
    try:
        return regs[name] & mask
    except KeyError:
        raise RegisterUnavailable(f"register {name!r} is needed to evaluate the address") from None


def effective_address(op: MemOperand, regs: Mapping[str, int]) -> int:
    mask = MASK64 if op.addr_size == 8 else MASK32
    ea = op.disp
    if op.base is not None:
        ea += _read(regs, op.base, mask)
    if op.index is not None:
        ea += _read(regs, op.index, mask) * op.scale
    return ea & mask


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    return [Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]


def _cpu(info: ArchInfo, continuation: Continuation, call: CallConvention) -> Cpu:
    decoder = partial(MipsDecoder, info.endian, info.name)
    return Cpu(info, decoder=decoder, accesses=accesses,
               strict=Strict(decoder, delay_slot=(is_delayed_branch, continuation), nop=(NOP, 4), software_step=True,
                             call=call))


# mips64el first: gdb's "mips:isa64r2" would match mips's and mipsel's prefix "mips" too.
CPUS = (_cpu(MIPS64EL, branch_continuation64, CALL64), _cpu(MIPS, branch_continuation, CALL32),
        _cpu(MIPSEL, branch_continuation, CALL32))
