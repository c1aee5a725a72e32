"""Out-of-line execution for debugger engines: a faulting instruction the engine resumes by
itself is copied into a slot followed by code that sets AC again and jumps back, so a traced
fault costs one debugger stop instead of two (the SIGBUS, then the TF trap). The profile in
docs/PERFORMANCE.md found gdb's own handling of the second stop to be about half the cost.

Slots live in the slack after the last executable ELF segment in the last page of a long-lived
module's executable mapping: mapped and executable, never run, and writable by a debugger
without an inferior function call (which gdb 13 cannot make on these machines: "Couldn't write
extended state status"). Instructions that move control, repeat (one `rep` element per trap is
how k misaligned elements count k) or address relative to RIP take the TF path instead."""
from __future__ import annotations

import struct
from collections.abc import Callable

from ..core.target import Target
from ..isa import arch as archmod
from ..isa.decode import Insn
from ..lazyclass import dataclass
from ..symbols.elfindex import elf_index
from ..symbols.maps import ModuleMap, is_loader_path
from .faultpath import FaultPath

WriteMemory = Callable[[int, bytes], None]

# Runs before the copied instruction and clears AC, so the debugger writes only the PC (every
# register write is a full register store in gdb). The red zone below rsp belongs to the program:
# step over it. With AC still set, pushfq faults only when rsp itself is misaligned: a fault at
# the slot's first instructions is resumed by clearing AC from the debugger instead.
HEAD = (
    bytes.fromhex("488da42480ffffff")  # lea rsp, [rsp - 0x80]
    + b"\x9c"  # pushfq
    + bytes.fromhex("812424fffffbff")  # and dword ptr [rsp], ~0x40000
    + b"\x9d"  # popfq: AC is clear from here on
    + bytes.fromhex("488da42480000000")  # lea rsp, [rsp + 0x80]
)
# Runs with AC clear after the copied instruction and sets AC again.
TAIL = (
    bytes.fromhex("488da42480ffffff")  # lea rsp, [rsp - 0x80]
    + b"\x9c"  # pushfq
    + bytes.fromhex("810c2400000400")  # or dword ptr [rsp], 0x40000  (EFLAGS.AC)
    + b"\x9d"  # popfq: AC is set from here on
    + bytes.fromhex("488da42480000000")  # lea rsp, [rsp + 0x80]
)
# Offsets into HEAD and TAIL (same shape) and how far rsp is below the program's value there.
_RSP_BELOW = ((0, 0), (8, 0x80), (9, 0x88), (16, 0x88), (17, 0x80), (25, 0))
JMP_ABS = bytes.fromhex("ff2500000000")  # jmp qword ptr [rip + 0]; the target follows


def eligible(insn: Insn) -> bool:
    return (bool(insn.raw) and insn.flow == "next" and not insn.rep
            and not any(op.base == "rip" for op in insn.operands))


@dataclass(frozen=True)
class Slot:
    start: int
    pc: int  # the original instruction
    size: int  # the copied instruction's length
    resume: int  # where the jump goes back to
    end: int  # first byte after the slot

    @property
    def insn(self) -> int:
        return self.start + len(HEAD)

    @property
    def tail(self) -> int:
        return self.insn + self.size

    def in_head(self, pc: int) -> bool:
        return self.start <= pc < self.insn

    def unwind(self, pc: int, rsp: int) -> tuple[int, int]:
        """For a thread stopped inside the slot: the (pc, rsp) it would have at the original
        code with the slot's own work undone or finished (for disarming and detaching)."""
        if pc < self.insn:
            return self.pc, rsp + _below(pc - self.start)
        if pc < self.tail:
            return self.pc, rsp
        return self.resume, rsp + _below(pc - self.tail)


def _below(off: int) -> int:
    below = 0
    for start, depth in _RSP_BELOW:
        if off >= start:
            below = depth
    return below


