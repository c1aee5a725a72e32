"""Performing a faulting load or store on the program's behalf, as an operating system's fix-up
handler would: read or write the bytes through the debugger in the target's byte order (float
and vector registers bit-exact, through the debugger's own copies), set the destination
register(s) and the base's writeback, and advance the PC (SPARC's nPC, PA-RISC's PC queue, an
ARM load into the PC with its interworking). The fix-up engine (fixup.py) decides when."""
from __future__ import annotations

from ..core.model import AccessKind
from ..core.target import FloatBits, FloatMover, MemoryWriter, RegisterBatch, Target, offers
from ..isa import arch as archmod
from ..isa.arch import sparc64
from ..isa.insn import Insn, MemOperand

MASK64 = (1 << 64) - 1


class NotEmulated(Exception):
    """The instruction traps but ualdbg cannot perform it (float registers, an unusual ASI)."""


def _operation(op: MemOperand) -> str:
    """What the fix-up does: "load", "store", or a read-modify-write's kind (swap, cas, atomic)."""
    if op.kind is AccessKind.READ:
        return "load"
    if op.kind is AccessKind.WRITE:
        return "store"
    return op.rmw or "atomic"


class Performer:
    """The accesses of one architecture, performed through a debugger's Target."""

    def __init__(self, arch: archmod.ArchInfo) -> None:
        self.arch = arch
        self.zero_regs = frozenset(arch.zero_regs)
        self.mask = MASK64 if arch.elf_class == 64 else 0xFFFFFFFF

    def address(self, target: Target, tid: int, op: MemOperand) -> int:
        """base + index * scale + disp (a negative scale subtracts: ARM's [rn, -rm]), the zero
        registers reading 0."""
        ea = op.disp
        for reg, times in ((op.base, 1), (op.index, op.scale)):
            if reg is not None and reg not in self.zero_regs:
                ea += target.read_register(reg, tid) * times
        return ea & self.mask

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
        self.write_regs(target, regs, tid)

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
        self.write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

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
        self.write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

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
        self.write_regs(target, {**self._update(target, tid, op, {}), **after}, tid)

    @staticmethod
    def write_regs(target: Target, regs: dict[str, int], tid: int) -> None:
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
