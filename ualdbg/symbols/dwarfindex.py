"""DWARF of one ELF file, read lazily one compile unit at a time: which unit covers an address,
the line-table row `addr2line` prints for it, and the function instances (out-of-line and
inlined) that contain it. Addresses are link-time addresses."""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct import ConstructError
from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.dwarfinfo import DWARFInfo
from elftools.dwarf.lineprogram import LineProgram
from elftools.dwarf.ranges import BaseAddressEntry, RangeEntry

from ualdbg.symbols.intervals import IntervalTable

# pyelftools raises these (and plain asserts/struct errors) on DWARF it does not understand.
# A unit that fails to parse must cost its own line info only, never the whole resolution.
DWARF_ERRORS: tuple[type[BaseException], ...] = (
    ELFError,
    DWARFError,
    ConstructError,
    struct.error,
    AssertionError,
    KeyError,
    IndexError,
    ValueError,
    TypeError,
    AttributeError,
    NotImplementedError,
    # Found by fuzzing (tests/fuzz): huge sizes or offsets in hostile headers, cyclic references.
    OverflowError,
    RecursionError,
    EOFError,
    ZeroDivisionError,
    MemoryError,
)

_SCOPE_CONTAINERS = frozenset({"DW_TAG_lexical_block", "DW_TAG_try_block", "DW_TAG_catch_block"})
# Places where out-of-line definitions can sit besides the unit's top level. Type DIEs are
# not entered: their subtrees are large and gcc puts member-function bodies at top level.
_DEFINITION_CONTAINERS = frozenset({"DW_TAG_namespace", "DW_TAG_module"})


# Languages whose DW_AT_name is the symbol name (binutils' mangle_style() == 0): C, Cobol,
# Fortran 77, Pascal, PL/I, UPC, assembler. For the others (C++, Fortran 90+, Ada, ...) a
# function known only by DW_AT_name is shown by the ELF symbol at its entry, as addr2line
# does: a Fortran main program `p` is `MAIN__`.
_PLAIN_LANGUAGES = frozenset(
    {0x01, 0x02, 0x05, 0x06, 0x07, 0x09, 0x0C, 0x0F, 0x12, 0x1D, 0x2C, 0x8001}
)


@dataclass(frozen=True)
class SourcePos:
    """A file:line as a user reads it, plus the absolute path to open the source with."""

    file: str  # relative to the unit's comp_dir when the file lies under it, else absolute
    path: str  # absolute when the unit records enough to make it so
    line: int


@dataclass(frozen=True)
class ScopeFrame:
    """One function instance that covers an address, out-of-line or inlined."""

    function: str
    entry: int  # start of this instance's address range that contains the address
    call: SourcePos | None  # where an inlined instance was inlined; None when out-of-line


@dataclass(frozen=True)
class _Node:
    name: str
    ranges: tuple[tuple[int, int], ...]
    parent: int | None  # index of the enclosing function instance in the unit's node list
    call: SourcePos | None


class _Sequence:
    """One line-table sequence: rows sorted by address, the last row closing the sequence."""

    __slots__ = ("addrs", "rows")

    def __init__(self, addrs: list[int], rows: list[tuple[int, int]]) -> None:
        self.addrs = addrs
        self.rows = rows  # (file index, line), parallel to addrs; the end row included

    def row_at(self, addr: int) -> tuple[int, int] | None:
        i = bisect_right(self.addrs, addr) - 1
        # The last row is the end_sequence marker: it closes the range, it describes nothing.
        if i < 0 or i >= len(self.addrs) - 1:
            return None
        return self.rows[i]


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def _display_path(path: str, comp_dir: str | None) -> str:
    if comp_dir:
        root = os.path.normpath(comp_dir)
        if root != "/" and path.startswith(root + "/"):
            return path[len(root) + 1 :]
    return path


def die_name(die: DIE) -> tuple[str | None, bool]:
    """The name `addr2line -f` prints and whether it is a linkage name: the linkage name when
    any DIE along the abstract_origin/specification chain has one, else the first DW_AT_name."""
    name: str | None = None
    current: DIE | None = die
    for _ in range(8):  # chains are 1-3 long; the bound guards against reference cycles
        if current is None:
            break
        attrs = current.attributes
        for key in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name"):
            if key in attrs:
                return _text(attrs[key].value), True
        if name is None and "DW_AT_name" in attrs:
            name = _text(attrs["DW_AT_name"].value)
        ref = next(
            (k for k in ("DW_AT_abstract_origin", "DW_AT_specification") if k in attrs), None
        )
        if ref is None:
            break
        current = current.get_DIE_from_attribute(ref)
    return name, False


