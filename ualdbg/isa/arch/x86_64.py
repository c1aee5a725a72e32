"""x86-64: unaligned data accesses trap only with EFLAGS.AC set (#AC -> SIGBUS, BUS_ADRALN,
si_addr NULL: the VA comes from decoding); prctl(PR_SET_UNALIGN) returns EINVAL (PLATFORM.md).

Its decoder is capstone's, with the x86-64 semantics capstone leaves out (implicit stack and
string operands, store flags it gets wrong, #GP-checked and masked moves): the memory operands
of one instruction as recipes of the one instruction model (isa/insn.py), and their evaluation
against live registers into `Access` records."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import field, replace

import capstone
from capstone import x86

from ...core.model import Access, AccessKind
from ...lazyclass import dataclass
from ..cpu import Cpu, TrapFlags
from ..insn import Insn, MemOperand, RegisterUnavailable, Vsib
from .info import MECH_AC, ArchInfo

SYSCALL_NAMES = {56: "clone", 57: "fork", 58: "vfork", 435: "clone3", 14: "rt_sigprocmask"}

X86_64 = ArchInfo(
    name="x86_64",
    pc="rip",
    sp="rsp",
    gdb_names=("i386:x86-64", "x86-64", "x86_64", "amd64"),
    e_machine=62,
    gprs=("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"),
    insn_size=None,
    mechanism=MECH_AC,
    native_sigbus=7,
    si_addr="null",
    qemu="qemu-x86_64",
    triplet="x86_64-linux-gnu",
)

TRAP_FLAGS = TrapFlags(
    register="eflags",
    ac_bit=0x40000,  # EFLAGS.AC: alignment check (PLATFORM.md)
    tf_bit=0x100,  # EFLAGS.TF: one single-step trap after the next instruction
    syscall_nr="orig_rax",
    syscall_ret="rax",
    task_creating_syscalls=frozenset({56, 57, 58, 435}),  # clone, fork, vfork, clone3
    sigprocmask_syscall=14,
)

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1

# --------------------------------------------------------------------------------------------
# Registers: every general-purpose name capstone may print, mapped to (64-bit name, shift, bits).


def _gpr_table() -> dict[str, tuple[str, int, int]]:
    table: dict[str, tuple[str, int, int]] = {}
    for letter in "abcd":
        full = f"r{letter}x"
        table.update({full: (full, 0, 64), f"e{letter}x": (full, 0, 32), f"{letter}x": (full, 0, 16),
                      f"{letter}l": (full, 0, 8), f"{letter}h": (full, 8, 8)})
    for stem in ("si", "di", "bp", "sp"):
        full = f"r{stem}"
        table.update({full: (full, 0, 64), f"e{stem}": (full, 0, 32), stem: (full, 0, 16),
                      f"{stem}l": (full, 0, 8)})
    for n in range(8, 16):
        full = f"r{n}"
        table.update({full: (full, 0, 64), f"r{n}d": (full, 0, 32), f"r{n}w": (full, 0, 16),
                      f"r{n}b": (full, 0, 8)})
    return table


GPR_SLICES = _gpr_table()
RIP_NAMES = frozenset({"rip", "eip"})  # RIP-relative: the base is the address of the NEXT instruction
_ZERO_INDEX = frozenset({"riz", "eiz"})  # capstone's "SIB without index" pseudo-registers
_VECTOR_WIDTH = {"xmm": 16, "ymm": 32, "zmm": 64}
_SEGMENT_BASE = {"fs": "fs_base", "gs": "gs_base"}  # other segments have base 0 in 64-bit mode
_SEGMENT_PREFIX = {0x64: "fs", 0x65: "gs"}


def register_slice(name: str) -> tuple[str, int, int]:
    """(64-bit register, bit shift, width) of a general register name ("ah" -> ("rax", 8, 8)),
    for evaluators outside Python (the native stepper); KeyError for other names."""
    return GPR_SLICES[name]


def _read_gpr(regs: Mapping[str, int], name: str) -> int:
    full, shift, bits = GPR_SLICES[name]
    try:
        value = regs[full]
    except KeyError:
        raise RegisterUnavailable(f"register {full!r} is needed to evaluate [{name}]") from None
    return (value >> shift) & ((1 << bits) - 1)


def _vector_width(name: str) -> int:
    return _VECTOR_WIDTH.get(name[:3], 0) if name[3:].isdigit() else 0


def _read_vector(regs: Mapping[str, int], name: str) -> int | None:
    """An xmm/ymm/zmm register as an int, or one of its wider aliases (low bits are the same)."""
    width = _vector_width(name)
    for prefix, w in _VECTOR_WIDTH.items():
        # a debugger may hand a vector register over as something other than an int: skip it
        if w >= width and isinstance(value := regs.get(prefix + name[3:]), int):
            return value & ((1 << (8 * width)) - 1)
    return None


def _sext(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# Recipes: the one instruction model (`Insn`, `MemOperand`) lives in insn.py.


# --------------------------------------------------------------------------------------------
# Instruction classes (capstone canonical names). Capstone's per-operand access flags are wrong
# for many stores (fst/fstp/fist/fistp/fnstcw, movnti/movntdq/movq/movhps stores, stmxcsr,
# vmaskmov stores, vextract*, pextr*, scatters, compress, cmpxchg, rol [m],cl ...), so the kind
# of an explicit operand comes from these tables first and from capstone only as a last resort.

# Memory operand is only an address or a hint: no data access.
_NO_ACCESS = frozenset({
    "lea", "nop", "clflush", "clflushopt", "clwb", "cldemote", "bndmk", "bndcl", "bndcu", "bndcn",
    "invlpg", "invlpga",
})
_NO_ACCESS_PREFIXES = ("prefetch", "vgatherpf", "vscatterpf")

# Destination operand 0 that is only read.
_READ_OP0 = frozenset({
    "cmp", "test", "bt", "push", "call", "jmp", "lcall", "ljmp", "mul", "imul", "div", "idiv",
    "ptwrite", "lgdt", "lidt", "lldt", "ltr", "lmsw", "verr", "verw", "fxrstor", "fxrstor64",
    "ldmxcsr", "vldmxcsr",
})
_READ_OP0_PREFIXES = ("xrstor",)

# Destination operand 0 that is only written.
_WRITE_OP0 = frozenset({
    "pop", "extractps", "vextractps", "vcvtps2ph", "stmxcsr", "vstmxcsr", "fxsave", "fxsave64",
    "sgdt", "sidt", "sldt", "str", "smsw", "bndstx", "wrssd", "wrssq", "wrussd", "wrussq",
})
_WRITE_OP0_PREFIXES = (
    "set", "mov", "vmov", "kmov", "pextr", "vpextr", "vextract", "vpmov", "vcompress",
    "vpcompress", "vscatter", "vpscatter", "vmaskmov", "vpmaskmov", "xsave",
)

_X87_STORES = frozenset({
    "fst", "fstp", "fist", "fistp", "fisttp", "fbstp", "fnstcw", "fstcw", "fnstsw", "fstsw",
    "fnstenv", "fstenv", "fnsave", "fsave",
})

# Legacy-SSE instructions whose 16-byte memory operand need not be aligned; every other
# non-VEX instruction with an xmm register and an m128 operand raises #GP when it is not.
_SSE_UNALIGNED_OK = frozenset({
    "movups", "movupd", "movdqu", "lddqu", "pcmpestri", "pcmpestrm", "pcmpistri", "pcmpistrm",
})
_VEX_ALIGNED = frozenset({
    "vmovaps", "vmovapd", "vmovdqa", "vmovdqa32", "vmovdqa64", "vmovntps", "vmovntpd", "vmovntdq",
    "vmovntdqa",
})

_MASKED_MOVES = ("vmaskmov", "vpmaskmov")


def _string_table() -> dict[str, dict[str, AccessKind]]:
    """String instructions: what each does to [rsi] and [rdi] in one iteration."""
    r, w = AccessKind.READ, AccessKind.WRITE
    stems: dict[str, dict[str, AccessKind]] = {
        "movs": {"rsi": r, "rdi": w}, "cmps": {"rsi": r, "rdi": r}, "lods": {"rsi": r},
        "outs": {"rsi": r}, "stos": {"rdi": w}, "scas": {"rdi": r}, "ins": {"rdi": w},
    }
    return {stem + suffix: kinds for stem, kinds in stems.items() for suffix in "bwdq"}


_STRING_KIND = _string_table()

_GATHER_NAME = re.compile(r"^vp?(gather|scatter)([dq])(ps|pd|d|q)$")
_ELEM_SIZE = {"d": 4, "ps": 4, "q": 8, "pd": 8}


def _starts(name: str, prefixes: Iterable[str]) -> bool:
    return any(name.startswith(p) for p in prefixes)


def _explicit_kind(name: str, position: int, cs_access: int) -> AccessKind:
    """Read/write of an explicit (ModRM) memory operand; `position` is its operand index."""
    if name in ("xchg", "cmpxchg", "cmpxchg8b", "cmpxchg16b", "xadd"):
        return AccessKind.READ_WRITE  # cmpxchg writes even on failure (locked cycle)
    if position > 0:
        return AccessKind.READ  # Intel syntax: only operand 0 can be a destination
    if name in _READ_OP0 or _starts(name, _READ_OP0_PREFIXES):
        return AccessKind.READ
    if name in _WRITE_OP0 or _starts(name, _WRITE_OP0_PREFIXES):
        return AccessKind.WRITE
    if name.startswith("f"):  # x87 (fxsave/fxrstor were settled above)
        return AccessKind.WRITE if name in _X87_STORES else AccessKind.READ
    if cs_access == capstone.CS_AC_WRITE:
        return AccessKind.WRITE
    # Capstone marks some read-modify-writes as read-only (rol [m], cl): a memory destination
    # nobody listed above is read and written.
    return AccessKind.READ_WRITE


# --------------------------------------------------------------------------------------------
# The decoder


class X86Decoder:
    """capstone's x86-64 decoder with the semantics it leaves out (an InsnDecoder, isa/cpu.py)."""

    arch = "x86_64"
    max_insn_len = 15

    def __init__(self) -> None:
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self._cs.detail = True

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        """The instruction at the start of `code` (read at `pc`), or None if undecodable."""
        try:
            ci = next(self._cs.disasm(bytes(code[: self.max_insn_len]), pc & MASK64, 1), None)
            return None if ci is None else _build(ci)
        except capstone.CsError:
            return None


