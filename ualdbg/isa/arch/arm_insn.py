"""32-bit ARM and Thumb-2 loads and stores as `decode.Insn` recipes, from capstone 5
(CS_ARCH_ARM), for the step engine and for the fix-up of signal mode alike.

A multi-register transfer (ldrd/strd, ldm/stm, push/pop, vldm/vstm, vpush/vpop, vld1/vst1 of
whole registers) is one recipe per register, in address order, each checked at its own size by
the natural policy; the fix-up joins them back into one access (engines/fixup.memop_from_insn)
and signal mode compares the first address with what ARMv7 checks (`align`: a word for
ldrd/ldm/vldr, the hint for vldN `[rN:64]`). vld2..vld4 and lane forms are decoded (reported)
but not performed. capstone puts a vldN alignment hint (in bits) in the displacement: it is read
as the hint here. PC-relative literals are turned into absolute addresses when decoded. A
conditional instruction (its condition field, or the IT block's in Thumb) makes no access when
its condition fails: `accesses` evaluates it from the CPSR when it is given."""
from __future__ import annotations

from collections.abc import Mapping

import capstone
from capstone import arm

from ...core.model import Access, AccessKind
from ..decode import Insn, MemOperand, RegisterUnavailable

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
    def __init__(self, arch: str) -> None:
        self.arch = arch
        self._cs = {}
        for mode, flag in (("arm", capstone.CS_MODE_ARM), ("thumb", capstone.CS_MODE_THUMB)):
            cs = capstone.Cs(capstone.CS_ARCH_ARM, flag | capstone.CS_MODE_LITTLE_ENDIAN)
            cs.detail = True
            self._cs[mode] = cs

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        thumb = mode == "thumb"
        try:
            ci = next(self._cs["thumb" if thumb else "arm"].disasm(bytes(code[:4]), pc & MASK32, 1), None)
        except capstone.CsError:
            return None
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
    """The recipes of one capstone instruction, and whether they are exact."""
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
        return _structure(ci, name, mem, data, after, base)
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
    elif after:  # post-indexed by a register, [rn], rm: the address is rn's; not performed
        pass
    elif ci.writeback:  # pre-indexed with writeback: [rn, #imm]!
        writeback = disp if index is None else 0
    if base == "pc":  # a literal: the word-aligned PC of the instruction + 8 (ARM) or + 4 (Thumb)
        base, disp = None, ((ci.address + (4 if thumb else 8)) & ~3) + disp
    # Not performed: a load into the PC (a branch), a writeback by a register.
    performable = "pc" not in data and not (after and after[0].type != arm.ARM_OP_IMM) and \
        not (index is not None and ci.writeback)
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
    performable = "pc" not in lst and not (writeback and base in lst)
    flt = name.startswith("v")
    out = []
    for k, reg in enumerate(lst):
        out.append(_mem(base, start + k * size, size, kind, (reg,) if performable else (), flt=flt, align=4,
                        writeback=sign * total if writeback and k == 0 else 0))
    return tuple(out), True


def _structure(ci: capstone.CsInsn, name: str, mem: arm.ArmOp, data: list[str], after: list, base: str,
               ) -> tuple[tuple[MemOperand, ...], bool]:
    """vld1..vld4 / vst1..vst4: the element size from the mnemonic (`vld1.32`), the alignment
    hint (bits, capstone's displacement), writeback by `!` (the total) or by a register."""
    kind = _R if name.startswith("vld") else _W
    suffix = ci.mnemonic.split(".")
    elem = int(suffix[1]) // 8 if len(suffix) > 1 and suffix[1].isdigit() else 1
    hint = mem.mem.disp // 8
    whole = "[" not in ci.op_str.split("}")[0]  # no lane or all-lanes index: whole registers
    if name in ("vld1", "vst1") and whole:
        # Whole registers, consecutive: the same bytes as vldm/vstm of them (little-endian).
        writeback = 8 * len(data) if ci.writeback and not after else 0
        performable = not after
        return tuple(_mem(base, 8 * k, 8, kind, (reg,) if performable else (), flt=True, align=hint or 1,
                          writeback=writeback if k == 0 else 0) for k, reg in enumerate(data)), True
    # Interleaved structures and lanes: checked at the element size (and the hint) at the
    # base; reported but not performed.
    return (_mem(base, 0, elem, kind, align=hint or elem),), False


def decoder(arch: str) -> ArmDecoder:
    return ArmDecoder(arch)


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


def it_block(dec: ArmDecoder, it: Insn, code: bytes, regs: Mapping[str, int]) -> list[tuple[Insn, list[Access] | None]]:
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
        ci = next(dec._cs["thumb"].disasm(insn.raw, insn.pc, 1), None)
        if ci is not None:
            _, written = ci.regs_access()
            for r in written:
                name = gdb_reg(ci.reg_name(r))
                flags_dirty |= name == "cpsr"
                dirty.add(name)
        state = 0 if state & 7 == 0 else (state & 0xE0) | ((state << 1) & 0x1F)
        off += insn.size
    return out