# Parents whose names qualify a function's, as gdb builds `ns::Klass::method` (its
# determine_prefix): namespaces, classes, structs, unions, Fortran modules.
_NAME_SCOPES = frozenset({"DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type", "DW_TAG_union_type",
                          "DW_TAG_interface_type", "DW_TAG_module"})


def _scope_label(die: DIE) -> str:
    if "DW_AT_name" in die.attributes:
        return _text(die.attributes["DW_AT_name"].value)
    kind = str(die.tag).removeprefix("DW_TAG_").replace("_type", "")
    return "(anonymous namespace)" if kind == "namespace" else f"(anonymous {kind})"


def qualified_die_name(die: DIE) -> str | None:
    """The name gdb gives a function DIE: its DW_AT_name (found along the abstract_origin/
    specification chain, as die_name looks) qualified by the namespaces and classes around
    the DIE of that chain that sits in one: `ns::Klass::method`, `ns::twice<int>` (gcc and
    clang put a template's arguments in DW_AT_name). A C function's is its plain name."""
    name: str | None = None
    scope: DIE | None = None
    current: DIE | None = die
    for _ in range(8):  # as in die_name: a bound against reference cycles
        if current is None:
            break
        attrs = current.attributes
        if name is None and "DW_AT_name" in attrs:
            name = _text(attrs["DW_AT_name"].value)
        if scope is None:
            parent = current.get_parent()
            if parent is not None and parent.tag in _NAME_SCOPES:
                scope = parent
        ref = next((k for k in ("DW_AT_abstract_origin", "DW_AT_specification") if k in attrs), None)
        if ref is None:
            break
        current = current.get_DIE_from_attribute(ref)
    if name is None:
        return None
    parts = [name]
    for _ in range(64):
        if scope is None or scope.tag not in _NAME_SCOPES:
            break
        parts.append(_scope_label(scope))
        scope = scope.get_parent()
    return "::".join(reversed(parts))


