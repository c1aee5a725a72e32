"""Signal mode on CPUs that cannot be told to tolerate a misaligned access (SPARC traps in
hardware; Alpha, PA-RISC and SH trap once prctl asks for SIGBUS): decode the faulting load or
store, record it, then perform the access as an operating system's fix-up handler would — read
or write the bytes through the debugger in the target's byte order, set the destination
register(s), advance the PC (and SPARC's nPC) — and resume with the signal suppressed.

The address comes from the decoded instruction and the registers, never from si_addr (qemu
7.2's gdb stub has no `$_siginfo`; qemu 9+'s does, with the target's own signal numbers). All threads are stopped while the engine
runs (all-stop), so emulating swap/cas here is as atomic for the program as the instruction."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.model import Access, AccessKind
from ..core.target import FloatBits, FloatMover, InferiorCalls, MemoryWriter, RegisterBatch, SigInfo, SymbolLookup, Target, offers
from ..isa import arch as archmod
from ..isa.arch import sparc64, strict
from ..isa.cpu import CallConvention
from ..isa.insn import Insn, MemOperand, transfer
from .recorder import Decision

if TYPE_CHECKING:
    from .recorder import FaultRecorder

MASK64 = (1 << 64) - 1


class NotEmulated(Exception):
    """The instruction traps but ualdbg cannot perform it (float registers, an unusual ASI)."""


def has_signal_engine(arch: archmod.ArchInfo) -> bool:
    """Whether ualdbg can decode and perform this architecture's faulting loads and stores."""
    return strict(arch.name) is not None


def _operation(op: MemOperand) -> str:
    """What the fix-up does: "load", "store", or a read-modify-write's kind (swap, cas, atomic)."""
    if op.kind is AccessKind.READ:
        return "load"
    if op.kind is AccessKind.WRITE:
        return "store"
    return op.rmw or "atomic"


