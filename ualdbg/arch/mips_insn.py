"""MIPS32 loads and stores as `decode.Insn` recipes, from capstone 5 (CS_ARCH_MIPS): the memory
operand of each (base + 16-bit displacement; the indexed FPU forms base + index), the data
registers as gdb names them, and signedness, for the step engine and for the fix-up of signal
mode alike. lwl/lwr/swl/swr are the unaligned-access idiom itself (they never trap, each touches
the bytes up to a word boundary): no recipe. A double (ldc1/sdc1) lives in an even/odd pair of
32-bit registers (FR=0, qemu's default 24Kf and Debian's o32): $f(n) holds the low word."""
from __future__ import annotations

from collections.abc import Mapping

import capstone
from capstone import mips

from ..decode import Insn, MemOperand, RegisterUnavailable
from ..model import Access, AccessKind

MASK32 = 0xFFFFFFFF

# mnemonic -> (bytes, kind, signed, float)
_R, _W = AccessKind.READ, AccessKind.WRITE
_MEM: dict[str, tuple[int, AccessKind, bool, bool]] = {
    "lb": (1, _R, True, False), "lbu": (1, _R, False, False), "sb": (1, _W, False, False),
    "lh": (2, _R, True, False), "lhu": (2, _R, False, False), "sh": (2, _W, False, False),
    "lw": (4, _R, True, False), "sw": (4, _W, False, False), "lwu": (4, _R, False, False),
    "ld": (8, _R, False, False), "sd": (8, _W, False, False),
    "ll": (4, _R, True, False), "sc": (4, _W, False, False),
    "lwc1": (4, _R, False, True), "swc1": (4, _W, False, True),
    "ldc1": (8, _R, False, True), "sdc1": (8, _W, False, True),
    "lwxc1": (4, _R, False, True), "swxc1": (4, _W, False, True),
    "ldxc1": (8, _R, False, True), "sdxc1": (8, _W, False, True),
}
_ALIASES = {"fp": "s8"}  # capstone's name of $30; gdb's is s8


def _gdb(name: str) -> str:
    return _ALIASES.get(name, name)


def _flow(ci: capstone.CsInsn) -> tuple[str, int | None]:
    imm = [o.imm & MASK32 for o in ci.operands if o.type == mips.MIPS_OP_IMM]
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
    def __init__(self, endian: str) -> None:
        order = capstone.CS_MODE_BIG_ENDIAN if endian == "big" else capstone.CS_MODE_LITTLE_ENDIAN
        self.endian = endian
        self._cs = capstone.Cs(capstone.CS_ARCH_MIPS, capstone.CS_MODE_MIPS32 | order)
        self._cs.detail = True

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        try:
            ci = next(self._cs.disasm(bytes(code[:4]), pc & MASK32, 1), None)
        except capstone.CsError:
            return None
        if ci is None:
            return None
        flow, target = _flow(ci)
        return Insn(pc=ci.address, size=4, mnemonic=ci.mnemonic, op_str=ci.op_str, rep=False,
                    operands=self.operands(ci), flow=flow, name=ci.mnemonic, target=target, raw=bytes(ci.bytes),
                    arch="mips" if self.endian == "big" else "mipsel")

    def operands(self, ci: capstone.CsInsn) -> tuple[MemOperand, ...]:
        spec = _MEM.get(ci.mnemonic)
        if spec is None:
            return ()
        size, kind, signed, flt = spec
        regs = [_gdb(ci.reg_name(o.reg)) for o in ci.operands if o.type == mips.MIPS_OP_REG]
        mems = [o for o in ci.operands if o.type == mips.MIPS_OP_MEM]
        if ci.mnemonic.endswith("xc1"):  # lwxc1 fd, index(base): capstone gives fd, index, base
            if len(regs) < 3:
                return ()
            data, index, base, disp = regs[0], regs[1], regs[2], 0
        else:
            if not mems or not regs:
                return ()
            data, index, base, disp = regs[0], None, _gdb(ci.reg_name(mems[0].mem.base)), mems[0].mem.disp
        if flt and size == 8:
            n = int(data[1:]) & ~1
            pair = (f"f{n}", f"f{n + 1}")  # low word, high word
            names: tuple[str, ...] = pair if self.endian == "little" else pair[::-1]
        else:
            names = (data,)
        return (MemOperand(base=base, index=index, scale=1, disp=disp, segment=None, size=size, kind=kind,
                           implicit=False, addr_size=4, data=names, signed=signed, float_data=flt,
                           exclusive=ci.mnemonic in ("ll", "sc"),
                           ),)


def decoder(arch: str) -> MipsDecoder:
    return MipsDecoder("little" if arch.endswith("el") else "big")


def _read(regs: Mapping[str, int], name: str) -> int:
    if name == "zero":
        return 0
    try:
        return regs[name] & MASK32
    except KeyError:
        raise RegisterUnavailable(f"register {name!r} is needed to evaluate the address") from None


def effective_address(op: MemOperand, regs: Mapping[str, int]) -> int:
    ea = op.disp
    if op.base is not None:
        ea += _read(regs, op.base)
    if op.index is not None:
        ea += _read(regs, op.index) * op.scale
    return ea & MASK32


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    return [Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]
