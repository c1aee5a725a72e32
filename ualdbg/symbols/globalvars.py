"""VA -> the DWARF variable at a fixed address that holds it, reading only the DIEs of the variables
near that address: the candidates are found in .debug_info's bytes (a location that is DW_OP_addr
alone is written `09 03 <address>`), each one's DIE and ancestors through the unit's shape
(dietree.py). The answer is the full walk's (ModuleData.globals): the variable with the greatest
start whose extent holds the VA and, of the variables at one start, the first the walk meets."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from functools import cached_property
from typing import Any

from elftools.dwarf.die import DIE
from elftools.elf.elffile import ELFFile

from ualdbg.symbols.dietree import DieTree
from ualdbg.symbols.dwarfindex import DWARF_ERRORS

from ..lazyclass import dataclass

# A location of DW_FORM_exprloc or DW_FORM_block1 that is DW_OP_addr and nothing else: its length
# (9), the opcode (0x03), the 8-byte address (the only kind the full walk keeps).
_ADDR_LOCATION = re.compile(rb"\x09\x03")
# Tags the full walk does not enter (ModuleData._iter_dies): a variable below one is none of its.
_NOT_ENTERED = frozenset({"DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type",
                          "DW_TAG_enumeration_type"})


@dataclass(frozen=True)
class Found:
    """A variable at a fixed address as the caller's `make` describes it, and its DIE."""

    var: Any  # data.GlobalVar
    die: DIE


class FixedAddressIndex:
    """The DWARF variables at fixed addresses of one file, found one address at a time.

    `make(die, parents)` turns a variable DIE and its ancestors (outermost first, the unit's top
    left out) into the caller's record (None: not a variable at a fixed address); it must have
    `start` and `size`. `floor(addr)` is the lowest start a variable holding `addr` may have (the
    start of its section: a variable does not run from one section into the next)."""

    def __init__(self, tree: DieTree, make: Callable[[DIE, list[DIE]], Any | None],
                 floor: Callable[[int], int]) -> None:
        self.tree = tree
        self._make = make
        self._floor = floor
        self._at: dict[int, Found | None] = {}
        self._found: dict[int, Found | None] = {}
        self._addrs, self._positions = self._scan()

    def _scan(self) -> tuple[list[int], dict[int, list[int]]]:
        data = self.tree.data
        positions: dict[int, list[int]] = {}
        limit = len(data) - 10
        for match in _ADDR_LOCATION.finditer(data):
            pos = match.start()
            if pos > limit:
                break
            addr = int.from_bytes(data[pos + 2:pos + 10], "little")  # as ModuleData reads it
            if addr:
                positions.setdefault(addr, []).append(pos)
        return sorted(positions), positions

    def find(self, addr: int) -> Found | None:
        """The variable holding link-time `addr`, as the full walk's table finds it."""
        if addr in self._found:
            return self._found[addr]
        found = None
        floor = self._floor(addr)
        i = bisect_right(self._addrs, addr) - 1
        while i >= 0 and self._addrs[i] >= floor:
            start = self._addrs[i]
            hit = self.at(start)
            if hit is not None and addr < start + max(hit.var.size, 1):
                found = hit
                break
            i -= 1
        self._found[addr] = found
        return found

    def covered(self, addr: int) -> bool:
        """Whether a DWARF variable holds `addr` (a data symbol there is then not listed)."""
        return self.find(addr) is not None

    def at(self, start: int) -> Found | None:
        """Of the variables starting at `start`, the first the full walk meets."""
        if start in self._at:
            return self._at[start]
        best: tuple[tuple[Any, ...], Found] | None = None
        for pos in self._positions.get(start, ()):
            try:
                hit = self._variable(pos, start)
            except DWARF_ERRORS:
                continue
            if hit is not None and (best is None or hit[0] < best[0]):
                best = hit
        self._at[start] = best[1] if best is not None else None
        return self._at[start]

    def _variable(self, pos: int, start: int) -> tuple[tuple[Any, ...], Found] | None:
        shape = self.tree.shape_at(pos)
        if shape is None:
            return None
        path = shape.path_to(pos)
        if len(path) < 2 or path[-1].tag != "DW_TAG_variable" or any(n.tag in _NOT_ENTERED for n in path[1:-1]):
            return None
        cu = shape.cu
        dies = [cu.get_DIE_from_refaddr(n.offset) for n in path]
        for up, down in zip(dies, dies[1:]):
            down.set_parent(up)  # what get_parent() would search the unit for
        die = dies[-1]
        loc = die.attributes.get("DW_AT_location")
        if loc is None or loc.offset + getattr(loc, "indirection_length", 0) != pos:
            return None  # the bytes are another attribute's
        var = self._make(die, dies[1:-1])
        if var is None or var.start != start:
            return None
        # The full walk's order (ModuleData._iter_dies): units in file order; in a unit, a DIE's
        # children are met when it is popped, and DIEs are popped in pre-order with the children
        # taken last first. So of two parents, an ancestor comes first, else the one further on.
        key = (shape.offset, tuple(-n.offset for n in path[:-1]), path[-1].offset)
        return key, Found(var, die)


class SectionFloor:
    """The lowest start a variable holding an address can have: the start of the section holding
    it (a variable does not run across sections); in a gap, the end of the section below; 0 for a
    file without section headers."""

    def __init__(self, elf: ELFFile) -> None:
        self._elf = elf

    @cached_property
    def _sections(self) -> list[tuple[int, int]]:
        """(start, end) of the sections the program's data is in (allocated; not TLS, whose
        addresses overlap the next section's)."""
        out = []
        try:
            for section in self._elf.iter_sections():
                h = section.header
                if h["sh_flags"] & 0x2 and not h["sh_flags"] & 0x400 and h["sh_addr"] and h["sh_size"]:  # SHF_ALLOC, SHF_TLS
                    out.append((h["sh_addr"], h["sh_addr"] + h["sh_size"]))
        except DWARF_ERRORS:
            return []
        return out

    def __call__(self, addr: int) -> int:
        holding = [start for start, end in self._sections if start <= addr < end]
        if holding:
            return min(holding)
        return max((end for _start, end in self._sections if end <= addr), default=0)


class GlobalsNear:
    """The variable or data symbol at an address, as the table of every DWARF variable and data
    symbol (ModuleData.globals) finds it, from the DWARF variables near it (`fixed`; None: no
    DWARF) and the data symbols (`symbols`: data.GlobalVar, sorted by start) around it."""

    def __init__(self, fixed: FixedAddressIndex | None, symbols: list[Any], floor: Callable[[int], int]) -> None:
        self._fixed = fixed
        self._symbols = symbols
        self._starts = [s.start for s in symbols]
        self._floor = floor
        self._found: dict[int, Any | None] = {}

    def find(self, addr: int) -> Any | None:
        if addr in self._found:
            return self._found[addr]
        floor = self._floor(addr)
        fixed = self._fixed
        hit = fixed.find(addr) if fixed is not None else None
        found = hit.var if hit is not None else None
        symbols, starts = self._symbols, self._starts
        i = bisect_right(starts, addr) - 1
        # The table's answer is the holder with the greatest start: a data symbol above the
        # variable's start wins if no variable holds the symbol's own start.
        while i >= 0 and starts[i] >= floor and (found is None or starts[i] > found.start):
            sym = symbols[i]
            if addr < sym.start + max(sym.size, 1) and (fixed is None or fixed.find(sym.start) is None):
                found = sym
                break
            i -= 1
        self._found[addr] = found
        return found