class FixupEngine:
    """The part of the trap engine for architectures without EFLAGS.AC (TrapEngine delegates)."""

    def __init__(self, session: FaultRecorder, arch: archmod.ArchInfo) -> None:
        self.session = session
        self.arch = arch
        self.strict = strict(arch.name)
        self.decode = self.strict.decoder().decode if self.strict is not None else None
        self.zero_regs = frozenset(arch.zero_regs)
        self.mask = MASK64 if arch.elf_class == 64 else 0xFFFFFFFF
        self.delay_slots = self.strict.delay_slot if self.strict is not None else None
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
    def decode_at(self, target: Target, pc: int, tid: int | None = None) -> tuple[Insn | None, MemOperand | None]:
        """The instruction at `pc` in the one instruction model, and the one access the fix-up
        performs for it (None when it is no access the architecture traps, or the decoder
        cannot say what it moves)."""
        size = self.arch.insn_size or 4
        try:
            raw = target.read_memory(pc, size)
        except Exception:
            return None, None
        if self.decode is None:
            return None, None
        mode = self.arch.mode(target.read_register(self.arch.mode_reg, tid)) if self.arch.mode_reg else ""
        insn = self.decode(raw, pc, mode)
        if insn is None:
            return None, None
        op = transfer(insn)
        return (insn, op) if op is not None else (None, None)

    def address(self, target: Target, tid: int, op: MemOperand) -> int:
        """base + index * scale + disp (a negative scale subtracts: ARM's [rn, -rm]), the zero
        registers reading 0."""
        ea = op.disp
        for reg, times in ((op.base, 1), (op.index, op.scale)):
            if reg is not None and reg not in self.zero_regs:
                ea += target.read_register(reg, tid) * times
        return ea & self.mask

    # -- events --------------------------------------------------------------------------------
    def on_signal(self, target: Target, info: SigInfo) -> Decision:
        if info.signo != archmod.SIGBUS or info.code not in (archmod.BUS_ADRALN, 0):
            return Decision.NOT_OURS  # code 0: no siginfo (qemu's stub): the decode decides
        tid = target.current_tid()
        pc = target.read_register(self.arch.pc, tid)
        insn, op = self.decode_at(target, pc, tid)
        if insn is None or op is None:
            if info.code != archmod.BUS_ADRALN:
                return Decision.NOT_OURS
            # The kernel says alignment, the decoder cannot tell the access: report the PC and
            # si_addr, size unknown; the program gets its SIGBUS (nothing to emulate with).
            self.session.record_fault(target, tid, info, decoded=(None, None, None))
            return Decision.NOT_OURS
        if self.strict is not None and self.strict.refine is not None:
            insn, op = self.strict.refine(insn, op, lambda reg: target.read_register(reg, tid))
        va = self.address(target, tid, op)
        if va % (op.align or op.size) == 0:
            return Decision.NOT_OURS  # an aligned access that raised SIGBUS: not an alignment trap
        if self.reported.pop(tid, None) != pc:
            acc = Access(va=va, size=op.size, kind=op.kind)
            if self.session.record_fault(target, tid, info, decoded=(insn, acc, True)):
                # Stop AT the instruction, not performed yet: the user's resume re-executes it,
                # it traps again, and that trap is performed without being counted twice.
                self.reported[tid] = pc
                return Decision.STOP
        try:
            branch_to = self._slot_continuation(target, tid, pc)  # before the slot's own effect
            self.perform(target, tid, insn, op, va, None if branch_to is None else self._nop(target, pc))
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
        if self.strict is None or not self.strict.software_step:
            return None
        return self.slot_resume.get(tid)

    def finish_slot(self, target: Target, tid: int) -> bool:
        """After the single step of STEP_THEN_RESUME: the PC where the branch goes."""
        to = self.slot_resume.pop(tid, None)
        if to is None:
            return False
        self._write_regs(target, {self.arch.pc: to}, tid)
        return True

    # -- the fix-up ---------------------------------------------------------------------------
    def _endian(self, target: Target, tid: int, insn: Insn, op: MemOperand) -> str:
        endian = op.endian or self.arch.endian
        if endian != "asi":
            return endian
        asi = target.read_register("asi", tid)
        order = sparc64.asi_endian(asi)
        if order is None:
            raise NotEmulated(f"{insn.text}: address space {asi:#x} is not plain memory")
        return order

    def perform(self, target: Target, tid: int, insn: Insn, op: MemOperand, va: int, next_pc: int | None = None) -> None:
        """Do what the instruction would have done, then step the PC past it (or to next_pc)."""
        if op.float_data:
            self._perform_float(target, tid, insn, op, va, next_pc)
            return
        operation = _operation(op)
        if operation == "atomic":
            raise NotEmulated(f"{insn.text}: an atomic read-modify-write is not emulated")
        if op.exclusive:
            # Performing ldxr here leaves the CPU's exclusive monitor unset: the stxr that
            # follows fails and the program loops back to the ldxr forever.
            raise NotEmulated(f"{insn.text}: an exclusive access needs the CPU's exclusive monitor")
        if op.endian == "unknown":
            raise NotEmulated(f"{insn.text}: the address space identifier is not plain memory")
        if not offers(target, MemoryWriter):
            raise NotEmulated("the debugger cannot write the program's memory")
        order = self._endian(target, tid, insn, op)
        word = op.size // len(op.data)
        regs: dict[str, int] = {}
        if operation == "load":
            data = target.read_memory(va, op.size)
            for k, reg in enumerate(op.data):
                value = int.from_bytes(data[k * word:(k + 1) * word], order, signed=op.signed)  # type: ignore[arg-type]
                regs[reg] = value & self.mask
        elif operation == "store":
            data = b"".join((target.read_register(r, tid) & ((1 << 8 * word) - 1)).to_bytes(word, order)  # type: ignore[arg-type]
                            for r in op.data)
            target.write_memory(va, data)
            if op.status is not None:
                regs[op.status] = 0  # the exclusive store succeeded: the debugger holds every thread
        else:  # swap, cas: read the old value, maybe write the register's, return the old one
            old = target.read_memory(va, op.size)
            mask = (1 << 8 * op.size) - 1
            reg = op.data[0]
            new = target.read_register(reg, tid) & mask
            if operation == "swap" or (op.compare is not None and
                                       int.from_bytes(old, order) == target.read_register(op.compare, tid) & mask):  # type: ignore[arg-type]
                target.write_memory(va, new.to_bytes(op.size, order))  # type: ignore[arg-type]
            regs[reg] = int.from_bytes(old, order)  # type: ignore[arg-type]
        for name in [r for r in regs if r in self.zero_regs]:
            del regs[name]
        branch = self._interwork(target, tid, regs)
        regs.update(self._update(target, tid, op, regs))
        regs.update(branch or (self.advance(target, tid, insn.size) if next_pc is None else {self.arch.pc: next_pc}))
        self._write_regs(target, regs, tid)

    def _interwork(self, target: Target, tid: int, loaded: dict[str, int]) -> dict[str, int] | None:
        """ARM: a load into the PC (ldr pc, ldm/pop {.., pc}) is a branch to the loaded address,
        whose bit 0 selects Thumb state (ARMv5T and later: BXWritePC; qemu's gen_bx): the PC
        and the CPSR's T bit, written after the other registers. None for any other load."""
        mode_reg = self.arch.mode_reg
        if mode_reg is None or "pc" not in loaded:
            return None
        value = loaded.pop("pc")
        state = target.read_register(mode_reg, tid)
        state = state | self.arch.mode_bit if value & 1 else state & ~self.arch.mode_bit
        return {"pc": value & ~1 & self.mask, mode_reg: state & 0xFFFFFFFF}

    def _perform_single_in_fr1(self, target: Target, tid: int, insn: Insn, op: MemOperand, va: int,
                               next_pc: int | None) -> None:
        """MIPS64 with FR=1: lwc1/swc1 move the low word of a 64-bit $fN, which gdb holds as a
        double: the bits go through unchanged (a float's value converted to a double would not
        be them); lwc1 keeps the upper word as it was."""
        if not offers(target, FloatBits) or not offers(target, MemoryWriter):
            raise NotEmulated(f"{insn.text}: this floating-point access is not emulated")
        order = self.arch.endian
        reg = op.data[0]
        old = target.float_bits(reg, tid)
        if op.kind is AccessKind.READ:
            low = int.from_bytes(target.read_memory(va, 4), order)  # type: ignore[arg-type]
            target.set_float_bits(reg, (old & ~0xFFFFFFFF) | low, tid)
        else:
            target.write_memory(va, (old & 0xFFFFFFFF).to_bytes(4, order))  # type: ignore[arg-type]
        after = self.advance(target, tid, insn.size) if next_pc is None else {self.arch.pc: next_pc}
        self._write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    def _update(self, target: Target, tid: int, op: MemOperand, loaded: dict[str, int]) -> dict[str, int]:
        """The base register's post-increment or pre-decrement (by a constant or, ARM, by a
        register), unless the load wrote it. Registers as they were before the instruction."""
        out = {}
        if op.writeback and op.base is not None and op.base not in loaded:
            out[op.base] = (target.read_register(op.base, tid) + op.writeback) & self.mask
        if op.writeback_by is not None and op.writeback_by[0] not in loaded:
            reg, rm, times = op.writeback_by
            out[reg] = (target.read_register(reg, tid) + target.read_register(rm, tid) * times) & self.mask
        return out

    def _perform_float(self, target: Target, tid: int, insn: Insn, op: MemOperand, va: int,
                       next_pc: int | None = None) -> None:
        """A float register's bits cannot go through an int: the debugger copies them between
        the register and memory itself, as the same C type on both sides (bit-exact)."""
        lanes = tuple(o.data for o in insn.operands) if any("[" in r for r in op.data) else ()
        if lanes:
            self._perform_lanes(target, tid, insn, op, lanes, va, next_pc)
            return
        parts = op.data
        if self.arch.fpr64 and op.size == 4 and len(parts) == 1:
            self._perform_single_in_fr1(target, tid, insn, op, va, next_pc)
            return
        endian = op.endian or self.arch.endian
        # Each part one C float or double (vldm/vld1: several d registers, each 8 bytes).
        if not offers(target, FloatMover) or not parts or op.size // len(parts) not in (4, 8) or endian not in ("big", "little"):
            raise NotEmulated(f"{insn.text}: this floating-point access is not emulated")
        if endian != self.arch.endian:
            raise NotEmulated(f"{insn.text}: a byte-swapping floating-point access is not emulated")
        part = op.size // len(parts)
        for k, reg in enumerate(parts):
            target.move_float(reg, va + k * part, part, op.kind is AccessKind.WRITE, tid)
        after = self.advance(target, tid, insn.size) if next_pc is None else {self.arch.pc: next_pc}
        self._write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    def _perform_lanes(self, target: Target, tid: int, insn: Insn, op: MemOperand, lanes: tuple[tuple[str, ...], ...],
                       va: int, next_pc: int | None) -> None:
        """ARM VLDn/VSTn (whole registers, interleaved structures, one lane, all lanes): the
        transfer's bytes in one read or write, each element (one recipe each, `lanes`: the
        lanes it fills or empties) moved between memory and its lanes of the d registers' raw
        bits (the debugger's float_bits/set_float_bits, no conversion), lanes not named keep
        their bits; then writeback and the PC."""
        if not offers(target, FloatBits) or not offers(target, MemoryWriter) or (op.endian or self.arch.endian) != "little":
            raise NotEmulated(f"{insn.text}: this NEON access is not emulated")
        esize = op.size // len(lanes)
        width = 8 * esize
        emask = (1 << width) - 1
        parsed = [[(lane.partition("[")[0], lane.partition("[")[2].rstrip("]")) for lane in element] for element in lanes]
        names = list(dict.fromkeys(reg for lanes in parsed for reg, _ in lanes))
        values = {reg: target.float_bits(reg, tid) & MASK64 for reg in names}
        if op.kind is AccessKind.READ:
            data = target.read_memory(va, op.size)
            if len(data) != op.size:
                raise NotEmulated(f"{insn.text}: {va:#x} cannot be read")
            for k, targets in enumerate(parsed):
                element = int.from_bytes(data[k * esize:(k + 1) * esize], "little")
                for reg, index in targets:
                    if index == "":  # every lane
                        values[reg] = sum(element << (width * i) for i in range(64 // width))
                    else:
                        shift = width * int(index)
                        values[reg] = values[reg] & ~(emask << shift) | element << shift
            for reg in names:
                target.set_float_bits(reg, values[reg], tid)
        else:
            target.write_memory(va, b"".join(((values[reg] >> (width * int(index or 0))) & emask).to_bytes(esize, "little")
                                             for reg, index in (targets[0] for targets in parsed)))
        after = self.advance(target, tid, insn.size) if next_pc is None else {self.arch.pc: next_pc}
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
        assert self.strict is not None and self.strict.nop is not None
        word, width = self.strict.nop
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
        if self.decode is None:
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

    @property
    def _call(self) -> CallConvention:
        """The calling convention the prctl redirect follows (signal mode's, isa/cpu.py)."""
        return self.strict.call if self.strict is not None else CallConvention()

    def _prctl_address(self, target: Target) -> int | None:
        return target.symbol_address("prctl") if offers(target, SymbolLookup) else None

    def _scratch(self, target: Target) -> int:
        """Four bytes of stack below the live frames, for PR_GET_UNALIGN's answer."""
        return self._free_stack(target.read_register(self.arch.sp), 256)

    def _free_stack(self, sp: int, distance: int) -> int:
        """An aligned address `distance` bytes into the unused stack (below sp, or above it
        where the stack grows up)."""
        align = self._call.stack_align
        if self._call.stack_grows_up:
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
        a, c = self.arch, self._call
        tid = target.current_tid()
        pc = a.pc_writable
        saved = {r: target.read_register(r, tid) for r in (*a.gprs, pc, *([a.npc] if a.npc else []))
                 if r not in self.zero_regs}
        sp = saved[a.sp]
        scratch = self._free_stack(sp, 256)
        # the PC as written keeps what its register holds beside the address (PA-RISC's privilege)
        entry = func | (saved[pc] - target.read_register(a.pc, tid))
        regs = {a.sp: self._free_stack(sp, 1024), pc: entry, c.return_address: saved[pc]}
        if a.npc:
            regs[a.npc] = entry + (a.insn_size or 4)
        if c.target:
            regs[c.target] = func
        for reg, value in zip(c.args, args):
            regs[reg] = scratch if value is None else value
        self.redirect = {"saved": saved, "scratch": scratch, "then": then, "tid": tid}
        self._write_regs(target, regs, tid)

    def _redirect_returned(self, target: Target) -> None:
        """Back at the arm point from a redirected prctl: take its result, restore the thread."""
        assert self.redirect is not None
        call, self.redirect = self.redirect, None
        a = self.arch
        tid = call["tid"]
        result = target.read_register(self._call.ret, tid)
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