def _stack_size(ci: capstone.CsInsn) -> int:
    """Operand size of push/pop/pushf/popf/leave/enter: 64 bits, or 16 with 0x66 without REX.W."""
    return 2 if ci.prefix[2] == 0x66 and not ci.rex & 0x8 else 8


def _prefix_segment(ci: capstone.CsInsn) -> str | None:
    return _SEGMENT_PREFIX.get(ci.prefix[1])


def _stack(kind: AccessKind, size: int, adjust: int = 0, base: str = "rsp", disp: int = 0) -> MemOperand:
    return MemOperand(base=base, index=None, scale=1, disp=disp, segment=None, size=size,
                      kind=kind, implicit=True, addr_size=8, rsp_adjust=adjust)


class _Unmodelled(Exception):
    """An operand this decoder cannot turn into a recipe; the instruction becomes inexact."""


def _mem_recipe(ci: capstone.CsInsn, op: x86.X86Op, kind: AccessKind, size: int,
                implicit: bool = False) -> MemOperand:
    mem = op.mem
    base = ci.reg_name(mem.base) if mem.base else None
    index = ci.reg_name(mem.index) if mem.index else None
    segment = ci.reg_name(mem.segment) if mem.segment else None
    if index in _ZERO_INDEX:
        index = None
    if base is not None and base not in GPR_SLICES and base not in RIP_NAMES:
        raise _Unmodelled(base)
    if index is not None and index not in GPR_SLICES and not _vector_width(index):
        raise _Unmodelled(index)
    return MemOperand(base=base, index=index, scale=mem.scale, disp=mem.disp,
                      segment=segment if segment in _SEGMENT_BASE else None, size=size, kind=kind,
                      implicit=implicit, addr_size=ci.addr_size)


