"""A module's frames unwound to their callers' (FrameRules): the CFA rule at one PC from the one
FDE that covers it, found by .eh_frame_hdr's binary search table (what the linker writes for the
unwinder), instead of pyelftools parsing every FDE of .eh_frame (2.5 s for CPython's 5,600); every
FDE only when the file has no such table."""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Mapping
from contextlib import suppress
from functools import cached_property
from typing import Any

from elftools.dwarf.callframe import FDE, CallFrameInfo
from elftools.elf.elffile import ELFFile

from ualdbg.symbols.dwarfindex import DWARF_ERRORS, dwarf_info
from ualdbg.symbols.intervals import IntervalTable
from ualdbg.symbols.layout import X86_64_REGS, Unreadable, dwarf_reg

_DATAREL_SDATA4 = 0x3B  # DW_EH_PE_datarel | DW_EH_PE_sdata4: the table's encoding (GNU ld, lld, gold)
_SIZES = {0x02: 2, 0x03: 4, 0x04: 8, 0x0A: 2, 0x0B: 4, 0x0C: 8}  # udata2/4/8, sdata2/4/8
_MAX_ROWS = 100_000  # rows of one FDE: a real one has tens
_CALLEE_SAVED = ("rbx", "rbp", "r12", "r13", "r14", "r15")


def rule_rows(entry: Any) -> list[tuple[int, int, Any]]:
    """An FDE's rows as (pc, end, (CFA register, CFA offset, {register: saved at CFA + n})); rows
    whose CFA is an expression are left out (the unwinder here reads register + offset only)."""
    start, length = entry["initial_location"], entry["address_range"]
    rows = entry.get_decoded().table
    items = []
    for i, row in enumerate(rows[:_MAX_ROWS]):
        end = rows[i + 1]["pc"] if i + 1 < len(rows) else start + length
        cfa = row["cfa"]
        if cfa.expr is None:
            saved = {r: rule.arg for r, rule in row.items() if isinstance(r, int) and getattr(rule, "type", None) == "OFFSET"}
            items.append((row["pc"], end, (cfa.reg, cfa.offset, saved)))
    return items


class EhFrameSearch:
    """.eh_frame_hdr's table of (initial location, FDE address), sorted, and the FDEs it leads
    to, parsed one at a time."""

    def __init__(self, elf: ELFFile) -> None:
        self._elf = elf
        self._rules: dict[int, IntervalTable[Any] | None] = {}

    @cached_property
    def _table(self) -> tuple[list[int], list[int], CallFrameInfo] | None:
        try:
            hdr = self._elf.get_section_by_name(".eh_frame_hdr")
            info = dwarf_info(self._elf)
            eh = info.eh_frame_sec
            if hdr is None or eh is None or not self._elf.little_endian:
                return None
            data = hdr.data()
            if len(data) < 4 or data[0] != 1 or data[3] != _DATAREL_SDATA4:
                return None
            ptr_size, count_size = _SIZES.get(data[1] & 0x0F), _SIZES.get(data[2] & 0x0F)
            if ptr_size is None or count_size is None:
                return None
            count = int.from_bytes(data[4 + ptr_size:4 + ptr_size + count_size], "little", signed=bool(data[2] & 0x08))
            first = 4 + ptr_size + count_size
            if count <= 0 or first + 8 * count > len(data):
                return None
            base = hdr["sh_addr"]
            pairs = struct.unpack_from(f"<{2 * count}i", data, first)
            locations = [base + v for v in pairs[0::2]]
            fdes = [base + v for v in pairs[1::2]]
            if any(a > b for a, b in zip(locations, locations[1:])):
                return None  # not sorted: not a search table
            cfi = CallFrameInfo(stream=eh.stream, size=eh.size, address=eh.address, base_structs=info.structs,
                                for_eh_frame=True)
            return locations, [f - eh.address for f in fdes], cfi
        except DWARF_ERRORS:
            return None

    @property
    def available(self) -> bool:
        return self._table is not None

    def function_start(self, pc: int) -> int | None:
        """The first PC of the FDE at or before `pc` (a function's start, as far as the table
        knows: isa/syscall_sites.find_sites decodes from there); None without a table."""
        table = self._table
        if table is None:
            return None
        i = bisect_right(table[0], pc) - 1
        return table[0][i] if i >= 0 else None

    def rules_at(self, pc: int) -> IntervalTable[Any] | None:
        """The rows of the FDE whose range holds `pc` (an empty table: none does)."""
        table = self._table
        if table is None:
            return None
        locations, offsets, cfi = table
        i = bisect_right(locations, pc) - 1
        if i < 0:
            return IntervalTable([])
        if i not in self._rules:
            try:
                # pyelftools reads one entry only privately (tests/unit/test_no_private_reach.py, THIRD_PARTY)
                entry = cfi._parse_entry_at(offsets[i])  # one FDE (and its CIE), not all of them
                ok = isinstance(entry, FDE)
                self._rules[i] = IntervalTable(rule_rows(entry)) if ok else IntervalTable([])
            except DWARF_ERRORS:
                self._rules[i] = None
        return self._rules[i]


