"""Signal mode on CPUs that cannot be told to tolerate a misaligned access (SPARC traps in
hardware; Alpha, PA-RISC and SH trap once prctl asks for SIGBUS): decode the faulting load or
store, record it, then perform the access as an operating system's fix-up handler would — read
or write the bytes through the debugger in the target's byte order, set the destination
register(s), advance the PC (and SPARC's nPC) — and resume with the signal suppressed.

The address comes from the decoded instruction and the registers, never from si_addr (qemu
7.2's gdb stub has no `$_siginfo`; qemu 9+'s does, with the target's own signal numbers). All threads are stopped while the engine
runs (all-stop), so emulating swap/cas here is as atomic for the program as the instruction."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import capstone
from capstone import arm64

from ..core.model import Access, AccessKind
from ..core.target import FloatBits, FloatMover, InferiorCalls, MemoryWriter, RegisterBatch, SigInfo, SymbolLookup, Target, offers
from ..isa import arch as archmod
from ..isa.arch import alpha, arm, arm_insn, hppa, mips, sh4, sparc64
from ..isa.decode import Decoder, Insn
from .recorder import Decision

if TYPE_CHECKING:
    from .recorder import FaultRecorder

MASK64 = (1 << 64) - 1


class NotEmulated(Exception):
    """The instruction traps but ualdbg cannot perform it (float registers, an unusual ASI)."""


@dataclass(frozen=True)
class MemOp:
    """One decoded load/store, whatever the instruction set."""

    text: str  # disassembly, for reports
    size: int  # bytes accessed
    kind: str  # "load" | "store" | "swap" | "cas"
    signed: bool
    regs: tuple[str, ...]  # data registers in address order (ldd/std, ldxp/stxp: a pair)
    float_regs: bool
    addr_regs: tuple[str, ...]  # summed with disp to form the address
    disp: int
    endian: str  # "big" | "little"; "asi": decided by SPARC's %asi register at run time
    cas_compare: str | None = None  # cas: the register compared with memory
    status: str | None = None  # arm64 stxr: the register that gets 0 (the store succeeded)
    exclusive: bool = False  # arm64 ldxr/stxr: a load/store-exclusive pair
    float_reg: str | None = None  # the one floating-point register as gdb names it (d8, f32)
    # A float access gdb holds as several 4-byte registers, in address order (PA-RISC's
    # double frN: halves frN and frNR), each moved as one C float.
    float_parts: tuple[str, ...] = ()
    # A base register the instruction moves by this many bytes (SH's @Rm+ and @-Rn), unless the
    # instruction also loads into it (the loaded value wins).
    update: tuple[str, int] | None = None
    # A base register that moves by another register times a multiplier after the access
    # (ARM's `[rn], rm` and `[rn, rm]!`): (base, rm, multiplier).
    update_reg: tuple[str, str, int] | None = None
    # ARM VLDn/VSTn: per memory element (`size // len(lanes)` bytes each, in address order) the
    # d-register lanes it fills or empties: "d3[1]" lane 1 of d3, "d3[]" every lane of d3.
    lanes: tuple[tuple[str, ...], ...] = ()
    addr_sub: tuple[str, ...] = ()  # subtracted from the address (ARM's [rn, -rm])
    align: int = 0  # the alignment the CPU checks, when not `size` (ARMv7 ldrd/ldm/vldr: a word)
    length: int = 0  # the instruction's bytes, when the architecture's are not fixed (Thumb)

    @property
    def access(self) -> AccessKind:
        return {"load": AccessKind.READ, "store": AccessKind.WRITE}.get(self.kind, AccessKind.READ_WRITE)

    def as_insn(self, pc: int, raw: bytes) -> Insn:
        mnemonic, _, ops = self.text.partition(" ")
        return Insn(pc=pc, size=self.length or len(raw), mnemonic=mnemonic, op_str=ops, rep=False, operands=(),
                    flow="next", name=mnemonic, raw=raw)


def _sparc(word: int) -> MemOp | None:
    m = sparc64.decode(word)
    if m is None:
        return None
    f = m.fmt
    if f.alternate:
        if m.asi is None:
            endian = "asi"
        elif m.asi in sparc64.ASI_BIG:
            endian = "big"
        elif m.asi in sparc64.ASI_LITTLE:
            endian = "little"
        else:
            endian = "unknown"
    else:
        endian = "big"
    addr = (sparc64.GPRS[m.rs1],) + ((sparc64.GPRS[m.rs2],) if m.rs2 is not None else ())
    kind = {sparc64.LOAD: "load", sparc64.STORE: "store", sparc64.SWAP: "swap", sparc64.CAS: "cas"}[f.kind]
    if f.kind == sparc64.CAS:
        # casa [rs1] asi, rs2, rd: the address is rs1 alone; rs2 is compared with memory
        addr = (sparc64.GPRS[m.rs1],)
        return MemOp(m.text, f.size, kind, False, (sparc64.GPRS[m.rd],), False, addr, 0, endian,
                     cas_compare=sparc64.GPRS[m.rs2 or 0])
    names = m.reg_names()
    float_reg = None
    if f.reg_file == "float":
        float_reg = names[0]
    elif f.reg_file == "double":  # f0..f30 pairs are gdb's d0..d30; f32..f62 are doubles already
        float_reg = names[0] if len(names) == 1 else "d" + names[0][1:]
    return MemOp(m.text, f.size, kind, f.signed, tuple(names), f.reg_file != "int", addr,
                 m.simm13, endian, float_reg=float_reg)


def _alpha(word: int) -> MemOp | None:
    m = alpha.decode(word)
    if m is None:
        return None
    reg = f"f{m.ra}" if m.float_reg else alpha.GPRS[m.ra]
    return MemOp(m.text, m.size, m.kind, m.signed, (reg,), m.float_reg, (alpha.GPRS[m.rb],), m.disp, "little",
                 float_reg=reg if m.float_reg else None)


def _hppa(word: int) -> MemOp | None:
    m = hppa.decode(word)
    if m is None:
        return None
    # base + index * size for the scaled indexed form: the index summed `size` times
    addr = (hppa.GPRS[m.base],) + ((hppa.GPRS[m.index],) * (m.size if m.scaled else 1) if m.index is not None else ())
    regs = m.reg_names
    return MemOp(m.text, m.size, m.kind, False, regs, m.float_reg, addr, m.disp, "big",
                 float_reg=regs[0] if m.float_reg and len(regs) == 1 else None,
                 float_parts=regs if m.float_reg and len(regs) > 1 else ())


def _sh4(word: int) -> MemOp | None:
    m = sh4.decode(word)
    if m is None:
        return None
    addr = (m.base,) + ((m.index,) if m.index else ())
    return MemOp(m.text, m.size, m.kind, m.signed, (m.reg,), m.float_reg, addr, m.disp, "little",
                 float_reg=m.reg if m.float_reg else None, update=(m.base, m.update) if m.update else None)


_A64: Any = None
_A64_EXCLUSIVE = ("ldxr", "ldaxr", "stxr", "stlxr", "ldxp", "ldaxp", "stxp", "stlxp")
_A64_ATOMICS = ("cas", "swp", "ldadd", "ldclr", "ldeor", "ldset", "ldsmax", "ldsmin", "ldumax", "ldumin",
                "stadd", "stclr", "steor", "stset", "stsmax", "stsmin", "stumax", "stumin")


def _x(reg: str) -> str:
    """gdb holds w0..w30 as the low halves of x0..x30."""
    return "x" + reg[1:] if reg[0] == "w" and reg[1:].isdigit() else reg


def _aarch64(word: int) -> MemOp | None:
    """The accesses arm64 traps on even in user mode: exclusive and acquire/release loads and
    stores (capstone decodes them; what a kernel cannot emulate, LSE atomics, is reported)."""
    global _A64
    if _A64 is None:
        _A64 = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        _A64.detail = True
    found = list(_A64.disasm(word.to_bytes(4, "little"), 0))
    if not found:
        return None
    ci = found[0]
    name = ci.mnemonic
    regs = [ci.reg_name(o.reg) for o in ci.operands if o.type == arm64.ARM64_OP_REG]
    mems = [o for o in ci.operands if o.type == arm64.ARM64_OP_MEM]
    if not mems or not regs:
        return None
    base = (_x(ci.reg_name(mems[0].mem.base)),)
    text = f"{name} {ci.op_str}"
    status = None
    if name.startswith(("ldxr", "ldaxr", "ldar", "ldapr", "ldlar", "ldxp", "ldaxp")):
        kind = "load"
    elif name.startswith(("stxr", "stlxr", "stxp", "stlxp")):
        kind, status, regs = "store", _x(regs[0]), regs[1:]
    elif name.startswith(("stlr", "stllr")):
        kind = "store"
    elif name.startswith(_A64_ATOMICS):
        kind = "atomic"  # trapped and reported, not performed
    else:
        return None  # plain loads and stores do not trap on arm64 in user mode
    width = 4 if regs[0].startswith("w") else 8
    if name.endswith("b"):
        width = 1
    elif name.endswith("h"):
        width = 2
    data = tuple(_x(r) for r in regs) if kind != "atomic" else (_x(regs[-1]),)
    return MemOp(text, width * len(data), kind, False, data, False, base, mems[0].mem.disp, "little",
                 status=status, exclusive=name.startswith(_A64_EXCLUSIVE))


def memop_from_insn(insn: Insn, endian: str) -> MemOp | None:
    """The fix-up's view of an instruction decoded into `decode.Insn` recipes (ARM, MIPS: one
    instruction model for the step engine and for signal mode), None when it has no memory
    operand that carries its data registers."""
    ops = [op for op in insn.operands if op.data]
    if not ops or len(ops) != len(insn.operands) or ops[0].base is None:
        return None
    lanes = tuple(o.data for o in ops) if any("[" in r for o in ops for r in o.data) else ()
    if len(ops) > 1:
        # ldrd, ldm, vldm, vldN...: one recipe per register (per element), consecutive: one
        # access of them all.
        first = ops[0]
        for k, later in enumerate(ops[1:], 1):
            if (later.base, later.index, later.scale, later.kind, later.size) != (
                    first.base, first.index, first.scale, first.kind, first.size) or later.disp != first.disp + k * first.size:
                return None
        op = replace(first, size=first.size * len(ops), data=tuple(r for o in ops for r in o.data),
                     writeback=sum(o.writeback for o in ops), align=first.align or first.size)
    else:
        op = ops[0]
    base = op.base
    kind = {AccessKind.READ: "load", AccessKind.WRITE: "store"}.get(op.kind, "atomic")
    assert base is not None
    # ARM's [rn, -rm, lsl #k]: the index subtracted 2**k times
    addr = (base,) + ((op.index,) * op.scale if op.index is not None and op.scale > 0 else ())
    subtract = (op.index,) * -op.scale if op.index is not None and op.scale < 0 else ()
    flt = op.float_data
    by_register = arm_insn.register_writeback(insn) if insn.arch in ("armhf", "armel") else None
    return MemOp(insn.text, op.size, kind, op.signed, op.data, flt, addr, op.disp, endian, status=op.status,
                 exclusive=op.exclusive, float_reg=op.data[0] if flt and len(op.data) == 1 and not lanes else None,
                 float_parts=op.data if flt and len(op.data) > 1 and not lanes else (),
                 update=(base, op.writeback) if op.writeback else None, align=op.align, length=insn.size,
                 update_reg=by_register, lanes=lanes, addr_sub=subtract)


# Architectures whose loads and stores `decode.Decoder` decodes (capstone) for the fix-up too.
INSN_ARCHES = frozenset({"mips", "mipsel", "mips64el", "armhf", "armel"})

# Per architecture: how to decode one instruction word into a MemOp.
DECODERS: dict[str, Callable[[int], MemOp | None]] = {"sparc64": _sparc, "alpha": _alpha, "hppa": _hppa,
                                                      "sh4": _sh4, "aarch64": _aarch64}
# Per architecture with delay slots whose faults qemu reports at the slot: is this instruction
# word a delayed branch (so the faulting instruction after it is its slot), and where does it go
# (from the word, its address and a register reader)?
DELAY_SLOTS: dict[str, tuple[Callable[[int], bool], Callable[[int, int, Callable[[str], int]], int | None]]] = {
    "sh4": (sh4.is_delayed_branch, sh4.branch_continuation),
    "mips": (mips.is_delayed_branch, mips.branch_continuation),
    "mipsel": (mips.is_delayed_branch, mips.branch_continuation),
    "mips64el": (mips.is_delayed_branch, mips.branch_continuation64)}
# The `nop` a fault in a delay slot resumes through: (word, bytes).
NOPS = {"sh4": (sh4.NOP, 2), "mips": (mips.NOP, 4), "mipsel": (mips.NOP, 4), "mips64el": (mips.NOP, 4)}
# Architectures gdb single-steps in software (a breakpoint after the instruction): running the
# `nop` as a slot goes where a taken branch goes, past that breakpoint, so the step must stop
# there too (engines/fixup.FixupEngine.slot_catch).
SOFTWARE_STEP = frozenset({"mips", "mipsel", "mips64el"})


def has_signal_engine(arch: archmod.ArchInfo) -> bool:
    """Whether ualdbg can decode and perform this architecture's faulting loads and stores."""
    return arch.name in DECODERS or arch.name in INSN_ARCHES