def _flow(ci: capstone.CsInsn, name: str) -> tuple[str, int | None]:
    target: int | None = None
    ops = ci.operands
    if ops and ops[0].type == x86.X86_OP_IMM and ci.group(capstone.CS_GRP_BRANCH_RELATIVE):
        target = ops[0].imm & MASK64
    if ci.group(capstone.CS_GRP_CALL):
        return "call", target
    if ci.group(capstone.CS_GRP_RET) or ci.group(capstone.CS_GRP_IRET):
        return "ret", None
    if name in ("jmp", "ljmp"):
        return "jump", target
    if ci.group(capstone.CS_GRP_JUMP) or name in ("loop", "loope", "loopne"):
        return "cond", target  # jcc, jrcxz, loop*, xbegin
    if ci.group(capstone.CS_GRP_INT) or name in (
            "ud0", "ud1", "ud2", "hlt", "syscall", "sysenter", "sysexit", "sysret", "xabort"):
        return "other", None
    return "next", None


@dataclass
class _Draft:
    """What `_build` learns about one instruction before freezing it into an `Insn`."""

    ci: capstone.CsInsn
    name: str
    ops: list[x86.X86Op]
    regs: list[str]  # names of the explicit register operands
    operands: list[MemOperand] = field(default_factory=list)
    rep: bool = False
    exact: bool = True
    vsib: bool = False
    masked: bool = False
    gp_align: int = 0

    @property
    def mem_ops(self) -> list[tuple[int, x86.X86Op]]:
        return [(i, o) for i, o in enumerate(self.ops) if o.type == x86.X86_OP_MEM]

    def freeze(self) -> Insn:
        ci = self.ci
        flow, target = _flow(ci, self.name)
        return Insn(pc=ci.address, size=ci.size, mnemonic=ci.mnemonic, op_str=ci.op_str,
                    rep=self.rep, operands=tuple(self.operands), flow=flow, name=self.name,
                    target=target, exact=self.exact, vsib=self.vsib, masked=self.masked,
                    gp_align=self.gp_align, raw=bytes(ci.bytes))


