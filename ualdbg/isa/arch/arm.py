"""32-bit ARM Linux: armhf (ARMv7-A, Thumb-2, VFPv3-D16, hard-float ABI; Debian `armhf`) and
armel (ARMv5TE, soft-float; Debian `armel`). Little-endian. ARMv7 lets plain ldr/str/ldrh/strh
through at any address in user mode (SCTLR.A clear) but raises an alignment fault for
ldrd/strd, ldm/stm, vldr/vstr and vldm/vstm that are not word-aligned, for ldrex/strex and
friends that are not naturally aligned, and for vld1..vld4/vst1..vst4 whose alignment hint
(`[r0:64]`) is not met. Linux fixes the non-exclusive ones up (arch/arm/mm/alignment.c, counted in
/proc/cpu/alignment; SIGBUS only when `echo 4 > /proc/cpu/alignment`); qemu-user performs no
fix-up and delivers SIGBUS/BUS_ADRALN with the data address, so under qemu the CPU "traps by
itself". ARMv5 CPUs and Cortex-M trap (or, ARMv5, rotate) plain misaligned ldr too: the step
engine's natural policy shows those (qemu lets them through, even as arm926).

Its decoder: ARM and Thumb-2 loads and stores as recipes of the one instruction model
(isa/insn.py), from capstone 5 (CS_ARCH_ARM), for the step engine and for the fix-up of signal
mode alike.

A multi-register transfer (ldrd/strd, ldm/stm, push/pop, vldm/vstm, vpush/vpop) is one recipe
per register, in address order, each checked at its own size by the natural policy; the fix-up
joins them back into one access (insn.transfer) and signal mode compares the
first address with what ARMv7 checks (`align`: a word for ldrd/ldm/vldr).

vld1..vld4/vst1..vst4 (whole registers, interleaved structures, one lane, all lanes) are decoded
from their encoding (neon_layout, after the ARM ARM's VLDn tables; capstone 5 does not say which
lane): one recipe per memory element, in address order, at the element's size, which is what a
CPU checks without a hint when SCTLR.A is set (the natural policy: exact). Each recipe's `data`
names the lanes the element fills or empties, "d3[1]" (lane 1 of d3) or "d3[]" (every lane of
d3, the all-lanes load; vld1 {d0[], d1[]} names both), so the fix-up moves each element to its
lanes and keeps the other lanes' bits. The first recipe's `align` is what Linux/qemu check at
the first address for the whole transfer: the hint (`[r0:64]`: 8 bytes; capstone's displacement
holds it in bits), else the element size (never checked by qemu-arm, SCTLR.A being clear).

Writeback: `!` after an immediate offset or a vldN is the recipe's `writeback` (bytes); a base
that moves by a register (`[rn], rm`, `[rn, rm]!`, `[rn, -rm, lsl #2]!`, `vld2.8 {..}, [r0], r2`)
is the first recipe's `writeback_by`, read by the fix-up. A load into the PC (`ldr pc`, `ldm`/`pop`
with pc) is performed as a branch, bit 0 of the loaded word selecting Thumb (ARMv5T and later);
a stored PC and a writeback to a base that is also loaded are not. PC-relative literals are
turned into absolute addresses when decoded. A conditional instruction (its condition field, or
the IT block's in Thumb) makes no access when its condition fails: `accesses` evaluates it from
the CPSR when it is given."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache, partial

import capstone
from capstone import arm

from ...core.model import Access, AccessKind
from ..cpu import CallConvention, Cpu, InsnDecoder, Strict
from ..cs import first_insn
from ..insn import Insn, MemOperand, RegisterUnavailable
from .info import MECH_NATIVE, ArchInfo

GPRS = tuple(f"r{n}" for n in range(13)) + ("sp", "lr", "pc")
CPSR_T = 1 << 5  # Thumb state

_COMMON = dict(
    pc="pc",
    sp="sp",
    e_machine=40,  # EM_ARM
    elf_class=32,
    gprs=GPRS,
    insn_size=None,  # 4 in ARM state, 2 or 4 in Thumb state
    mechanism=MECH_NATIVE,
    native_sigbus=7,
    si_addr="data",
    modes=("arm", "thumb"),
    mode_reg="cpsr",
    mode_bit=CPSR_T,
)

ARMHF = ArchInfo(name="armhf", gdb_names=("armv7", "armv8", "armv6t2"), e_flags=(0x400, 0x400), qemu="qemu-arm",
                 triplet="arm-linux-gnueabihf", default_mode="thumb", **_COMMON)  # type: ignore[arg-type]
ARMEL = ArchInfo(name="armel", gdb_names=("armv5", "armv4", "armv6", "arm"), e_flags=(0x400, 0), qemu="qemu-arm",
                 triplet="arm-linux-gnueabi", default_mode="arm", **_COMMON)  # type: ignore[arg-type]
CALL = CallConvention(args=("r0", "r1", "r2", "r3"), ret="r0", return_address="lr", stack_align=8)

MASK32 = 0xFFFFFFFF
_ALIASES = {"sb": "r9", "sl": "r10", "fp": "r11", "ip": "r12", "r13": "sp", "r14": "lr", "r15": "pc"}
_R, _W = AccessKind.READ, AccessKind.WRITE

# Single-register forms: canonical name -> (bytes, kind, signed)
_SINGLE = {
    "ldr": (4, _R, False), "str": (4, _W, False), "ldrt": (4, _R, False), "strt": (4, _W, False),
    "ldrh": (2, _R, False), "strh": (2, _W, False), "ldrsh": (2, _R, True), "ldrht": (2, _R, False),
    "strht": (2, _W, False), "ldrsht": (2, _R, True),
    "ldrb": (1, _R, False), "strb": (1, _W, False), "ldrsb": (1, _R, True), "ldrbt": (1, _R, False),
    "strbt": (1, _W, False), "ldrsbt": (1, _R, True),
}
# Exclusive and acquire/release forms: name -> (bytes per register, kind); natural alignment.
_EXCLUSIVE = {
    "ldrex": (4, _R), "ldrexh": (2, _R), "ldrexb": (1, _R), "ldrexd": (4, _R),
    "strex": (4, _W), "strexh": (2, _W), "strexb": (1, _W), "strexd": (4, _W),
    "ldaex": (4, _R), "ldaexh": (2, _R), "ldaexb": (1, _R), "ldaexd": (4, _R),
    "stlex": (4, _W), "stlexh": (2, _W), "stlexb": (1, _W), "stlexd": (4, _W),
    "lda": (4, _R), "ldah": (2, _R), "ldab": (1, _R), "stl": (4, _W), "stlh": (2, _W), "stlb": (1, _W),
}
# ldm/stm family: name -> (kind, first address relative to the base in words of the list, sign of writeback)
_MULTIPLE = {
    "ldm": (_R, 0, 1), "ldmia": (_R, 0, 1), "ldmib": (_R, 1, 1), "ldmda": (_R, None, -1), "ldmdb": (_R, None, -1),
    "stm": (_W, 0, 1), "stmia": (_W, 0, 1), "stmib": (_W, 1, 1), "stmda": (_W, None, -1), "stmdb": (_W, None, -1),
    "pop": (_R, 0, 1), "push": (_W, None, -1),
    "vldmia": (_R, 0, 1), "vldmdb": (_R, None, -1), "vstmia": (_W, 0, 1), "vstmdb": (_W, None, -1),
    "vpop": (_R, 0, 1), "vpush": (_W, None, -1),
}


def gdb_reg(name: str) -> str:
    return _ALIASES.get(name, name)


def _reg_bytes(name: str) -> int:
    return {"s": 4, "d": 8, "q": 16}.get(name[0], 4) if name[1:].isdigit() else 4


def _flow(ci: capstone.CsInsn, name: str) -> tuple[str, int | None]:
    imm = [o.imm & MASK32 for o in ci.operands if o.type == arm.ARM_OP_IMM]
    target = imm[-1] if imm else None
    if name in ("bl", "blx"):
        return "call", target if imm else None
    if name == "bx" and ci.op_str == "lr":
        return "ret", None
    if name in ("b", "bx", "cbz", "cbnz", "tbb", "tbh"):
        return ("cond" if name.startswith(("cb", "tb")) or ci.cc not in (arm.ARM_CC_AL, arm.ARM_CC_INVALID)
                else "jump"), target
    if name in ("svc", "bkpt", "udf"):
        return "other", None
    writes_pc = any(o.type == arm.ARM_OP_REG and ci.reg_name(o.reg) == "pc" for o in ci.operands)
    if writes_pc and (name in ("pop", "ldm", "ldmia") or name.startswith("ldr")):
        return "ret", None
    return "next", None


class ArmDecoder:
    """capstone's ARM and Thumb-2 decoders with the recipes (an InsnDecoder, isa/cpu.py); `mode`
    chooses the instruction set."""

    max_insn_len = 4

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self._cs = {}
        for mode, flag in (("arm", capstone.CS_MODE_ARM), ("thumb", capstone.CS_MODE_THUMB)):
            cs = capstone.Cs(capstone.CS_ARCH_ARM, flag | capstone.CS_MODE_LITTLE_ENDIAN)
            cs.detail = True
            self._cs[mode] = cs

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        thumb = mode == "thumb"
        ci = first_insn(self._cs["thumb" if thumb else "arm"], code, pc, MASK32)
        if ci is None:
            return None
        name = ci.insn_name()
        try:
            ops, exact = operands(ci, name, thumb)
        except (KeyError, ValueError, IndexError):
            ops, exact = (), False
        flow, target = _flow(ci, name)
        return Insn(pc=ci.address, size=ci.size, mnemonic=ci.mnemonic, op_str=ci.op_str, rep=False,
                    operands=ops, flow=flow, name=name, target=target, exact=exact, raw=bytes(ci.bytes),
                    arch=self.arch, mode="thumb" if thumb else "arm")


def _mem(base: str | None, disp: int, size: int, kind: AccessKind, data: tuple[str, ...] = (), *,
         index: str | None = None, scale: int = 1, signed: bool = False, flt: bool = False, align: int = 0,
         writeback: int = 0, exclusive: bool = False, status: str | None = None) -> MemOperand:
    return MemOperand(base=base, index=index, scale=scale, disp=disp, segment=None, size=size, kind=kind,
                      implicit=False, addr_size=4, data=data, signed=signed, float_data=flt, align=align,
                      writeback=writeback, exclusive=exclusive, status=status)


def operands(ci: capstone.CsInsn, name: str, thumb: bool) -> tuple[tuple[MemOperand, ...], bool]:
    """The recipes of one capstone instruction, and whether they are exact; the first carries
    a writeback by a register (`writeback_by`)."""
    ops, exact = _operands(ci, name, thumb)
    if ops:
        by_register = _writeback_by(ci, name, thumb)
        if by_register is not None:
            ops = (replace(ops[0], writeback_by=by_register),) + ops[1:]
    return ops, exact


def _operands(ci: capstone.CsInsn, name: str, thumb: bool) -> tuple[tuple[MemOperand, ...], bool]:
    ops = list(ci.operands)
    regs = [gdb_reg(ci.reg_name(o.reg)) for o in ops if o.type == arm.ARM_OP_REG]
    if name in _MULTIPLE:
        return _multiple(ci, name, ops, regs)
    mem_at = next((i for i, o in enumerate(ops) if o.type == arm.ARM_OP_MEM), None)
    if mem_at is None:
        return (), True
    mem = ops[mem_at]
    data = [gdb_reg(ci.reg_name(o.reg)) for o in ops[:mem_at] if o.type == arm.ARM_OP_REG]
    after = ops[mem_at + 1:]
    base: str | None = gdb_reg(ci.reg_name(mem.mem.base))
    assert base is not None
    if name.startswith(("vld", "vst")) and name not in ("vldr", "vstr"):
        return _structure(ci, name, mem, data, after, base, thumb)
    index = gdb_reg(ci.reg_name(mem.mem.index)) if mem.mem.index else None
    disp = mem.mem.disp
    scale = 1
    exact = True
    if index is not None:
        if mem.shift.type not in (0, arm.ARM_SFT_LSL):
            exact = False
        scale = (1 << mem.shift.value if mem.shift.type == arm.ARM_SFT_LSL else 1) * (-1 if mem.subtracted else 1)
    writeback = 0
    if after and after[0].type == arm.ARM_OP_IMM:  # post-indexed: [rn], #imm
        writeback = -after[0].imm if after[0].subtracted else after[0].imm
    elif ci.writeback and not after and index is None:  # pre-indexed with writeback: [rn, #imm]!
        writeback = disp
    # [rn], rm and [rn, rm]!: the base moves by a register (writeback_by); the address
    # is rn's, or rn + rm as without the `!`.
    by_register = _register_writeback(ci, mem, after, base)
    if base == "pc":  # a literal: the word-aligned PC of the instruction + 8 (ARM) or + 4 (Thumb)
        base, disp = None, ((ci.address + (4 if thumb else 8)) & ~3) + disp
    # Not performed: an index or a writeback register shifted other than by lsl (asr, ror).
    performable = exact and (not ((after and after[0].type != arm.ARM_OP_IMM) or (index is not None and ci.writeback))
                             or by_register is not None)
    if name in ("vldr", "vstr"):
        reg = data[0]
        size = _reg_bytes(reg)
        kind = _R if name == "vldr" else _W
        return (_mem(base, disp, size, kind, (reg,) if performable else (), flt=True, align=4),), exact
    if name in ("ldrd", "strd"):
        kind = _R if name == "ldrd" else _W
        first = _mem(base, disp, 4, kind, (data[0],) if performable else (), index=index, scale=scale, align=4,
                     writeback=writeback)
        second = _mem(base, disp + 4, 4, kind, (data[1],) if performable else (), index=index, scale=scale, align=4)
        return (first, second), exact
    if name in _EXCLUSIVE:
        size, kind = _EXCLUSIVE[name]
        status = None
        if kind is _W and name.startswith(("strex", "stlex")):
            status, data = data[0], data[1:]
        if len(data) == 2:  # ldrexd/strexd: a doubleword, naturally aligned
            return (_mem(base, disp, 8, kind, tuple(data), exclusive=True, status=status),), exact
        return (_mem(base, disp, size, kind, tuple(data), exclusive=name.startswith(("ldrex", "strex", "ldaex",
                                                                                        "stlex")),
                     status=status),), exact
    if name in _SINGLE:
        size, kind, signed = _SINGLE[name]
        return (_mem(base, disp, size, kind, (data[0],) if performable and data else (), index=index,
                     scale=scale, signed=signed, writeback=writeback),), exact
    if name.startswith(("pld", "pli")):
        return (), True
    return (), False  # some other memory instruction (ldc, srs, ...): not modelled


def _multiple(ci: capstone.CsInsn, name: str, ops: list, regs: list[str]) -> tuple[tuple[MemOperand, ...], bool]:
    kind, first, sign = _MULTIPLE[name]
    if name in ("push", "pop", "vpush", "vpop"):
        base, lst, writeback = "sp", regs, True
    else:
        base, lst, writeback = regs[0], regs[1:], bool(ci.writeback)
    size = _reg_bytes(lst[0]) if name.startswith("v") else 4
    total = size * len(lst)
    start = first * size if first is not None else -total + (size if name.endswith("da") else 0)
    # A load into the PC is a branch (the fix-up interworks on bit 0); a stored PC (ARM stm) is
    # the instruction's address + 8, not performed, nor a writeback to a base also loaded.
    performable = not (kind is _W and "pc" in lst) and not (writeback and base in lst)
    flt = name.startswith("v")
    out = []
    for k, reg in enumerate(lst):
        out.append(_mem(base, start + k * size, size, kind, (reg,) if performable else (), flt=flt, align=4,
                        writeback=sign * total if writeback and k == 0 else 0))
    return tuple(out), True


# vld/vst "multiple structures" (A=0): type -> (registers, interleave, spacing), as the ARM ARM's
# VLD1..VLD4 (multiple) tables: element n of register d + reg + spacing * k comes from memory
# element (reg * elements + n) * interleave + k.
_NEON_MULTIPLE = {0b0000: (1, 4, 1), 0b0001: (1, 4, 2), 0b0010: (4, 1, 1), 0b0011: (2, 2, 2), 0b0100: (1, 3, 1),
                  0b0101: (1, 3, 2), 0b0110: (3, 1, 1), 0b0111: (1, 1, 1), 0b1000: (1, 2, 1), 0b1001: (1, 2, 2),
                  0b1010: (2, 1, 1)}


def neon_layout(word: int) -> tuple[list[tuple[str, ...]], int, int, int, int] | None:
    """An Advanced SIMD element or structure load/store (VLDn/VSTn) from its encoding (ARM
    0xF4xxxxxx, Thumb 0xF9xxxxxx: bits 23..0 alike): the lanes each memory element goes to or
    comes from, in address order ("d3[1]": lane 1 of d3; "d3[]": every lane of d3, the
    all-lanes load), the element's bytes, the alignment checked at the first address (the
    hint; 0 without one), Rn and Rm (15: no writeback, 13: `!`, else the register added).
    None for an encoding the ARM ARM calls UNDEFINED or UNPREDICTABLE."""
    rn, rm = (word >> 16) & 0xF, word & 0xF
    d = ((word >> 22) & 1) << 4 | (word >> 12) & 0xF
    if not word & (1 << 23):  # multiple structures
        shape = _NEON_MULTIPLE.get((word >> 8) & 0xF)
        if shape is None:
            return None
        nregs, interleave, spacing = shape
        ebytes = 1 << ((word >> 6) & 3)
        if ebytes == 8 and interleave > 1:
            return None
        align = (word >> 4) & 3
        hint = 4 << align if align else 0
        if d + nregs - 1 + spacing * (interleave - 1) > 31:
            return None
        elements: list[tuple[str, ...]] = [(f"d{d + reg + spacing * k}[{n}]",) for reg in range(nregs) for n in range(8 // ebytes)
                    for k in range(interleave)]
        return elements, ebytes, hint, rn, rm
    nregs = ((word >> 8) & 3) + 1
    if (word >> 10) & 3 == 3:  # single structure to all lanes (loads only)
        if not word & (1 << 21):
            return None
        size, t, a = (word >> 6) & 3, (word >> 5) & 1, (word >> 4) & 1
        if size == 3:
            if nregs != 4 or not a:
                return None
            ebytes, hint = 4, 16
        else:
            ebytes = 1 << size
            hint = {1: ebytes, 2: 2 * ebytes, 3: 0, 4: 8 if size == 2 else 4 * ebytes}[nregs] if a else 0
            if a and (nregs == 3 or (nregs == 1 and size == 0)):
                return None
        if nregs == 1:
            regs = [d + r for r in range(2 if t else 1)]
            out = [tuple(f"d{r}[]" for r in regs)]
        else:
            regs = [d + k * (2 if t else 1) for k in range(nregs)]
            out = [(f"d{r}[]",) for r in regs]
        return (out, ebytes, hint, rn, rm) if regs[-1] <= 31 else None
    size = (word >> 10) & 3  # single structure to one lane
    ia = (word >> 4) & 0xF
    ebytes = 1 << size
    index = ia >> (size + 1)
    inc = 2 if nregs > 1 and size and (ia >> size) & 1 else 1
    bad: int | bool
    if nregs == 1:
        bad = [ia & 1, ia & 2, ia & 4 or ia & 3 not in (0, 3)][size]
        hint = [0, ebytes if ia & 1 else 0, 4 if ia & 3 else 0][size]
    elif nregs == 2:
        bad = size == 2 and ia & 2
        hint = 2 * ebytes if ia & 1 else 0
    elif nregs == 3:
        bad = ia & (3 if size == 2 else 1)
        hint = 0
    else:
        bad = size == 2 and ia & 3 == 3
        hint = (4 << (ia & 3) if ia & 3 else 0) if size == 2 else (4 * ebytes if ia & 1 else 0)
    regs = [d + k * inc for k in range(nregs)]
    if bad or regs[-1] > 31:
        return None
    return [(f"d{r}[{index}]",) for r in regs], ebytes, hint, rn, rm


def _word(ci: capstone.CsInsn, thumb: bool) -> int:
    raw = bytes(ci.bytes)
    if thumb:
        return int.from_bytes(raw[:2], "little") << 16 | int.from_bytes(raw[2:4], "little")
    return int.from_bytes(raw[:4], "little")


def _structure(ci: capstone.CsInsn, name: str, mem: arm.ArmOp, data: list[str], after: list, base: str,
               thumb: bool = False) -> tuple[tuple[MemOperand, ...], bool]:
    """vld1..vld4 / vst1..vst4, from the encoding (neon_layout): one recipe per memory element
    in address order, at its own size (what a CPU checks without a hint when SCTLR.A is set, the
    natural policy), whose `data` names the lanes it fills or empties ("d0[1]", "d0[]"); the
    first carries the alignment checked at the base (the hint, else the element) and the `!`
    writeback (the transfer's size)."""
    kind = _R if name.startswith("vld") else _W
    layout = neon_layout(_word(ci, thumb))
    if layout is None or base == "pc":
        return (), False
    elements, ebytes, hint, _, rm = layout
    total = ebytes * len(elements)
    writeback = total if rm == 13 else 0
    return tuple(_mem(base, k * ebytes, ebytes, kind, lanes, flt=True, align=(hint or ebytes) if k == 0 else 0,
                      writeback=writeback if k == 0 else 0) for k, lanes in enumerate(elements)), True


def _register_writeback(ci: capstone.CsInsn, mem: arm.ArmOp, after: list, base: str) -> tuple[str, str, int] | None:
    """(base, rm, multiplier) when the base moves by a register after the access: `[rn], rm`
    (post-indexed, the shifted register after the operand) and `[rn, rm]!` (pre-indexed with
    writeback: to the address). Only lsl shifts (a multiplier)."""
    if after and after[0].type == arm.ARM_OP_REG:
        op = after[0]
        if op.shift.type not in (0, arm.ARM_SFT_LSL):
            return None
        rm = gdb_reg(ci.reg_name(op.reg))
        return base, rm, (1 << op.shift.value if op.shift.type == arm.ARM_SFT_LSL else 1) * (-1 if op.subtracted else 1)
    if mem.mem.index and ci.writeback and not after:
        if mem.shift.type not in (0, arm.ARM_SFT_LSL):
            return None
        scale = 1 << mem.shift.value if mem.shift.type == arm.ARM_SFT_LSL else 1
        return base, gdb_reg(ci.reg_name(mem.mem.index)), scale * (-1 if mem.subtracted else 1)
    return None


def _writeback_by(ci: capstone.CsInsn, name: str, thumb: bool) -> tuple[str, str, int] | None:
    """(base, rm, multiplier) when the instruction moves its base register by rm * multiplier
    after the access (`ldr r0, [r1], r2`, `ldrd r0, r1, [r2, r3]!`, `vld2.8 {d0, d1}, [r0], r2`),
    else None: the recipe's `writeback_by`, which the fix-up performs."""
    if name.startswith(("vld", "vst")) and name not in ("vldr", "vstr") and name not in _MULTIPLE:
        layout = neon_layout(_word(ci, thumb))
        if layout is None or layout[4] in (13, 15):
            return None
        return GPRS[layout[3]], GPRS[layout[4]], 1
    ops = list(ci.operands)
    mem_at = next((i for i, o in enumerate(ops) if o.type == arm.ARM_OP_MEM), None)
    if mem_at is None or name in _MULTIPLE:
        return None
    return _register_writeback(ci, ops[mem_at], ops[mem_at + 1:], gdb_reg(ci.reg_name(ops[mem_at].mem.base)))


def _read(regs: Mapping[str, int], name: str) -> int:
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


def _passes(cond: int, cpsr: int) -> bool:
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    base = cond >> 1
    result = [z == 1, c == 1, n == 1, v == 1, c == 1 and z == 0, n == v, n == v and z == 0, True][base]
    return result if cond & 1 == 0 or cond == 0xF else not result


def condition(insn: Insn, cpsr: int) -> int:
    """The condition an instruction runs under: its condition field in ARM state, the IT
    block's in Thumb (ITSTATE in the CPSR), 0xE (always) otherwise."""
    if insn.mode == "thumb":
        it = ((cpsr >> 8) & 0xFC) | ((cpsr >> 25) & 3)
        return it >> 4 if it & 0xF else 0xE
    word = int.from_bytes(insn.raw[:4], "little") if len(insn.raw) >= 4 else 0xE0000000
    cond = word >> 28
    return 0xE if cond == 0xF else cond


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    cpsr = regs.get("cpsr")
    if cpsr is not None and not _passes(condition(insn, cpsr), cpsr):
        return []
    return [Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]


def it_block(dec: InsnDecoder, it: Insn, code: bytes, regs: Mapping[str, int]) -> list[tuple[Insn, list[Access] | None]]:
    """The instructions of the Thumb-2 IT block that `it` (an `it*` instruction) starts, each
    with the accesses it makes when run with `regs` as they are at the IT instruction (its
    condition from the IT's firstcond and mask against the CPSR's flags). gdb moves a
    breakpoint inside an IT block to its IT instruction, so the step engine checks the block
    there. None for an instruction whose address registers or condition flags an earlier
    instruction of the block writes: not computable ahead, not checked. `code`: the bytes
    after the IT instruction (up to 16)."""
    if it.mode != "thumb" or not it.name.startswith("it") or len(it.raw) != 2:
        return []
    state = it.raw[0]  # firstcond:mask, the low byte of 0xBFxy
    cpsr = regs.get("cpsr")
    out: list[tuple[Insn, list[Access] | None]] = []
    dirty: set[str] = set()
    flags_dirty = False
    off, pc = 0, it.next_pc
    while state & 0xF and off < len(code):
        insn = dec.decode(code[off:off + 4], pc + off, "thumb")
        if insn is None:
            break
        cond = state >> 4
        found: list[Access] | None = None
        if insn.operands:
            needed = {r for op in insn.operands for r in (op.base, op.index) if r is not None}
            if not flags_dirty and not needed & dirty and cpsr is not None:
                found = [] if not _passes(cond, cpsr) else [
                    Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]
        else:
            found = []
        out.append((insn, found))
        ci = next(_thumb().disasm(insn.raw, insn.pc, 1), None)
        if ci is not None:
            _, written = ci.regs_access()
            for r in written:
                name = gdb_reg(ci.reg_name(r))
                flags_dirty |= name == "cpsr"
                dirty.add(name)
        state = 0 if state & 7 == 0 else (state & 0xE0) | ((state << 1) & 0x1F)
        off += insn.size
    return out


@cache
def _thumb() -> capstone.Cs:
    """capstone's Thumb-2 decoder, for the registers an IT block's instructions write."""
    cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_LITTLE_ENDIAN)
    cs.detail = True
    return cs


CPUS = tuple(Cpu(info, decoder=partial(ArmDecoder, info.name), accesses=accesses,
                 strict=Strict(partial(ArmDecoder, info.name), call=CALL)) for info in (ARMHF, ARMEL))