class _Unit:
    """Everything one compile unit says about addresses, parsed on first use."""

    def __init__(self, owner: DwarfIndex, cu: CompileUnit) -> None:
        self._owner = owner
        self._cu = cu
        self._top = cu.get_top_DIE()
        attrs = self._top.attributes
        self.comp_dir = _text(attrs["DW_AT_comp_dir"].value) if "DW_AT_comp_dir" in attrs else None
        language = attrs["DW_AT_language"].value if "DW_AT_language" in attrs else None
        self._plain_names = language in _PLAIN_LANGUAGES
        self._files: dict[int, tuple[str, str] | None] = {}
        self._pos_cache: dict[tuple[int, int], SourcePos | None] = {}

    @cached_property
    def _program(self) -> LineProgram | None:
        try:
            return self._owner.dwarfinfo.line_program_for_CU(self._cu)
        except DWARF_ERRORS:
            return None

    def _file(self, index: int) -> tuple[str, str] | None:
        """(display path, absolute path) of a line-table file index, as binutils builds it."""
        if index in self._files:
            return self._files[index]
        result: tuple[str, str] | None = None
        program = self._program
        if program is not None:
            files = program["file_entry"]
            dirs = program["include_directory"]
            # The line table has its own version: a DWARF 5 unit can carry a version 4 table
            # (the assembler's, e.g. hppa's gas), which numbers from 1.
            v5 = program.header["version"] >= 5
            comp_dir = self.comp_dir
            if comp_dir is None and v5 and dirs:
                comp_dir = _text(dirs[0])
            # DWARF 5 numbers files and directories from 0; before it from 1, 0 meaning
            # "unknown file" and "the compilation directory" respectively.
            slot = index if v5 else index - 1
            if 0 <= slot < len(files):
                entry = files[slot]
                name = _text(entry.name)
                if os.path.isabs(name):
                    path = name
                else:
                    d = entry.dir_index if v5 else entry.dir_index - 1
                    sub = _text(dirs[d]) if 0 <= d < len(dirs) else None
                    if sub and os.path.isabs(sub):
                        path = os.path.join(sub, name)
                    elif comp_dir:
                        path = (
                            os.path.join(comp_dir, sub, name)
                            if sub
                            else os.path.join(comp_dir, name)
                        )
                    else:
                        path = os.path.join(sub, name) if sub else name
                path = os.path.normpath(path)
                result = (_display_path(path, comp_dir), path)
        self._files[index] = result
        return result

    def pos(self, file_index: int, line: int) -> SourcePos | None:
        key = (file_index, line)
        if key not in self._pos_cache:
            names = self._file(file_index)
            self._pos_cache[key] = None if names is None else SourcePos(names[0], names[1], line)
        return self._pos_cache[key]

    @cached_property
    def sequences(self) -> IntervalTable[_Sequence]:
        program = self._program
        if program is None:
            return IntervalTable(())
        found: list[tuple[int, int, int, _Sequence]] = []
        addrs: list[int] = []
        rows: list[tuple[int, int]] = []
        stmt: list[bool] = []
        try:
            entries = program.get_entries()
        except DWARF_ERRORS:
            entries = []  # an undecodable program: no lines for this unit, but no retries
        for entry in entries:
            state = entry.state
            if state is None:
                continue
            if state.end_sequence:
                if addrs:
                    addrs.append(state.address)
                    rows.append((0, 0))
                    found.append(
                        (min(addrs[:-1]), state.address, len(found), self._sorted(addrs, rows))
                    )
                addrs, rows, stmt = [], [], []
                continue
            # The file register starts at 1 in every sequence, in every DWARF version (DWARF 5,
            # 6.2.2, table 6.4), as gdb and objdump's decoded table have it; binutils' addr2line
            # starts DWARF 5 sequences on file 0, which names the unit's own file for the rows
            # of a header before the first DW_LNS_set_file (issue 18).
            row = (state.file, state.line)
            # Of several rows at one address (an inlined call starts at its caller's statement,
            # DWARF 5 views) gdb keeps the last is_stmt one (find_pc_sect_line), else the last.
            if addrs and addrs[-1] == state.address:
                if state.is_stmt or not stmt[-1]:
                    rows[-1], stmt[-1] = row, bool(state.is_stmt)
            else:
                addrs.append(state.address)
                rows.append(row)
                stmt.append(bool(state.is_stmt))
        return IntervalTable(self._trim(found))

    @staticmethod
    def _sorted(addrs: list[int], rows: list[tuple[int, int]]) -> _Sequence:
        body = list(zip(addrs[:-1], rows[:-1]))
        if any(body[i][0] > body[i + 1][0] for i in range(len(body) - 1)):
            body.sort(key=lambda r: r[0])
        return _Sequence([a for a, _ in body] + [addrs[-1]], [r for _, r in body] + [rows[-1]])

    @staticmethod
    def _trim(
        found: list[tuple[int, int, int, _Sequence]],
    ) -> Iterator[tuple[int, int, _Sequence]]:
        # binutils sorts sequences by start (longest first), drops the ones nested in an
        # earlier one and starts an overlapping one where the previous ends; lookups then
        # agree with addr2line when the linker left overlapping sequences (gc'd sections).
        found.sort(key=lambda s: (s[0], -s[1], s[2]))
        high = -1
        for low, end, _, seq in found:
            if low < high:
                if end <= high:
                    continue
                low = high
            high = end
            yield low, end, seq

    def line_at(self, addr: int) -> SourcePos | None:
        seq = self.sequences.find(addr)
        if seq is None:
            return None
        row = seq.row_at(addr)
        if row is None:
            return None
        return self.pos(row[0], row[1])

    @cached_property
    def _scopes(self) -> tuple[list[_Node], IntervalTable[int]]:
        nodes: list[_Node] = []
        intervals: list[tuple[int, int, int, int]] = []
        # On a DIE pyelftools cannot read, keep the functions read before it: the unit is
        # walked once, never again per lookup.
        with suppress(*DWARF_ERRORS):
            self._walk(self._top, None, 0, nodes, intervals)
        return nodes, IntervalTable(self._segments(intervals))

    def _walk(
        self,
        die: DIE,
        parent: int | None,
        depth: int,
        nodes: list[_Node],
        intervals: list[tuple[int, int, int, int]],
    ) -> None:
        for child in die.iter_children():
            tag = child.tag
            if tag == "DW_TAG_subprogram" or (
                tag == "DW_TAG_inlined_subroutine" and parent is not None
            ):
                ranges = self._owner.die_ranges(child, self._cu)
                if not ranges:
                    continue  # abstract instance or declaration: no code of its own
                inlined = tag == "DW_TAG_inlined_subroutine"
                call = None
                if inlined:
                    attrs = child.attributes
                    call_file = (
                        attrs["DW_AT_call_file"].value if "DW_AT_call_file" in attrs else None
                    )
                    call_line = attrs["DW_AT_call_line"].value if "DW_AT_call_line" in attrs else 0
                    if call_file is not None:
                        call = self.pos(call_file, call_line)
                name, linkage = self._owner.name_of(child)
                if not inlined and (name is None or (not linkage and not self._plain_names)):
                    # Only out-of-line instances: binutils renames inlined ones too, but
                    # statefully (it depends on which addresses were looked up before), and
                    # an inlined Fortran `inner` shown as its caller's symbol misleads.
                    name = self._owner.symbol_name_at(ranges[0][0]) or name
                node = len(nodes)
                nodes.append(
                    _Node(
                        name=name or "??",
                        ranges=tuple(ranges),
                        # A subprogram nested in another (Fortran contained procedures, GNU C
                        # nested functions) is a function of its own, not a frame of its parent.
                        parent=parent if inlined else None,
                        call=call,
                    )
                )
                level = depth + 1 if inlined else 0
                intervals.extend((lo, hi, level, node) for lo, hi in ranges)
                self._walk(child, node, level, nodes, intervals)
            elif (tag in _SCOPE_CONTAINERS and parent is not None) or tag in _DEFINITION_CONTAINERS:
                self._walk(child, parent, depth, nodes, intervals)

    @staticmethod
    def _segments(intervals: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
        """Flatten nested function-instance ranges into disjoint pieces, each labelled with the
        innermost instance covering it, so a lookup is one bisection."""
        intervals.sort(key=lambda r: (r[0], -r[1], r[2], r[3]))
        out: list[tuple[int, int, int]] = []
        stack: list[tuple[int, int]] = []  # (end, node), innermost last
        pos = 0
        for lo, hi, _, node in intervals:
            while stack and stack[-1][0] <= lo:
                end, top = stack.pop()
                if pos < end:
                    out.append((pos, end, top))
                pos = max(pos, end)
            if stack:
                if pos < lo:
                    out.append((pos, lo, stack[-1][1]))
                # A child reaching past its parent is malformed; clamp it to the parent.
                hi = min(hi, stack[-1][0])
            stack.append((hi, node))
            pos = lo
        while stack:
            end, top = stack.pop()
            if pos < end:
                out.append((pos, end, top))
            pos = max(pos, end)
        return out

    def frames_at(self, addr: int) -> tuple[ScopeFrame, ...]:
        nodes, table = self._scopes
        index = table.find(addr)
        frames: list[ScopeFrame] = []
        while index is not None:
            node = nodes[index]
            entry = next((lo for lo, hi in node.ranges if lo <= addr < hi), node.ranges[0][0])
            frames.append(ScopeFrame(node.name, entry, node.call))
            index = node.parent
        return tuple(frames)


class DwarfIndex:
    """Address lookups into one file's DWARF. Compile units are found through
    .debug_aranges (or their top DIEs) and parsed only when an address falls in them."""

    def __init__(
        self,
        dwarfinfo: DWARFInfo,
        is_code: Callable[[int], bool] | None = None,
        symbol_name_at: Callable[[int], str | None] | None = None,
    ) -> None:
        self.dwarfinfo = dwarfinfo
        # name of the ELF function symbol starting exactly at an address, if any
        self.symbol_name_at = symbol_name_at or (lambda addr: None)
        # Functions the linker discarded keep their DWARF with addresses at or near 0; they
        # would shadow real code in a PIE or shared object, whose first segment starts at 0.
        self._is_code = is_code or (lambda addr: addr != 0)
        self._units: dict[int, _Unit | None] = {}
        self._names: dict[int, tuple[str | None, bool]] = {}
        self._qualified: dict[int, str | None] = {}
        self._rest: IntervalTable[int] | None = None

    # -- ranges and names shared by the units ---------------------------------------------

    def die_ranges(self, die: DIE, cu: CompileUnit) -> list[tuple[int, int]]:
        attrs = die.attributes
        out: list[tuple[int, int]] = []
        if "DW_AT_ranges" in attrs:
            lists = self.dwarfinfo.range_lists()
            if lists is None:
                return out
            top = cu.get_top_DIE().attributes
            base = top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0
            for entry in lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=cu):
                if isinstance(entry, BaseAddressEntry):
                    base = entry.base_address
                elif isinstance(entry, RangeEntry):
                    lo, hi = entry.begin_offset, entry.end_offset
                    if not entry.is_absolute:
                        lo, hi = lo + base, hi + base
                    out.append((lo, hi))
        elif "DW_AT_low_pc" in attrs:
            lo = attrs["DW_AT_low_pc"].value
            high = attrs.get("DW_AT_high_pc")
            if high is None:
                hi = lo + 1
            elif high.form in (
                "DW_FORM_addr",
                "DW_FORM_addrx",
                "DW_FORM_addrx1",
                "DW_FORM_addrx2",
                "DW_FORM_addrx3",
                "DW_FORM_addrx4",
            ):
                hi = high.value
            else:  # DWARF 4+: a constant class high_pc is a length
                hi = lo + high.value
            out.append((lo, hi))
        return [(lo, hi) for lo, hi in out if lo < hi and self._is_code(lo)]

    def qualified_name_of(self, die: DIE) -> str | None:
        """qualified_die_name, resolved once per abstract origin (as name_of)."""
        origin = die.attributes.get("DW_AT_abstract_origin")
        if origin is None or origin.form == "DW_FORM_ref_addr" or not origin.form.startswith("DW_FORM_ref"):
            return qualified_die_name(die)
        key = origin.value + die.cu.cu_offset
        if key not in self._qualified:
            self._qualified[key] = qualified_die_name(die)
        return self._qualified[key]

    def name_of(self, die: DIE) -> tuple[str | None, bool]:
        # Many inlined instances share one abstract origin: resolve each origin once.
        attrs = die.attributes
        origin = attrs.get("DW_AT_abstract_origin")
        if (
            origin is None
            or origin.form == "DW_FORM_ref_addr"
            or not origin.form.startswith("DW_FORM_ref")
        ):
            return die_name(die)
        key = origin.value + die.cu.cu_offset
        if key not in self._names:
            self._names[key] = die_name(die)
        return self._names[key]

    # -- unit lookup ---------------------------------------------------------------------

    @cached_property
    def _aranges(self) -> tuple[IntervalTable[int], frozenset[int]]:
        items: list[tuple[int, int, int]] = []
        try:
            aranges = self.dwarfinfo.get_aranges()
        except DWARF_ERRORS:
            aranges = None
        if aranges is not None:
            for entry in aranges.entries:
                if entry.length and self._is_code(entry.begin_addr):
                    items.append(
                        (entry.begin_addr, entry.begin_addr + entry.length, entry.info_offset)
                    )
        return IntervalTable(items), frozenset(offset for _, _, offset in items)

    def _rest_table(self) -> IntervalTable[int]:
        """Units .debug_aranges does not list, from their top DIEs; built on the first miss."""
        if self._rest is None:
            covered = self._aranges[1]
            items: list[tuple[int, int, int]] = []
            try:
                for cu in self.dwarfinfo.iter_CUs():
                    if cu.cu_offset in covered:
                        continue
                    try:
                        ranges = self.die_ranges(cu.get_top_DIE(), cu)
                    except DWARF_ERRORS:
                        continue
                    items.extend((lo, hi, cu.cu_offset) for lo, hi in ranges)
            except DWARF_ERRORS:
                pass
            self._rest = IntervalTable(items)
        return self._rest

    def _unit_at(self, addr: int) -> _Unit | None:
        offset = self._aranges[0].find(addr)
        if offset is None:
            offset = self._rest_table().find(addr)
        if offset is None:
            return None
        if offset not in self._units:
            try:
                self._units[offset] = _Unit(self, self.dwarfinfo.get_CU_at(offset))
            except DWARF_ERRORS:
                self._units[offset] = None
        return self._units[offset]

    # -- public lookups -------------------------------------------------------------------

    def line_at(self, addr: int) -> SourcePos | None:
        """The line-table row covering `addr`, as `addr2line -e FILE ADDR` prints it."""
        unit = self._unit_at(addr)
        if unit is None:
            return None
        try:
            return unit.line_at(addr)
        except DWARF_ERRORS:
            return None

    def frames_at(self, addr: int) -> tuple[ScopeFrame, ...]:
        """Function instances covering `addr`, innermost first: inlined helpers, then the
        out-of-line function (as `addr2line -f -i` lists them). Empty without DWARF scopes."""
        unit = self._unit_at(addr)
        if unit is None:
            return ()
        try:
            return unit.frames_at(addr)
        except DWARF_ERRORS:
            return ()