def _build(ci: capstone.CsInsn) -> Insn:
    ops = list(ci.operands)
    d = _Draft(ci=ci, name=ci.insn_name(), ops=ops,
               regs=[ci.reg_name(o.reg) for o in ops if o.type == x86.X86_OP_REG])
    # capstone shares the ids movsd/cmpsd with SSE: the string forms have no xmm operand
    if d.name in _STRING_KIND and not any(r.startswith("xmm") for r in d.regs):
        _string_operands(d)
    elif d.name in _NO_ACCESS or _starts(d.name, _NO_ACCESS_PREFIXES):
        pass
    elif d.name == "xlatb" or d.name in ("maskmovdqu", "vmaskmovdqu", "maskmovq"):
        _rbx_rdi_operand(d)
    else:
        far = _is_far(d)
        _explicit_operands(d, far)
        _alignment_demands(d)
        _stack_operands(d, far)
    return d.freeze()


def _string_operands(d: _Draft) -> None:
    """One iteration of a string instruction, reads first. capstone's element sizes are right
    here, its access flags are not (ins/outs get none)."""
    kinds = _STRING_KIND[d.name]
    d.rep = d.ci.prefix[0] in (0xF2, 0xF3)
    recipes = []
    for _, op in d.mem_ops:
        full = GPR_SLICES.get(d.ci.reg_name(op.mem.base) if op.mem.base else "", ("",))[0]
        if full not in kinds:
            d.exact = False
            continue
        recipes.append(_mem_recipe(d.ci, op, kinds[full], op.size, implicit=True))
    d.operands.extend(sorted(recipes, key=lambda r: r.kind is not AccessKind.READ))