class FixupEngine:
    """The part of the trap engine for architectures without EFLAGS.AC (TrapEngine delegates)."""

    def __init__(self, session: FaultRecorder, arch: archmod.ArchInfo) -> None:
        self.session = session
        self.arch = arch
        self.decode_word = DECODERS.get(arch.name)
        self.decoder = Decoder(arch.name) if arch.name in INSN_ARCHES else None
        self.zero_regs = frozenset(arch.zero_regs)
        self.mask = MASK64 if arch.elf_class == 64 else 0xFFFFFFFF
        self.delay_slots = DELAY_SLOTS.get(arch.name)
        self.slot_branch: dict[int, int | None] = {}  # faulting PC -> the delayed branch before it
        self.slot_nop: int | None = None  # SH: a `nop` in the program's code (resuming from a slot)
        self.slot_resume: dict[int, int] = {}  # tid -> where its delayed branch goes (after one step)
        self.reported: dict[int, int] = {}  # tid -> PC of the fault the user was stopped at
        self.not_emulated: dict[int, str] = {}  # PC -> why ualdbg let the program have its SIGBUS
        # prctl architectures: "off" -> "armed" (or "failed", "no prctl"); the old setting.
        self.prctl_state = "off"
        self.saved_unalign: int | None = None
        self.redirect: dict | None = None  # type: ignore[type-arg]  # a prctl call in flight
        if arch.mechanism == archmod.MECH_PRCTL:
            self.mechanism = "prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS), accesses performed by ualdbg"
        else:
            self.mechanism = f"{arch.name}'s own alignment trap (SIGBUS), accesses performed by ualdbg"

    # -- decoding ----------------------------------------------------------------------------
    def decode_at(self, target: Target, pc: int, tid: int | None = None) -> tuple[MemOp | None, bytes]:
        size = self.arch.insn_size or 4
        try:
            raw = target.read_memory(pc, size)
        except Exception:
            return None, b""
        if self.decoder is not None:
            mode = ""
            if self.arch.name in ("armhf", "armel") and target.read_register("cpsr", tid) & arm.CPSR_T:
                mode = "thumb"
            insn = self.decoder.decode(raw, pc, mode)
            if insn is None:
                return None, raw
            return memop_from_insn(insn, self.arch.endian), raw[:insn.size]
        if len(raw) < size or self.decode_word is None:
            return None, raw
        return self.decode_word(int.from_bytes(raw, self.arch.endian)), raw  # type: ignore[arg-type]

    def address(self, target: Target, tid: int, op: MemOp) -> int:
        ea = op.disp
        for reg in op.addr_regs:
            ea += 0 if reg in self.zero_regs else target.read_register(reg, tid)
        for reg in op.addr_sub:
            ea -= target.read_register(reg, tid)
        return ea & self.mask

    # -- events --------------------------------------------------------------------------------
    def on_signal(self, target: Target, info: SigInfo) -> Decision:
        if info.signo != archmod.SIGBUS or info.code not in (archmod.BUS_ADRALN, 0):
            return Decision.NOT_OURS  # code 0: no siginfo (qemu's stub): the decode decides
        tid = target.current_tid()
        pc = target.read_register(self.arch.pc, tid)
        op, raw = self.decode_at(target, pc, tid)
        if op is None:
            if info.code != archmod.BUS_ADRALN:
                return Decision.NOT_OURS
            # The kernel says alignment, the decoder cannot tell the access: report the PC and
            # si_addr, size unknown; the program gets its SIGBUS (nothing to emulate with).
            self.session.record_fault(target, tid, info, decoded=(None, None, None))
            return Decision.NOT_OURS
        op = self._refine(target, tid, op)
        va = self.address(target, tid, op)
        if va % (op.align or op.size) == 0:
            return Decision.NOT_OURS  # an aligned access that raised SIGBUS: not an alignment trap
        if self.reported.pop(tid, None) != pc:
            acc = Access(va=va, size=op.size, kind=op.access)
            if self.session.record_fault(target, tid, info, decoded=(op.as_insn(pc, raw), acc, True)):
                # Stop AT the instruction, not performed yet: the user's resume re-executes it,
                # it traps again, and that trap is performed without being counted twice.
                self.reported[tid] = pc
                return Decision.STOP
        try:
            branch_to = self._slot_continuation(target, tid, pc)  # before the slot's own effect
            self.perform(target, tid, op, va, None if branch_to is None else self._nop(target, pc))
        except NotEmulated as exc:
            self.not_emulated[pc] = str(exc)  # `ualdbg status` says why the program got SIGBUS
            return Decision.NOT_OURS
        if branch_to is not None:
            self.slot_resume[tid] = branch_to
            return Decision.STEP_THEN_RESUME
        return Decision.RESUME

    def _slot_continuation(self, target: Target, tid: int, pc: int) -> int | None:
        """For a fault in a delay slot as qemu-sh4 reports it (the PC at the slot, qemu still
        "in the slot of a branch"): where the branch goes. The PC is then pointed at a `nop`,
        which one single step runs as the slot (ending qemu's slot state; the branch target it
        then takes may be stale, as qemu keeps constant targets in the translated code only),
        and `finish_slot` puts the PC where the branch really goes."""
        if self.delay_slots is None:
            return None
        is_branch, continuation = self.delay_slots
        size = self.arch.insn_size or 4
        if pc not in self.slot_branch:  # the code does not change: read once per faulting PC
            try:
                prev = target.read_memory(pc - size, size)
            except Exception:
                prev = b""
            word = int.from_bytes(prev, self.arch.endian) if len(prev) == size else None  # type: ignore[arg-type]
            self.slot_branch[pc] = word if word is not None and is_branch(word) else None
        word = self.slot_branch[pc]
        if word is None:
            return None
        to = continuation(word, pc - size, lambda reg: target.read_register(reg, tid))
        if to is None:
            raise NotEmulated("a fault in the delay slot of rte is not emulated")
        return to

    def slot_catch(self, tid: int) -> int | None:
        """Before the single step of STEP_THEN_RESUME, where gdb steps in software (MIPS): the
        address a taken branch makes the `nop` go to, which the step must stop at too."""
        if self.arch.name not in SOFTWARE_STEP:
            return None
        return self.slot_resume.get(tid)

    def finish_slot(self, target: Target, tid: int) -> bool:
        """After the single step of STEP_THEN_RESUME: the PC where the branch goes."""
        to = self.slot_resume.pop(tid, None)
        if to is None:
            return False
        self._write_regs(target, {self.arch.pc: to}, tid)
        return True

    def _refine(self, target: Target, tid: int, op: MemOp) -> MemOp:
        """What the instruction word alone does not say: SH's fmov moves 8 bytes (a register
        pair) while FPSCR.SZ is set."""
        if self.arch.name == "sh4" and op.float_regs:
            try:
                sz = target.read_register("fpscr", tid) & sh4.FPSCR_SZ
            except Exception:
                sz = 0  # gdb's plain `sh` has no FPU registers: the ELF is no SH-4 FPU program
            if sz:
                return replace(op, size=8, text=op.text.replace("fmov.s", "fmov"), float_reg=None,
                               update=(op.update[0], op.update[1] * 2) if op.update else None,
                               disp=op.disp * 2)
        return op

    # -- the fix-up ---------------------------------------------------------------------------
    def _endian(self, target: Target, tid: int, op: MemOp) -> str:
        if op.endian != "asi":
            return op.endian
        asi = target.read_register("asi", tid)
        if asi in sparc64.ASI_BIG:
            return "big"
        if asi in sparc64.ASI_LITTLE:
            return "little"
        raise NotEmulated(f"{op.text}: address space {asi:#x} is not plain memory")

    def perform(self, target: Target, tid: int, op: MemOp, va: int, next_pc: int | None = None) -> None:
        """Do what the instruction would have done, then step the PC past it (or to next_pc)."""
        if op.float_regs:
            self._perform_float(target, tid, op, va, next_pc)
            return
        if op.kind == "atomic":
            raise NotEmulated(f"{op.text}: an atomic read-modify-write is not emulated")
        if op.exclusive:
            # Performing ldxr here leaves the CPU's exclusive monitor unset: the stxr that
            # follows fails and the program loops back to the ldxr forever.
            raise NotEmulated(f"{op.text}: an exclusive access needs the CPU's exclusive monitor")
        if op.endian == "unknown":
            raise NotEmulated(f"{op.text}: the address space identifier is not plain memory")
        if not offers(target, MemoryWriter):
            raise NotEmulated("the debugger cannot write the program's memory")
        order = self._endian(target, tid, op)
        word = op.size // len(op.regs)
        regs: dict[str, int] = {}
        if op.kind == "load":
            data = target.read_memory(va, op.size)
            for k, reg in enumerate(op.regs):
                value = int.from_bytes(data[k * word:(k + 1) * word], order, signed=op.signed)  # type: ignore[arg-type]
                regs[reg] = value & self.mask
        elif op.kind == "store":
            data = b"".join((target.read_register(r, tid) & ((1 << 8 * word) - 1)).to_bytes(word, order)  # type: ignore[arg-type]
                            for r in op.regs)
            target.write_memory(va, data)
            if op.status is not None:
                regs[op.status] = 0  # the exclusive store succeeded: the debugger holds every thread
        else:  # swap, cas: read the old value, maybe write the register's, return the old one
            old = target.read_memory(va, op.size)
            mask = (1 << 8 * op.size) - 1
            reg = op.regs[0]
            new = target.read_register(reg, tid) & mask
            if op.kind == "swap" or (op.cas_compare is not None and
                                     int.from_bytes(old, order) == target.read_register(op.cas_compare, tid) & mask):  # type: ignore[arg-type]
                target.write_memory(va, new.to_bytes(op.size, order))  # type: ignore[arg-type]
            regs[reg] = int.from_bytes(old, order)  # type: ignore[arg-type]
        for name in [r for r in regs if r in self.zero_regs]:
            del regs[name]
        branch = self._interwork(target, tid, regs)
        regs.update(self._update(target, tid, op, regs))
        regs.update(branch or (self.advance(target, tid, op.length) if next_pc is None else {self.arch.pc: next_pc}))
        self._write_regs(target, regs, tid)

    def _interwork(self, target: Target, tid: int, loaded: dict[str, int]) -> dict[str, int] | None:
        """ARM: a load into the PC (ldr pc, ldm/pop {.., pc}) is a branch to the loaded address,
        whose bit 0 selects Thumb state (ARMv5T and later: BXWritePC; qemu's gen_bx): the PC
        and the CPSR's T bit, written after the other registers. None for any other load."""
        if self.arch.name not in ("armhf", "armel") or "pc" not in loaded:
            return None
        value = loaded.pop("pc")
        cpsr = target.read_register("cpsr", tid)
        cpsr = cpsr | arm.CPSR_T if value & 1 else cpsr & ~arm.CPSR_T
        return {"pc": value & ~1 & self.mask, "cpsr": cpsr & 0xFFFFFFFF}

    def _perform_single_in_fr1(self, target: Target, tid: int, op: MemOp, va: int, next_pc: int | None) -> None:
        """MIPS64 with FR=1: lwc1/swc1 move the low word of a 64-bit $fN, which gdb holds as a
        double: the bits go through unchanged (a float's value converted to a double would not
        be them); lwc1 keeps the upper word as it was."""
        if not offers(target, FloatBits) or not offers(target, MemoryWriter) or op.float_reg is None:
            raise NotEmulated(f"{op.text}: this floating-point access is not emulated")
        order = self.arch.endian
        old = target.float_bits(op.float_reg, tid)
        if op.kind == "load":
            low = int.from_bytes(target.read_memory(va, 4), order)  # type: ignore[arg-type]
            target.set_float_bits(op.float_reg, (old & ~0xFFFFFFFF) | low, tid)
        else:
            target.write_memory(va, (old & 0xFFFFFFFF).to_bytes(4, order))  # type: ignore[arg-type]
        after = self.advance(target, tid, op.length) if next_pc is None else {self.arch.pc: next_pc}
        self._write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    def _update(self, target: Target, tid: int, op: MemOp, loaded: dict[str, int]) -> dict[str, int]:
        """The base register's post-increment or pre-decrement (by a constant or, ARM, by a
        register), unless the load wrote it. Registers as they were before the instruction."""
        out = {}
        if op.update is not None and op.update[0] not in loaded:
            reg, delta = op.update
            out[reg] = (target.read_register(reg, tid) + delta) & self.mask
        if op.update_reg is not None and op.update_reg[0] not in loaded:
            reg, rm, times = op.update_reg
            out[reg] = (target.read_register(reg, tid) + target.read_register(rm, tid) * times) & self.mask
        return out

    def _perform_float(self, target: Target, tid: int, op: MemOp, va: int, next_pc: int | None = None) -> None:
        """A float register's bits cannot go through an int: the debugger copies them between
        the register and memory itself, as the same C type on both sides (bit-exact)."""
        if op.lanes:
            self._perform_lanes(target, tid, op, va, next_pc)
            return
        parts = op.float_parts or ((op.float_reg,) if op.float_reg else ())
        if self.arch.name == "mips64el" and op.size == 4 and op.float_reg:
            self._perform_single_in_fr1(target, tid, op, va, next_pc)
            return
        # Each part one C float or double (vldm/vld1: several d registers, each 8 bytes).
        if not offers(target, FloatMover) or not parts or op.size // len(parts) not in (4, 8) or op.endian not in ("big", "little"):
            raise NotEmulated(f"{op.text}: this floating-point access is not emulated")
        if op.endian != self.arch.endian:
            raise NotEmulated(f"{op.text}: a byte-swapping floating-point access is not emulated")
        part = op.size // len(parts)
        for k, reg in enumerate(parts):
            target.move_float(reg, va + k * part, part, op.kind == "store", tid)
        after = self.advance(target, tid, op.length) if next_pc is None else {self.arch.pc: next_pc}
        self._write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    def _perform_lanes(self, target: Target, tid: int, op: MemOp, va: int, next_pc: int | None) -> None:
        """ARM VLDn/VSTn (whole registers, interleaved structures, one lane, all lanes): the
        transfer's bytes in one read or write, each element moved between memory and its
        lanes of the d registers' raw bits (the debugger's float_bits/set_float_bits, no
        conversion), lanes not named keep their bits; then writeback and the PC."""
        if not offers(target, FloatBits) or not offers(target, MemoryWriter) or op.endian != "little":
            raise NotEmulated(f"{op.text}: this NEON access is not emulated")
        esize = op.size // len(op.lanes)
        width = 8 * esize
        emask = (1 << width) - 1
        parsed = [[(lane.partition("[")[0], lane.partition("[")[2].rstrip("]")) for lane in lanes] for lanes in op.lanes]
        names = list(dict.fromkeys(reg for lanes in parsed for reg, _ in lanes))
        values = {reg: target.float_bits(reg, tid) & MASK64 for reg in names}
        if op.kind == "load":
            data = target.read_memory(va, op.size)
            if len(data) != op.size:
                raise NotEmulated(f"{op.text}: {va:#x} cannot be read")
            for k, lanes in enumerate(parsed):
                element = int.from_bytes(data[k * esize:(k + 1) * esize], "little")
                for reg, index in lanes:
                    if index == "":  # every lane
                        values[reg] = sum(element << (width * i) for i in range(64 // width))
                    else:
                        shift = width * int(index)
                        values[reg] = values[reg] & ~(emask << shift) | element << shift
            for reg in names:
                target.set_float_bits(reg, values[reg], tid)
        else:
            target.write_memory(va, b"".join(((values[reg] >> (width * int(index or 0))) & emask).to_bytes(esize, "little")
                                             for reg, index in (lanes[0] for lanes in parsed)))
        after = self.advance(target, tid, op.length) if next_pc is None else {self.arch.pc: next_pc}
        self._write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    @staticmethod
    def _write_regs(target: Target, regs: dict[str, int], tid: int) -> None:
        if offers(target, RegisterBatch):
            target.write_registers(regs, tid)
        else:
            for name, value in regs.items():
                target.write_register(name, value, tid)

    def advance(self, target: Target, tid: int, length: int = 0) -> dict[str, int]:
        """The PC past the instruction: SPARC's nPC becomes the PC (the instruction may sit in
        a delay slot) and nPC moves on by one instruction; PA-RISC's PC queue likewise."""
        a = self.arch
        step = length or a.insn_size or 4
        if a.npc is not None:
            npc = target.read_register(a.npc, tid)
            return {a.pc_writable: npc, a.npc: (npc + step) & MASK64}
        return {a.pc: (target.read_register(a.pc, tid) + step) & MASK64}

    def _nop(self, target: Target, pc: int) -> int:
        """The address of a `nop` in the program's code near `pc` (found once per process)."""
        if self.slot_nop is not None:
            return self.slot_nop
        word, width = NOPS[self.arch.name]
        chunk = 512
        first = pc & ~(width - 1)
        for start in range(first, first + 64 * 1024, chunk):
            try:
                data = target.read_memory(start, chunk)
            except Exception:
                break
            for k in range(0, len(data) - width + 1, width):
                if int.from_bytes(data[k:k + width], self.arch.endian) == word:  # type: ignore[arg-type]
                    self.slot_nop = start + k
                    return self.slot_nop
        raise NotEmulated("a fault in a branch's delay slot: no `nop` found in the program's code to resume through")

    # -- arming (prctl architectures) -----------------------------------------------------------
    def arm(self, target: Target) -> None:
        """SPARC traps by itself: nothing to arm. Alpha, PA-RISC, SH: make the kernel (here qemu)
        send SIGBUS instead of fixing up, remembering the old setting for `off`."""
        if self.arch.mechanism != archmod.MECH_PRCTL or self.prctl_state == "armed":
            return
        if self.decode_word is None and self.decoder is None:
            # riscv64: no decoder here, so a fault could be neither located exactly nor
            # performed (README: architectures).
            raise RuntimeError(f"signal mode on {self.arch.name} is not supported: no decoder for its loads and stores")
        if self.redirect is not None:
            self._redirect_returned(target)
            return
        if offers(target, InferiorCalls) and target.can_call_functions():
            func = self._prctl_address(target)
            if func is None:
                return  # not loaded yet (at the loader's entry): the arm point at main will do it
            scratch = self._scratch(target)
            if target.call_function(func, [archmod.PR_GET_UNALIGN, scratch]) == 0:
                self.saved_unalign = int.from_bytes(target.read_memory(scratch, 4), self.arch.endian)  # type: ignore[arg-type]
            self._check(target.call_function(func, [archmod.PR_SET_UNALIGN, archmod.PR_UNALIGN_SIGBUS]))
            return
        # Inside a breakpoint's stop callback (the arm point at main) the debugger cannot run an
        # inferior call: redirect the thread into prctl with its return address set to this
        # very PC, where the arm point stops again and `arm` is called back to finish.
        self._redirect(target, [archmod.PR_GET_UNALIGN, None], then=[archmod.PR_SET_UNALIGN, archmod.PR_UNALIGN_SIGBUS])

    def arming_deferred(self) -> str | None:
        """Why `arm` left the prctl to the arm point (None when it is armed, or needs none)."""
        if self.arch.mechanism == archmod.MECH_PRCTL and self.prctl_state == "off":
            return "libc's prctl is not loaded yet (the dynamic loader is still running)"
        return None

    def disarm(self, target: Target) -> None:
        self.reported.clear()
        if self.arch.mechanism != archmod.MECH_PRCTL or self.prctl_state != "armed":
            return
        func = self._prctl_address(target)
        if not offers(target, InferiorCalls) or func is None or not target.can_call_functions():
            raise RuntimeError("cannot call prctl in the program now to restore its unaligned-access setting")
        old = self.saved_unalign if self.saved_unalign is not None else archmod.PR_UNALIGN_NOPRINT
        target.call_function(func, [archmod.PR_SET_UNALIGN, old])
        self.prctl_state = "off"

    def status_lines(self) -> list[str]:
        """For `ualdbg status`: the prctl setting and the faults left to the program."""
        out = []
        if self.arch.mechanism == archmod.MECH_PRCTL:
            old = "unknown" if self.saved_unalign is None else f"{self.saved_unalign:#x}"
            out.append(f"  prctl(PR_SET_UNALIGN): {self.prctl_state} (the program's own setting: {old})")
        for pc, why in sorted(self.not_emulated.items()):
            out.append(f"  not performed at {pc:#x}: {why}; the program got its SIGBUS")
        return out

    def off_summary(self) -> str:
        if self.arch.mechanism == archmod.MECH_PRCTL:
            return "the program's own PR_SET_UNALIGN setting is back"
        return f"{self.arch.name} traps by itself: its faults go to the program again"

    def forget(self) -> None:
        """A new process (or none): nothing armed in it yet."""
        self.reported.clear()
        self.prctl_state = "off"
        self.redirect = None
        self.slot_nop = None
        self.slot_branch.clear()
        self.slot_resume.clear()

    def _prctl_address(self, target: Target) -> int | None:
        return target.symbol_address("prctl") if offers(target, SymbolLookup) else None

    def _scratch(self, target: Target) -> int:
        """Four bytes of stack below the live frames, for PR_GET_UNALIGN's answer."""
        return self._free_stack(target.read_register(self.arch.sp), 256)

    def _free_stack(self, sp: int, distance: int) -> int:
        """An aligned address `distance` bytes into the unused stack (below sp, or above it
        where the stack grows up)."""
        align = self.arch.stack_align
        if self.arch.stack_grows_up:
            return (sp + distance + align - 1) & ~(align - 1)
        return (sp - distance) & ~(align - 1)

    def _check(self, result: int) -> None:
        if result != 0:
            self.prctl_state = "failed"
            raise RuntimeError(f"prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS) failed in the program ({result:#x})")
        self.prctl_state = "armed"

    def _redirect(self, target: Target, args: list[int | None], then: list[int] | None = None) -> None:
        func = self._prctl_address(target)
        if func is None:
            self.prctl_state = "no prctl"
            raise RuntimeError("the program has no `prctl` (a static program that does not use it, or gdb "
                               "lacks the target's libraries: set sysroot): cannot ask for SIGBUS")
        a = self.arch
        tid = target.current_tid()
        pc = a.pc_writable
        saved = {r: target.read_register(r, tid) for r in (*a.gprs, pc, *([a.npc] if a.npc else []))
                 if r not in self.zero_regs}
        sp = saved[a.sp]
        scratch = self._free_stack(sp, 256)
        # the PC as written keeps what its register holds beside the address (PA-RISC's privilege)
        entry = func | (saved[pc] - target.read_register(a.pc, tid))
        regs = {a.sp: self._free_stack(sp, 1024), pc: entry, a.return_address: saved[pc]}
        if a.npc:
            regs[a.npc] = entry + (a.insn_size or 4)
        if a.call_target:
            regs[a.call_target] = func
        for reg, value in zip(a.call_args, args):
            regs[reg] = scratch if value is None else value
        self.redirect = {"saved": saved, "scratch": scratch, "then": then, "tid": tid}
        self._write_regs(target, regs, tid)

    def _redirect_returned(self, target: Target) -> None:
        """Back at the arm point from a redirected prctl: take its result, restore the thread."""
        assert self.redirect is not None
        call, self.redirect = self.redirect, None
        a = self.arch
        tid = call["tid"]
        result = target.read_register(a.call_ret, tid)
        if call["then"] is not None:
            if result == 0:
                self.saved_unalign = int.from_bytes(target.read_memory(call["scratch"], 4), a.endian)  # type: ignore[arg-type]
            self._restore(target, call)
            self._redirect(target, call["then"])
            return
        self._restore(target, call)
        self._check(result)

    def _restore(self, target: Target, call: dict) -> None:  # type: ignore[type-arg]
        self._write_regs(target, call["saved"], call["tid"])