def build(insn: Insn, at: int) -> bytes:
    code = HEAD + insn.raw + TAIL
    # The jump reads its 8-byte target with AC set: it must be 8-aligned.
    pad = (-(at + len(code) + len(JMP_ABS))) % 8
    return code + b"\x90" * pad + JMP_ABS + struct.pack("<Q", insn.pc + insn.size)


class SlotPool:
    """Slots of one process image, one per faulting PC, written once and reused."""

    def __init__(self) -> None:
        self.regions: list[list[int]] | None = None  # [next free, end]
        self.by_pc: dict[int, Slot] = {}
        self.spans: list[tuple[int, int]] = []  # the regions handed out, to know a slot's PC

    def find_regions(self, mm: ModuleMap) -> None:
        self.regions = []
        for module in mm.modules:
            # Only modules that live as long as the process: the program, the loader, libc.
            if not (mm.main is not None and module.path == mm.main.path or is_loader_path(module.path)
                    or module.name.startswith("libc.so")):
                continue
            index = elf_index(module.path)
            if index is None:
                continue
            for seg in index.segments:
                if not seg.executable:
                    continue
                end = module.base + seg.vaddr + seg.memsz
                mapping = mm.mapping_at(end - 1)
                if mapping is None or not mapping.executable:
                    continue
                start = (end + 15) & ~15
                if mapping.end - start >= 96:
                    self.regions.append([start, mapping.end])
                    self.spans.append((start, mapping.end))

    def slot_for(self, insn: Insn, write: WriteMemory) -> Slot | None:
        slot = self.by_pc.get(insn.pc)
        if slot is not None:
            return slot
        if self.regions is None or not eligible(insn):
            return None
        for region in self.regions:
            code = build(insn, region[0])
            if region[0] + len(code) <= region[1]:
                write(region[0], code)
                slot = Slot(region[0], insn.pc, insn.size, insn.pc + insn.size, region[0] + len(code))
                self.by_pc[insn.pc] = slot
                region[0] = (region[0] + len(code) + 15) & ~15
                return slot
        return None

    def covers(self, pc: int) -> bool:
        return any(start <= pc < end for start, end in self.spans)

    def locate(self, pc: int) -> Slot | None:
        for slot in self.by_pc.values():
            if slot.start <= pc < slot.end:
                return slot
        return None

    def reset(self) -> None:
        self.regions = None
        self.by_pc.clear()
        self.spans.clear()


class OutOfLine:
    """The trap engine's slots in one process image: where a fault the engine resumes by itself
    runs instead, and how a thread stopped inside one goes back to the program's code."""

    def __init__(self, faults: FaultPath) -> None:
        self.faults = faults
        self.pool = SlotPool()

    def in_head(self, pc: int) -> bool:
        """Whether `pc` is in the head of a slot (before the copied instruction)."""
        if not (self.pool.spans and self.pool.covers(pc)):
            return False
        slot = self.pool.locate(pc)
        return slot is not None and slot.in_head(pc)

    def slot_for(self, target: Target, arch: archmod.ArchInfo, tid: int, write_memory: WriteMemory) -> Slot | None:
        """The slot of the faulting instruction of `tid` (written at its first fault), or None
        where it cannot have one."""
        pool = self.pool
        if pool.regions is None:
            mm = self.faults.image.module_map(target)
            if mm is None:
                return None
            pool.find_regions(mm)
        insn = self.faults.insn_at(target, arch, target.read_register(arch.pc, tid))
        return pool.slot_for(insn, write_memory) if insn is not None else None

    def leave(self, target: Target, arch: archmod.ArchInfo) -> None:
        """Move threads stopped inside a slot back to the program's own code, with the slot's
        work undone or finished, so nothing sets AC after a disarm."""
        if not self.pool.by_pc:
            return
        for tid in target.threads():
            pc = target.read_register(arch.pc, tid)
            slot = self.pool.locate(pc)
            if slot is not None:
                new_pc, new_sp = slot.unwind(pc, target.read_register(arch.sp, tid))
                target.write_register(arch.sp, new_sp, tid)
                target.write_register(arch.pc, new_pc, tid)

    def reset(self) -> None:
        self.pool.reset()