class FrameRules:
    """The CFA rules of one module (link-time PCs): the caller's registers and the CFA at a PC."""

    def __init__(self, elf: ELFFile) -> None:
        self._elf = elf

    @cached_property
    def every_rule(self) -> IntervalTable[Any]:
        """CFA rules of every FDE of .eh_frame (or .debug_frame): link-time PC -> (register,
        offset, saved registers). What `rule_at` falls back to, and what it is checked against
        (tests/symbols/datadiff.py)."""
        items: list[tuple[int, int, Any]] = []
        try:
            info = dwarf_info(self._elf)
            entries = info.EH_CFI_entries() if info.has_EH_CFI() else (info.CFI_entries() if info.has_CFI() else [])
            for entry in entries:
                if type(entry).__name__ != "FDE":
                    continue
                # An FDE pyelftools cannot decode costs its own rows, not those after it (fmtlib
                # at -O0 has one whose instruction pyelftools fails to name: 130 of 1,645 FDEs
                # were read).
                with suppress(*DWARF_ERRORS):
                    items.extend(rule_rows(entry))
        except DWARF_ERRORS:
            pass
        return IntervalTable(items)

    @cached_property
    def _search(self) -> EhFrameSearch:
        return EhFrameSearch(self._elf)

    def rule_at(self, pc: int) -> Any:
        """The CFA rule at a link-time PC: from the one FDE .eh_frame_hdr leads to, else from
        the table of every FDE."""
        rules = self._search.rules_at(pc)
        return (rules if rules is not None else self.every_rule).find(pc)

    def unwind(self, pc: int, regs: Mapping[str, int], read_memory: Callable[[int, int], bytes]) -> dict[str, int] | None:
        """The caller's registers from the CFI row at a link-time PC: rsp = CFA, rip = the return
        address, the callee-saved registers the row says were saved; the caller-saved ones are
        unknown in the caller (left out, so no location is computed from them)."""
        rule = self.rule_at(pc)
        if rule is None:
            return None
        try:
            cfa = dwarf_reg(regs, rule[0]) + rule[1]
            out = {name: regs[name] for name in _CALLEE_SAVED if name in regs}
            for reg, off in rule[2].items():
                value = int.from_bytes(read_memory(cfa + off, 8), "little")
                if reg == 16:
                    out["rip"] = value
                elif reg < len(X86_64_REGS):
                    out[X86_64_REGS[reg]] = value
        except Exception:  # a register or the stack cannot be read: no caller frame
            return None
        out["rsp"] = cfa
        return out if out.get("rip") else None

    def cfa(self, pc: int, regs: Mapping[str, int]) -> int | None:
        rule = self.rule_at(pc)
        if rule is None:
            return None
        try:
            return dwarf_reg(regs, rule[0]) + rule[1]
        except Unreadable:
            return None