def _rbx_rdi_operand(d: _Draft) -> None:
    """Operands capstone does not report: xlat reads [rbx + zero-extended al]; maskmov* stores
    the selected bytes of a vector to [rdi]."""
    ci, short = d.ci, d.ci.addr_size == 4
    if d.name == "xlatb":
        d.operands.append(MemOperand(
            base="ebx" if short else "rbx", index="al", scale=1, disp=0,
            segment=_prefix_segment(ci), size=1, kind=AccessKind.READ, implicit=True,
            addr_size=ci.addr_size))
    else:
        d.masked = True
        d.operands.append(MemOperand(
            base="edi" if short else "rdi", index=None, scale=1, disp=0,
            segment=_prefix_segment(ci), size=8 if d.name == "maskmovq" else 16,
            kind=AccessKind.WRITE, implicit=True, addr_size=ci.addr_size))


def _is_far(d: _Draft) -> bool:
    """Far call/jmp through memory. capstone names `ff /3` "call" with an 8-byte operand."""
    if d.name in ("lcall", "ljmp"):
        return True
    return d.ci.opcode[0] == 0xFF and bool(d.mem_ops) and (d.ci.modrm >> 3) & 7 in (3, 5)


def _explicit_operands(d: _Draft, far: bool) -> None:
    ci, name = d.ci, d.name
    for position, op in d.mem_ops:
        index = ci.reg_name(op.mem.index) if op.mem.index else None
        try:
            if index is not None and _vector_width(index):
                d.operands.append(_vsib_recipe(ci, name, op, d.ops))
                d.vsib = True
                continue
            size = op.size
            if far:
                size, d.exact = (10 if ci.rex & 0x8 else 6), False  # m16:64 or m16:32
            elif name in ("fxsave", "fxsave64", "fxrstor", "fxrstor64"):
                size = 512  # capstone says 8
            elif name.startswith(("xsave", "xrstor")):
                # the area's size depends on XCR0 and the requested-feature bitmap: the legacy
                # region plus the header is the least it touches
                size, d.exact = 576, False
            elif name in ("fnsave", "fsave", "frstor"):
                size = 94 if ci.prefix[2] == 0x66 else 108  # capstone says 4
            elif name in ("fnstenv", "fstenv", "fldenv"):
                size = 14 if ci.prefix[2] == 0x66 else 28  # capstone ignores the 16-bit form
            if size <= 0:
                raise _Unmodelled(f"{name}: operand size {size}")
            recipe = _mem_recipe(ci, op, _explicit_kind(name, position, op.access), size)
            if name in ("bt", "bts", "btr", "btc") and d.ops[-1].type == x86.X86_OP_REG:
                # a register bit offset reaches outside the operand: EA + size*(off >> log2(bits))
                recipe = replace(recipe, bit_offset=ci.reg_name(d.ops[-1].reg))
            if name == "pop" and recipe.base in ("rsp", "esp"):
                recipe = replace(recipe, rsp_adjust=_stack_size(ci))
            d.operands.append(recipe)
        except _Unmodelled:
            d.exact = False
    if name == "movdir64b" and d.ops and d.ops[0].type == x86.X86_OP_REG:
        dest = ci.reg_name(d.ops[0].reg)  # 64-byte store to es:[dest]; operand 1 is the source
        if dest in GPR_SLICES:
            d.operands.append(MemOperand(
                base=dest, index=None, scale=1, disp=0, segment=None, size=64,
                kind=AccessKind.WRITE, implicit=False, addr_size=ci.addr_size))


def _alignment_demands(d: _Draft) -> None:
    """Instructions that check alignment themselves, with #GP (SIGSEGV) rather than #AC, and
    masked moves, which never check."""
    name = d.name
    for _, op in d.mem_ops:
        if name in ("movaps", "movapd", "movdqa", "movntps", "movntpd", "movntdq", "movntdqa",
                    "cmpxchg16b", "fxsave", "fxsave64", "fxrstor", "fxrstor64"):
            d.gp_align = 16
        elif name.startswith(("xsave", "xrstor")) or name == "movdir64b":
            d.gp_align = 64
        elif name in _VEX_ALIGNED:
            d.gp_align = op.size
        elif (op.size == 16 and not name.startswith("v") and name not in _SSE_UNALIGNED_OK
              and any(r.startswith("xmm") for r in d.regs)):
            d.gp_align = 16  # a legacy-SSE m128 operand (Intel SDM "exceptions type 4")
    opmask = any(r in d.regs for r in ("k1", "k2", "k3", "k4", "k5", "k6", "k7"))
    if not d.vsib and (name.startswith(_MASKED_MOVES) or (opmask and d.mem_ops)):
        d.masked = True


