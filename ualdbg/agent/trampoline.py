"""Where a thread stopped inside one of the agent's patch trampolines (patch.c) is in the
program: the original instruction the trampoline stands for, and the program's stack pointer
there, read from the trampoline slot's header as patch.c's patch_fault_context reads it. What a
debugger's unwinder needs to show the program's frames under a trampoline (adapters/gdb: after
a Ctrl-C, a thread in patched code showed `?? ()` and a backtrace of garbage)."""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable

from ..lazyclass import dataclass

# patch.c's layout: a slot is a header of HDR_SIZE bytes, then the code; at most SLOT_MAX bytes.
HDR_SIZE = 1024
SLOT_MAX = 8 << 10
MAX_WIN = 8
_HEAD = struct.Struct("<QHBBB3x32s")  # origin, size, nins, wlen, nctx, pad, orig[32]
_PINS = struct.Struct("<QHHHHBBBBI")  # cell, block, copy_a, copy_b, mask_off, from, len, size, pad, entry
_PCTX = struct.Struct("<HBb")  # lo, ins_kind, adj8
_CTX_AT = _HEAD.size + MAX_WIN * _PINS.size
_HEADER_BYTES = _CTX_AT + 128 * _PCTX.size
assert _HEADER_BYTES <= HDR_SIZE
CX_PROG, CX_SAVED, CX_FRAME, CX_FRAME_REGS, CX_OUT, CX_FRAME_OUT, CX_SAVED16 = range(1, 8)
FS_NONE = 0
RED_ZONE = 128


@dataclass(frozen=True)
class Slot:
    at: int  # the header's address
    origin: int  # the window's first byte in the program
    size: int
    froms: tuple[int, ...]  # each instruction's offset in the window
    blocks: tuple[int, ...]
    copies: tuple[tuple[int, int], ...]  # each instruction's (copy_a, copy_b)
    ctx: tuple[tuple[int, int, int], ...]  # (lo, ins_kind, adj8)

    def holds(self, pc: int) -> bool:
        return self.at + HDR_SIZE <= pc < self.at + self.size


def _parse(at: int, raw: bytes) -> Slot | None:
    origin, size, nins, _wlen, nctx, _orig = _HEAD.unpack_from(raw, 0)
    if not origin or not HDR_SIZE < size <= SLOT_MAX or not 0 < nins <= MAX_WIN or nctx > 128:
        return None
    pins = [_PINS.unpack_from(raw, _HEAD.size + i * _PINS.size) for i in range(nins)]
    ctx = tuple(_PCTX.unpack_from(raw, _CTX_AT + i * _PCTX.size) for i in range(nctx))
    return Slot(at, origin, size, tuple(p[5] for p in pins), tuple(p[1] for p in pins),
                tuple((p[2], p[3]) for p in pins), ctx)


def pushed_since(code: bytes, at: int) -> int | None:
    """Bytes the straight-line code pushed onto the stack (pops, and `lea rsp, [rsp+n]`, take
    them off); None when an instruction moves rsp otherwise."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    moved = 0
    end = at + len(code)
    for address, size, mnemonic, ops in md.disasm_lite(code, at):
        if mnemonic in ("push", "pushfq", "pushf"):
            moved += 8
        elif mnemonic in ("pop", "popfq", "popf"):
            moved -= 8
        elif ops.startswith("rsp,") or ops == "rsp":
            m = re.fullmatch(r"rsp, (?:qword ptr )?\[rsp ([+-]) (0x[0-9a-f]+|\d+)\]", ops) if mnemonic == "lea" else None
            if m is None:
                return None
            moved -= int(m.group(2), 0) * (1 if m.group(1) == "+" else -1)
        if address + size >= end:
            break
    return moved


class Trampolines:
    """The slots of one process's patched sites, found from the patch table's trampoline
    addresses (each one a block of code inside its slot: the header is on a 64-byte boundary
    before it, and names that block)."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self.read = read
        self.slots: dict[int, Slot] = {}  # by trampoline address
        self.missing: set[int] = set()

    def learn(self, trampolines: Iterable[int]) -> None:
        for t in trampolines:
            if t and t not in self.slots and t not in self.missing:
                slot = self._find(t)
                if slot is None:
                    self.missing.add(t)
                else:
                    self.slots[t] = slot

    def _find(self, t: int) -> Slot | None:
        for back in range(HDR_SIZE, SLOT_MAX, 64):
            at = t - back
            try:
                raw = self.read(at, _HEADER_BYTES)
            except (OSError, RuntimeError, ValueError):
                continue
            slot = _parse(at, raw)
            if slot is not None and back in slot.blocks and slot.holds(t):
                return slot
        return None

    def slot_of(self, pc: int) -> Slot | None:
        return next((s for s in self.slots.values() if s.holds(pc)), None)

    def context(self, pc: int, rsp: int) -> tuple[int, int] | None:
        """(the original instruction's address, the program's rsp there) for a thread at `pc`
        with `rsp`, or None when `pc` is in no known trampoline (or its frame cannot be read)."""
        slot = self.slot_of(pc)
        if slot is None:
            return None
        off = pc - slot.at
        for i, (copy_a, copy_b) in enumerate(slot.copies):
            if off in (copy_a, copy_b) and off:
                return slot.origin + slot.froms[i], rsp  # running the copy: the program's registers
        entry = None
        for lo, kind, adj8 in slot.ctx:
            if lo > off:
                break
            entry = (lo, kind, adj8)
        if entry is None:
            return None
        lo, kind, adj8 = entry
        # The table is exact where the trampoline may raise a signal (what patch.c needs), not
        # between: a push or a pushfq since `lo` moved rsp (a Ctrl-C can land anywhere).
        try:
            moved = pushed_since(self.read(slot.at + lo, off - lo), slot.at + lo) if off > lo else 0
        except (OSError, RuntimeError, ValueError):
            return None
        if moved is None:
            return None
        rsp += moved
        i = kind >> 4
        if i >= len(slot.froms):
            return None
        depth = 24 if adj8 == FS_NONE else 32

        def word(addr: int) -> int:
            return int(struct.unpack("<Q", self.read(addr, 8))[0])

        try:
            k = kind & 15
            if k == CX_PROG:
                sp = rsp + adj8 * 8
            elif k == CX_SAVED:
                sp = rsp + depth + RED_ZONE
            elif k in (CX_FRAME, CX_FRAME_REGS):
                sp = word(rsp + 32) + depth + RED_ZONE
            elif k == CX_SAVED16:
                sp = rsp + 8 + depth + RED_ZONE
            elif k == CX_OUT:
                sp = rsp + 16 + RED_ZONE
            elif k == CX_FRAME_OUT:
                sp = word(rsp + 48) + depth + RED_ZONE
            else:
                return None
        except (OSError, RuntimeError, ValueError, struct.error):
            return None
        return slot.origin + slot.froms[i], sp & (2**64 - 1)
