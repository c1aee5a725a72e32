"""MIPS32 loads and stores as recipes of the one instruction model (isa/insn.py), from capstone 5 (CS_ARCH_MIPS): the memory
operand of each (base + 16-bit displacement; the indexed FPU forms base + index), the data
registers as gdb names them, and signedness, for the step engine and for the fix-up of signal
mode alike. lwl/lwr/swl/swr are the unaligned-access idiom itself (they never trap, each touches
the bytes up to a word boundary): no recipe. A double (ldc1/sdc1) lives in an even/odd pair of
32-bit registers (FR=0, qemu's default 24Kf and Debian's o32): $f(n) holds the low word.

MIPS64 n64 (mips64el): capstone's MIPS64 mode adds ld/sd/lwu and lld/scd (ldl/ldr/sdl/sdr are
the unaligned idiom again: no recipe); addresses and registers are 64-bit, $8-$15 are gdb's
a4-a7 and t0-t3 (capstone prints o32's names), and a double is one 64-bit $fN (FR=1)."""
from __future__ import annotations

from collections.abc import Mapping

import capstone
from capstone import mips

from ...core.model import Access, AccessKind
from ..cs import first_insn
from ..insn import Insn, MemOperand, RegisterUnavailable

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


def decoder(arch: str) -> MipsDecoder:
    return MipsDecoder("little" if arch.endswith("el") else "big", arch)


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