def _stack_operands(d: _Draft, far: bool) -> None:
    """Implicit stack operands, which capstone does not report, in execution order."""
    name, slot = d.name, _stack_size(d.ci)
    if name in ("push", "pushf", "pushfq"):
        d.operands.append(_stack(AccessKind.WRITE, slot, -slot))
    elif name == "pop":
        d.operands.insert(0, _stack(AccessKind.READ, slot))
    elif name in ("popf", "popfq"):
        d.operands.append(_stack(AccessKind.READ, slot))
    elif name == "call" and not far:
        d.operands.append(_stack(AccessKind.WRITE, 8, -8))
    elif name == "ret":
        d.operands.append(_stack(AccessKind.READ, 8))
    elif name == "leave":  # mov rsp, rbp; pop rbp
        d.operands.append(_stack(AccessKind.READ, slot, base="rbp"))
    elif name == "enter":
        d.operands.extend(_enter(d.ci, slot))
    elif name == "iretq":  # pops rip, cs, rflags, rsp, ss
        d.operands.extend(_stack(AccessKind.READ, 8, disp=8 * k) for k in range(5))
    elif name in ("retf", "retfq") or far:
        d.exact = False  # far returns/calls: segment slots of mode-dependent size
    elif _moves_stack(d.ci, d.regs):
        d.exact = False  # it moves rsp, so it touches the stack in a way not modelled here


def _enter(ci: capstone.CsInsn, slot: int) -> list[MemOperand]:
    """enter n, L: push rbp; copy L-1 frame pointers from the old frame; push the new frame."""
    level = ci.operands[1].imm & 31 if len(ci.operands) > 1 else 0
    out = [_stack(AccessKind.WRITE, slot, -slot)]
    for i in range(1, level):
        out.append(_stack(AccessKind.READ, slot, base="rbp", disp=-slot * i))
        out.append(_stack(AccessKind.WRITE, slot, -slot * (i + 1)))
    if level > 0:
        out.append(_stack(AccessKind.WRITE, slot, -slot * (level + 1)))
    return out


def _moves_stack(ci: capstone.CsInsn, explicit_regs: list[str]) -> bool:
    try:
        _, written = ci.regs_access()
    except capstone.CsError:
        return False
    names = {ci.reg_name(r) for r in written}
    return bool(names & {"rsp", "esp", "sp"}) and not set(explicit_regs) & {"rsp", "esp", "sp"}


def _vsib_recipe(ci: capstone.CsInsn, name: str, op: x86.X86Op, ops: list[x86.X86Op]) -> MemOperand:
    match = _GATHER_NAME.match(name)
    if match is None:
        raise _Unmodelled(name)
    scatter = match.group(1) == "scatter"
    index_size = 4 if match.group(2) == "d" else 8
    elem = _ELEM_SIZE[match.group(3)]
    vec_regs = [o for o in ops if o.type == x86.X86_OP_REG and _vector_width(ci.reg_name(o.reg))]
    kregs = [ci.reg_name(o.reg) for o in ops
             if o.type == x86.X86_OP_REG and re.fullmatch(r"k[1-7]", ci.reg_name(o.reg))]
    if not vec_regs:
        raise _Unmodelled(name)
    data = vec_regs[-1] if scatter else vec_regs[0]  # the scattered source / gathered dest
    index = ci.reg_name(op.mem.index)
    lanes = min(_vector_width(index) // index_size, data.size // elem)
    if kregs:
        mask, mask_elem = kregs[0], 0
    elif not scatter and len(vec_regs) >= 2:
        mask, mask_elem = ci.reg_name(vec_regs[-1].reg), elem  # VEX: the third operand
    else:
        mask, mask_elem = None, 0
    recipe = _mem_recipe(ci, op, AccessKind.WRITE if scatter else AccessKind.READ, elem)
    return replace(recipe, vsib=Vsib(index_size=index_size, lanes=lanes, mask=mask,
                                      mask_elem=mask_elem))


# --------------------------------------------------------------------------------------------
# Evaluation


def _address(insn: Insn, op: MemOperand, regs: Mapping[str, int], index_value: int) -> int:
    ea = op.disp
    if op.base is not None:
        if op.base in RIP_NAMES:
            ea += insn.next_pc
        else:
            ea += _read_gpr(regs, op.base)
            if op.rsp_adjust and GPR_SLICES[op.base][0] == "rsp":
                ea += op.rsp_adjust
    ea += index_value * op.scale
    if op.bit_offset is not None:
        bits = GPR_SLICES[op.bit_offset][2]
        offset = _sext(_read_gpr(regs, op.bit_offset), bits)
        shift = (op.size * 8).bit_length() - 1  # log2 of the operand's width in bits
        ea += op.size * (offset >> shift)
    ea &= MASK32 if op.addr_size == 4 else MASK64
    if op.segment is not None:
        key = _SEGMENT_BASE[op.segment]
        if key not in regs:
            raise RegisterUnavailable(f"{key!r} is needed to evaluate a {op.segment}: operand")
        ea += regs[key]
    return ea & MASK64


def effective_address(insn: Insn, op: MemOperand, regs: Mapping[str, int]) -> int:
    """The address `op` touches with these registers (for a VSIB operand: lane 0's)."""
    if op.vsib is not None:
        vector = _read_vector(regs, op.index or "")
        if vector is None:
            raise RegisterUnavailable(f"{op.index!r} is needed to evaluate a gather/scatter")
        return _address(insn, op, regs, _sext(vector, op.vsib.index_size * 8))
    index = _read_gpr(regs, op.index) if op.index is not None else 0
    return _address(insn, op, regs, index)


def _vsib_accesses(insn: Insn, op: MemOperand, regs: Mapping[str, int]) -> list[Access]:
    assert op.vsib is not None and op.index is not None
    vector = _read_vector(regs, op.index)
    if vector is None:
        return []  # the index vector is not available: the lanes' addresses are unknown
    mask: int | None = None
    if op.vsib.mask is not None:
        found = regs.get(op.vsib.mask) if op.vsib.mask_elem == 0 else _read_vector(regs, op.vsib.mask)
        mask = found if isinstance(found, int) else None  # unknown mask: count every lane
    bits = op.vsib.index_size * 8
    out = []
    for lane in range(op.vsib.lanes):
        if mask is not None:
            bit = lane if op.vsib.mask_elem == 0 else (lane + 1) * op.vsib.mask_elem * 8 - 1
            if not mask >> bit & 1:
                continue
        index = _sext(vector >> (lane * bits), bits)
        out.append(Access(va=_address(insn, op, regs, index), size=op.size, kind=op.kind))
    return out


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    """The memory accesses `insn` makes when it executes with these registers.

    `regs` holds 64-bit register names in lower case (rax..r15, rsp, rbp, fs_base, gs_base; rip
    is not needed: RIP-relative operands use insn.next_pc). For a rep string instruction this is
    the next iteration, and nothing when the count register is 0. A gather/scatter yields one
    access per enabled lane when `regs` also holds its index vector (xmmN/ymmN/zmmN as an int;
    every lane when the mask register is absent), and nothing without the index vector.
    Raises RegisterUnavailable (a KeyError) when a general register or fs/gs base is missing.
    """
    if insn.rep and insn.operands:
        count = regs.get("rcx")
        if count is not None and not count & (MASK32 if insn.operands[0].addr_size == 4 else MASK64):
            return []
    out: list[Access] = []
    for op in insn.operands:
        if op.vsib is not None:
            out.extend(_vsib_accesses(insn, op, regs))
        else:
            out.append(Access(va=effective_address(insn, op, regs), size=op.size, kind=op.kind,
                              implicit=op.implicit))
    return out


CPUS = (Cpu(X86_64, decoder=X86Decoder, accesses=accesses, trap_flags=TRAP_FLAGS),)
