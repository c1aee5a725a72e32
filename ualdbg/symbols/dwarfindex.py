"""DWARF of one ELF file, read lazily one compile unit at a time: which unit covers an address,
the line-table row `addr2line` prints for it, and the function instances (out-of-line and
inlined) that contain it. Addresses are link-time addresses."""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import suppress
from functools import cached_property
from typing import Any, Literal, Protocol

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct import ConstructError
from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.dwarfinfo import DWARFInfo
from elftools.dwarf.lineprogram import LineProgram
from elftools.dwarf.ranges import BaseAddressEntry, RangeEntry

from ualdbg.symbols.cxxnames import canonical_integers
from ualdbg.symbols.demangle import frame_name
from ualdbg.symbols.intervals import IntervalTable
from ualdbg.symbols.lineprogram import FileSubfiles, LineParams, Tables, decode_lines
from ualdbg.symbols.rangelists import range_list

from ..lazyclass import dataclass

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
    # Found by fuzzing (tests/fuzz): huge sizes or offsets in hostile headers, cyclic references;
    # a section offset that makes pyelftools seek before the file's start (OSError EINVAL).
    OSError,
    OverflowError,
    RecursionError,
    EOFError,
    ZeroDivisionError,
    MemoryError,
)


def dwarf_info(elf: Any) -> DWARFInfo:
    """The DWARF of an ELFFile (its own sections: debug links are followed by elfindex.py), with
    its sections relocated only in a relocatable object (ET_REL). A linked program's or
    library's DWARF is final (its relocations, kept by --emit-relocs, were applied at link
    time), and asking pyelftools to relocate it parses every section header again for each
    DWARF section: 18 sections, 900 headers parsed, for a 7-site `ualdbg check`."""
    info: DWARFInfo = elf.get_dwarf_info(relocate_dwarf_sections=elf["e_type"] == "ET_REL", follow_links=False)
    return info


_SCOPE_CONTAINERS = frozenset({"DW_TAG_lexical_block", "DW_TAG_try_block", "DW_TAG_catch_block"})
# Types declared inside a function hold the bodies of their member functions: a lambda's
# operator() sits in its closure class, in the function that defines the lambda.
_LOCAL_TYPES = frozenset({"DW_TAG_class_type", "DW_TAG_structure_type", "DW_TAG_union_type"})
# Places where out-of-line definitions can sit besides the unit's top level. Type DIEs are
# not entered: their subtrees are large and gcc puts member-function bodies at top level.
_DEFINITION_CONTAINERS = frozenset({"DW_TAG_namespace", "DW_TAG_module"})
# The children `UnitScopes._walk` acts on: any other is skipped, unread.
_WALKED = frozenset({"DW_TAG_subprogram", "DW_TAG_inlined_subroutine"}) | _SCOPE_CONTAINERS | _LOCAL_TYPES | _DEFINITION_CONTAINERS


# Languages whose DW_AT_name is the symbol name (binutils' mangle_style() == 0): C, Cobol,
# Fortran 77, Pascal, PL/I, UPC, assembler. For the others (C++, Fortran 90+, Ada, ...) a
# function known only by DW_AT_name is shown by the ELF symbol at its entry, as addr2line
# does: a Fortran main program `p` is `MAIN__`.
_PLAIN_LANGUAGES = frozenset(
    {0x01, 0x02, 0x05, 0x06, 0x07, 0x09, 0x0C, 0x0F, 0x12, 0x1D, 0x2C, 0x8001}
)
# gdb names functions of these languages differently from binutils (issue 18: follow gdb).
# C++ (C++, 03, 11, 14): the linkage name demangled, without its parameter list; without a
# linkage name, DW_AT_name qualified by the enclosing namespaces and classes (dwarf2_physname,
# dwarf2_compute_name). Fortran (77, 90, 95, 2003, 2008): DW_AT_name, qualified `module::`.
_CPLUS_LANGUAGES = frozenset({0x04, 0x19, 0x1A, 0x21})
_FORTRAN_LANGUAGES = frozenset({0x07, 0x08, 0x0E, 0x22, 0x23})
_PREFIX_TAGS = {
    "DW_TAG_namespace": "(anonymous namespace)",
    "DW_TAG_class_type": None,
    "DW_TAG_structure_type": None,
    "DW_TAG_union_type": None,
    "DW_TAG_module": None,
}


# Bounds on every walk of a hostile file's DIEs (issue 29): pyelftools follows DW_AT_sibling
# wherever it points, so a sibling pointing back at an earlier DIE makes iter_children (and
# get_parent, which walks children) loop forever. ualdbg walks DIEs only through `children`,
# `parent` and `unit_dies`, which move forward only and stop after MAX_DIES.
MAX_DIES = 2_000_000


def _unit_end(cu: Any) -> int:
    return int(cu.cu_offset + cu.size)


def _skip_subtree(cu: Any, die: DIE, end: int) -> int:
    """The offset after `die`'s subtree, by a linear scan (each DIE is at least one byte: the scan
    only moves forward): what a missing or backward DW_AT_sibling leaves to find. Kept per unit:
    the scopes of one function are listed again for every site in it and its callers (gcc leaves
    the sibling out on a scope's last child: LZ4's check scanned 400,000 DIEs for 117 sites)."""
    ends = cu.__dict__.setdefault("_ualdbg_subtree_ends", {})
    known = ends.get(die.offset)
    if known is not None:
        return known  # type: ignore[no-any-return]
    ends[die.offset] = pos = _scan_subtree(cu, die, end)
    return pos


def _scan_subtree(cu: Any, die: DIE, end: int) -> int:
    pos, depth, n = die.offset + die.size, 1, 0
    while depth:
        if pos >= end or n > MAX_DIES:
            raise DWARFError(f"the children of the DIE at {die.offset:#x} run past their unit")
        d = cu.get_DIE_from_refaddr(pos)
        if d.size <= 0:
            raise DWARFError(f"an empty DIE at {pos:#x}")
        pos += d.size
        n += 1
        if d.is_null():
            depth -= 1
        elif d.has_children:
            depth += 1
    return pos


def children(die: DIE) -> Iterator[DIE]:
    """`die`'s children, as die.iter_children() gives them, but always moving forward inside the
    unit: a DW_AT_sibling that points back (a cycle) or out of the unit is ignored for a linear
    scan, and a walk of more than MAX_DIES raises DWARFError."""
    if not die.has_children:
        return
    cu = die.cu
    end = _unit_end(cu)
    pos, n = die.offset + die.size, 0
    while True:
        if pos >= end or n > MAX_DIES:
            raise DWARFError(f"the children of the DIE at {die.offset:#x} run past their unit")
        child = cu.get_DIE_from_refaddr(pos)
        child.set_parent(die)
        if child.is_null():
            die._terminator = child
            return
        yield child
        n += 1
        nxt = pos + child.size
        if child.has_children:
            sibling = child.attributes.get("DW_AT_sibling")
            target = None
            if sibling is not None and isinstance(sibling.value, int):
                target = sibling.value if sibling.form == "DW_FORM_ref_addr" else sibling.value + cu.cu_offset
            nxt = target if target is not None and nxt < target < end else _skip_subtree(cu, child, end)
        if nxt <= pos:
            raise DWARFError(f"a DIE at {pos:#x} of no size")
        pos = nxt


def parent(die: DIE) -> DIE | None:
    """The DIE `die` is a child of (None: a unit's top DIE), found as pyelftools' get_parent does
    (down from the top, each generation's closest sibling before it) over `children`."""
    # pyelftools' own field, set by DIE.set_parent (`children` sets it): get_parent would walk
    # the unit again, with no bound, when it is unset
    known = die._parent
    if known is not None:
        return known
    cu = die.cu
    search = cu.get_top_DIE()
    if search.offset >= die.offset:
        return None
    for _ in range(256):  # nesting depth: a real one is tens
        closest = None
        for child in children(search):
            if child.offset == die.offset:
                return search
            if child.offset < die.offset:
                closest = child
            else:
                break
        if closest is None or not closest.has_children:
            return None
        search = closest
    return None


def unit_dies(cu: CompileUnit) -> Iterator[DIE]:
    """Every DIE of a unit in file order (cu.iter_DIEs, which only moves forward), at most MAX_DIES."""
    for n, d in enumerate(cu.iter_DIEs()):
        if n > MAX_DIES:
            raise DWARFError(f"the unit at {cu.cu_offset:#x} has more than {MAX_DIES:,} DIEs")
        yield d


_Pick = Callable[[DIE], list[DIE]]


class CodeHolding(Protocol):
    """The DIEs that hold the code at an address, found without walking a whole unit."""

    def children_holding(self, cu: CompileUnit, level: DIE, addr: int) -> list[DIE] | None:
        """The children of `level` (the unit's top DIE, a namespace) whose code holds `addr`."""

    def nested_holding(self, cu: CompileUnit, addr: int) -> bool | None:
        """Whether a function nested in another one has code at `addr`."""

    def children_tagged(self, cu: CompileUnit, die: DIE, tags: frozenset[str]) -> list[DIE] | None:
        """The children of `die` with one of `tags`, the others not read."""


class _Unpicked(Exception):
    """The unit's shape cannot say which children hold an address."""


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
    die: DIE  # named on first use (most function instances of a unit are never looked up)
    inlined: bool
    ranges: tuple[tuple[int, int], ...]
    parent: int | None  # index of the enclosing function instance in the unit's node list
    call: SourcePos | None


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


def _declaration_chain(die: DIE) -> list[DIE]:
    """The DIE, then along DW_AT_abstract_origin / DW_AT_specification to the declaration."""
    chain = [die]
    for _ in range(8):  # chains are 1-3 long; the bound guards against reference cycles
        attrs = chain[-1].attributes
        ref = next((k for k in ("DW_AT_abstract_origin", "DW_AT_specification") if k in attrs), None)
        if ref is None:
            break
        chain.append(chain[-1].get_DIE_from_attribute(ref))
    return chain


def _gdb_name(die: DIE, *, fortran: bool) -> str | None:
    chain = _declaration_chain(die)
    if not fortran:
        for d in chain:
            for key in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name"):
                if key in d.attributes:
                    linkage = _text(d.attributes[key].value)
                    shown = frame_name(linkage)
                    if shown != linkage:
                        return shown
    named = next((d for d in chain if "DW_AT_name" in d.attributes), None)
    if named is None:
        return None
    parts = [_text(named.attributes["DW_AT_name"].value)]
    up = parent(named)
    for _ in range(64):  # nesting depth, bounded as the walk is
        if up is None or up.tag not in _PREFIX_TAGS:
            break
        if "DW_AT_name" in up.attributes:
            parts.append(_text(up.attributes["DW_AT_name"].value))
        elif _PREFIX_TAGS[up.tag] is not None:
            parts.append(str(_PREFIX_TAGS[up.tag]))
        else:
            break
        up = parent(up)
    return "::".join(reversed(parts))


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
            up = parent(current)
            if up is not None and up.tag in _NAME_SCOPES:
                scope = up
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
        scope = parent(scope)
    return "::".join(reversed(parts))


class UnitLines:
    """One compile unit's line table as gdb reads it, and its file names: PC -> file:line."""

    def __init__(self, owner: DwarfIndex, cu: CompileUnit, top: DIE) -> None:
        self._owner = owner
        self._cu = cu
        self._top = top
        attrs = top.attributes
        self.comp_dir = _text(attrs["DW_AT_comp_dir"].value) if "DW_AT_comp_dir" in attrs else None
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
    def _lines(self) -> _LineTables | None:
        """The unit's line table as gdb 13 reads it (dwarf2/read.c lnp_state_machine, buildsym.c
        record_line), as each file's recorded entries; _LineTables answers a PC from them as
        symtab.c find_pc_sect_line does. None: the unit has no readable line program.

        Where gdb and binutils differ, gdb wins (issue 18), and the DWARF standard with it:
        - the file register starts at 1 in every sequence, in every DWARF version (DWARF 5,
          6.2.2, table 6.4); binutils' addr2line starts DWARF 5 sequences on file 0;
        - several rows at one address: the last is_stmt one;
        - consecutive rows of one line are coalesced when the line has a non-zero discriminator
          (gdb PR 17276): the first row's line holds until the line changes;
        - a file switch ends the previous file's range at that address (its rows there are
          dropped), unless the new row is not a statement and one was seen at that address."""
        program = self._program
        if program is None:
            return None
        try:
            header = program.header
            version = header["version"]
            min_len = header["minimum_instruction_length"]
            max_ops = header.get("maximum_operations_per_instruction", 1) if version >= 4 else 1
            default_stmt = bool(header["default_is_stmt"])
            line_base, line_range = header["line_base"], header["line_range"]
            opcode_base = header["opcode_base"]
            std_lengths = list(header["standard_opcode_lengths"])
            address_size = program.structs.address_size
            byteorder: Literal["little", "big"] = "little" if program.structs.little_endian else "big"
            program.stream.seek(program.program_start_offset)
            code = program.stream.read(program.program_end_offset - program.program_start_offset)
        except DWARF_ERRORS:
            return None  # an undecodable program: no lines for this unit, but no retries
        if line_range == 0 or max_ops == 0:
            return None
        n_files = len(program["file_entry"]) + 1  # DWARF 5 numbers them from 0, before it from 1

        def subfile(index: int) -> object:
            names = self._file(index)
            return names[1] if names is not None else ("?", index)

        subfiles = FileSubfiles(n_files, subfile)
        params = LineParams(min_len, max_ops, default_stmt, line_base, line_range, opcode_base, tuple(std_lengths),
                            address_size, byteorder == "big", self._low_pc)
        tables, index_of = decode_lines(code, params, subfiles)
        return _LineTables(tables, index_of)

    @cached_property
    def _low_pc(self) -> int:
        try:
            ranges = self._owner.die_ranges(self._top, self._cu)
        except DWARF_ERRORS:
            return 0
        return min((lo for lo, _ in ranges), default=0)

    def line_at(self, addr: int) -> SourcePos | None:
        tables = self._lines
        shown = tables.at(addr) if tables is not None else None
        if shown is None:
            return None
        return self.pos(*shown)


class _LineTables:
    """A unit's recorded line entries per subfile, answering `at(addr)` as gdb's find_pc_sect_line
    does: per file, the last entry at or below the PC (entries sorted by address, end markers
    first at one address); a non-statement entry gives way to a statement entry at its address;
    an end marker (line 0) is no candidate. Of the files' candidates the one at the highest address
    wins, and on a tie the later recorded. One lookup reads each file's table by bisection: a run
    asks for a few hundred PCs of units whose tables have hundreds of thousands of rows (CPython's
    35 units: a sweep of every row took most of the post-processing, issue 34)."""

    def __init__(self, tables: Tables, index_of: dict[object, int]) -> None:
        """`tables`: per subfile, its sorted columns (symbols/lineprogram.py)."""
        self._files = [(index_of[subfile], *columns) for subfile, columns in tables.items()]
        self._memo: dict[int, tuple[int, int] | None] = {}

    def at(self, addr: int) -> tuple[int, int] | None:
        """(file index, line) shown at `addr`, or None: no line."""
        if addr in self._memo:
            return self._memo[addr]
        best_key: tuple[int, int] | None = None
        answer: tuple[int, int] | None = None
        for index, addrs, orders, lines, stmts in self._files:
            last = bisect_right(addrs, addr) - 1
            if last < 0:
                continue
            best = last
            if lines[best] and not stmts[best]:
                k = last
                while k > 0 and addrs[k - 1] == addrs[k] and lines[k - 1] != 0 and not stmts[k]:
                    k -= 1
                if stmts[k]:
                    best = k
            if not lines[best]:
                continue
            key = (addrs[best], orders[best])
            if best_key is None or key > best_key:
                best_key, answer = key, (index, lines[best])
        self._memo[addr] = answer
        return answer


class UnitScopes:
    """One compile unit's function instances, concrete and inlined, as gdb's block tree has
    them: PC -> the frames of its inline chain, innermost first."""

    def __init__(self, owner: DwarfIndex, cu: CompileUnit, top: DIE, lines: UnitLines) -> None:
        self._owner = owner
        self._cu = cu
        self._top = top
        self._lines = lines  # names the call site of each inlined instance
        attrs = top.attributes
        language = attrs["DW_AT_language"].value if "DW_AT_language" in attrs else None
        self._cplus = language in _CPLUS_LANGUAGES
        self._names: dict[tuple[int, int], str] = {}
        self._abstract: list[int] = []  # filled by the shallow walk
        self._narrow: dict[int, tuple[list[_Node], IntervalTable[int]]] = {}
        self._picked: dict[tuple[int, ...], tuple[list[_Node], IntervalTable[int]]] = {}

    @cached_property
    def _scopes(self) -> tuple[list[_Node], IntervalTable[int]]:
        return self._read_scopes(self._top, deep=False)

    @cached_property
    def _abstract_offsets(self) -> list[int]:
        """Offsets of the function DIEs without code that the shallow walk met (abstract
        instances, declarations), sorted: the places a deep walk would descend into."""
        self._scopes  # noqa: B018 - the shallow walk fills the list
        return sorted(set(self._abstract))  # walks of single functions may have met some before

    @cached_property
    def _unit_bytes(self) -> bytes:
        section = self._owner.dwarfinfo.debug_info_sec
        if section is None:
            return b""
        stream = section.stream
        stream.seek(self._cu.cu_offset)
        return stream.read(self._cu.size)

    def _narrow_scopes(self, entry: int, addr: int) -> tuple[list[_Node], IntervalTable[int]] | None:
        """The deep walk of the one abstract instance that holds the function starting at
        `entry` (its ELF symbol's address): found by the address's bytes as DW_FORM_addr
        writes them, inside that instance's DIEs. None when the bytes are not there (another
        form, DW_AT_ranges), so the caller reads every abstract instance instead."""
        size = self._cu["address_size"]
        if size not in (4, 8) or entry >= 1 << (8 * size):
            return None
        needle = entry.to_bytes(size, "little" if self._owner.dwarfinfo.config.little_endian else "big")
        data = self._unit_bytes
        offsets = self._abstract_offsets
        base = self._cu.cu_offset
        found = data.find(needle)
        while found >= 0:
            i = bisect_right(offsets, base + found) - 1
            if i >= 0:
                key = offsets[i]
                scopes = self._narrow.get(key)
                if scopes is None:
                    scopes = self._narrow[key] = self._read_scopes(self._cu.get_DIE_from_refaddr(key), deep=True)
                if scopes[1].find(addr) is not None:
                    return scopes
            found = data.find(needle, found + 1)
        return None

    @cached_property
    def _deep_scopes(self) -> tuple[list[_Node], IntervalTable[int]]:
        """Only the functions defined in types inside abstract instances (a lambda's
        operator() in a template or inline function), the ones `_scopes` cannot see: read when a
        PC falls in none of those, since it parses every abstract instance's subtree (the
        concrete functions `_scopes` has are skipped, not read twice)."""
        return self._read_scopes(self._top, deep=True)

    def _read_scopes(self, die: DIE, *, deep: bool, kids: _Pick | None = None) -> tuple[list[_Node], IntervalTable[int]]:
        """The function instances under `die`: the unit's top DIE, or one abstract instance
        (whose children are inside a function); `kids` gives a DIE's children (default: all of
        them)."""
        nodes: list[_Node] = []
        intervals: list[tuple[int, int, int, int]] = []
        # On a DIE pyelftools cannot read, keep the functions read before it: the unit is
        # walked once, never again per lookup.
        with suppress(*DWARF_ERRORS):
            self._walk(die, None, 0, nodes, intervals, die is not self._top, deep, kids)
        return nodes, IntervalTable(self._segments(intervals))

    def _scopes_holding(self, addr: int) -> tuple[list[_Node], IntervalTable[int]]:
        """The shallow walk of only the functions whose code holds `addr` (and the namespaces
        on the way to them): a PC's frames cost its function's DIEs, not the unit's (issue 34).
        The whole unit's walk when that finds no instance there (a nested function, a local
        class's method: their code is outside the function they sit in), or the unit's shape
        cannot be read."""
        holders = self._owner.holders
        if holders is None or "_scopes" in self.__dict__:
            return self._scopes
        cu = self._cu
        picks: dict[int, list[DIE]] = {}

        def pick(die: DIE) -> list[DIE]:
            found = holders.children_holding(cu, die, addr)
            if found is None:
                raise _Unpicked
            picks[die.offset] = found
            return found

        try:
            key = self._pick_key(pick, self._top, 0)
        except (_Unpicked, *DWARF_ERRORS):  # type: ignore[misc]
            return self._scopes

        def kids(die: DIE) -> list[DIE]:
            # Outside functions the picked children; inside, only those the walk acts on.
            found = picks.get(die.offset)
            if found is None:
                found = holders.children_tagged(cu, die, _WALKED)
            return list(children(die)) if found is None else found

        scopes = self._picked.get(key)
        if scopes is None:
            scopes = self._picked[key] = self._read_scopes(self._top, deep=False, kids=kids)
        if scopes[1].find(addr) is not None or holders.nested_holding(cu, addr) is False:
            return scopes
        return self._scopes

    def _pick_key(self, pick: _Pick, die: DIE, depth: int) -> tuple[int, ...]:
        """The offsets of the functions `pick` chooses under `die`, through namespaces."""
        key: list[int] = []
        for child in pick(die):
            if child.tag in _DEFINITION_CONTAINERS and depth < 64:
                key += [-child.offset, *self._pick_key(pick, child, depth + 1)]
            else:
                key.append(child.offset)
        return tuple(key)

    def _walk(
        self,
        die: DIE,
        parent: int | None,
        depth: int,
        nodes: list[_Node],
        intervals: list[tuple[int, int, int, int]],
        in_function: bool,
        deep: bool,
        kids: _Pick | None = None,
    ) -> None:
        for child in children(die) if kids is None else kids(die):
            tag = child.tag
            if tag == "DW_TAG_subprogram" or (
                tag == "DW_TAG_inlined_subroutine" and parent is not None
            ):
                if deep and not in_function and child.has_children and "DW_AT_inline" not in child.attributes and (
                    "DW_AT_low_pc" in child.attributes or "DW_AT_ranges" in child.attributes
                ):
                    continue  # a concrete function at the top: `_scopes` has it
                ranges = self._owner.die_ranges(child, self._cu)
                if not ranges:
                    # Abstract instance or declaration: no code of its own, but the types
                    # declared in it may have (a lambda's operator(), a local class's methods).
                    if tag == "DW_TAG_subprogram" and child.has_children:
                        if deep:
                            self._walk(child, None, 0, nodes, intervals, True, deep, kids)
                        else:
                            self._abstract.append(child.offset)
                    continue
                inlined = tag == "DW_TAG_inlined_subroutine"
                call = None
                if inlined:
                    attrs = child.attributes
                    call_file = (
                        attrs["DW_AT_call_file"].value if "DW_AT_call_file" in attrs else None
                    )
                    call_line = attrs["DW_AT_call_line"].value if "DW_AT_call_line" in attrs else 0
                    if call_file is not None:
                        call = self._lines.pos(call_file, call_line)
                node = len(nodes)
                nodes.append(
                    _Node(
                        die=child,
                        inlined=inlined,
                        ranges=tuple(ranges),
                        # A subprogram nested in another (Fortran contained procedures, GNU C
                        # nested functions) is a function of its own, not a frame of its parent.
                        parent=parent if inlined else None,
                        call=call,
                    )
                )
                level = depth + 1 if inlined else 0
                intervals.extend((lo, hi, level, node) for lo, hi in ranges)
                self._walk(child, node, level, nodes, intervals, True, deep, kids)
            elif (
                (tag in _SCOPE_CONTAINERS or tag in _LOCAL_TYPES) and (parent is not None or in_function)
            ) or tag in _DEFINITION_CONTAINERS:
                self._walk(child, parent, depth, nodes, intervals, in_function, deep, kids)

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

    def _name(self, index: int, node: _Node) -> str:
        key = (id(node), index)
        name = self._names.get(key)
        if name is None:
            name = self._owner.shown_name(node.die, self._cu, list(node.ranges), inlined=node.inlined) or "??"
            self._names[key] = name
        return name

    def frames_at(self, addr: int) -> tuple[ScopeFrame, ...]:
        nodes, table = self._scopes_holding(addr)
        index = table.find(addr)
        if index is None and self._cplus:
            # A lambda's operator() or a local class's method inside a template or inline
            # function: read only the abstract instance that holds it when its ELF symbol says
            # where it starts, else every one.
            entry = self._owner.symbol_start_at(addr)
            narrow = self._narrow_scopes(entry, addr) if entry is not None else None
            nodes, table = narrow if narrow is not None else self._deep_scopes
            index = table.find(addr)
        frames: list[ScopeFrame] = []
        while index is not None:
            node = nodes[index]
            entry = next((lo for lo, hi in node.ranges if lo <= addr < hi), node.ranges[0][0])
            frames.append(ScopeFrame(self._name(index, node), entry, node.call))
            index = node.parent
        return tuple(frames)


class Unit:
    """Everything one compile unit says about addresses, parsed on first use: its line table
    (UnitLines, from .debug_line) and its function instances (UnitScopes, from .debug_info),
    two structures of their own that share only the unit's top DIE."""

    def __init__(self, owner: DwarfIndex, cu: CompileUnit) -> None:
        top = cu.get_top_DIE()
        self.lines = UnitLines(owner, cu, top)
        self.scopes = UnitScopes(owner, cu, top, self.lines)

    def pos(self, file_index: int, line: int) -> SourcePos | None:
        return self.lines.pos(file_index, line)

    def line_at(self, addr: int) -> SourcePos | None:
        return self.lines.line_at(addr)

    def frames_at(self, addr: int) -> tuple[ScopeFrame, ...]:
        return self.scopes.frames_at(addr)


class DwarfIndex:
    """Address lookups into one file's DWARF. Compile units are found through
    .debug_aranges (or their top DIEs) and parsed only when an address falls in them."""

    def __init__(
        self,
        dwarfinfo: DWARFInfo,
        is_code: Callable[[int], bool] | None = None,
        symbol_name_at: Callable[[int], str | None] | None = None,
        symbol_start_at: Callable[[int], int | None] | None = None,
    ) -> None:
        self.dwarfinfo = dwarfinfo
        # name of the ELF function symbol starting exactly at an address, if any
        self.symbol_name_at = symbol_name_at or (lambda addr: None)
        # start of the ELF function symbol containing an address, if any
        self.symbol_start_at = symbol_start_at or (lambda addr: None)
        # Functions the linker discarded keep their DWARF with addresses at or near 0; they
        # would shadow real code in a PIE or shared object, whose first segment starts at 0.
        self._is_code = is_code or (lambda addr: addr != 0)
        self._units: dict[int, Unit | None] = {}
        self._names: dict[int, tuple[str | None, bool]] = {}
        self._gdb_names: dict[int, str | None] = {}
        self._languages: dict[int, int | None] = {}
        self._qualified: dict[int, str | None] = {}
        self._rest: IntervalTable[int] | None = None
        # Which DIEs hold the code at an address, read without the others (ElfIndex sets it:
        # dietree.CodeHolders); None: the units are walked whole.
        self.holders: CodeHolding | None = None

    # -- ranges and names shared by the units ---------------------------------------------

    def die_ranges(self, die: DIE, cu: CompileUnit) -> list[tuple[int, int]]:
        attrs = die.attributes
        out: list[tuple[int, int]] = []
        if "DW_AT_ranges" in attrs:
            offset = attrs["DW_AT_ranges"].value
            entries = range_list(self.dwarfinfo, offset, cu)
            if entries is None:
                lists = self.dwarfinfo.range_lists()
                if lists is None:
                    return out
                entries = lists.get_range_list_at_offset(offset, cu=cu)
            elif not entries and self.dwarfinfo.range_lists() is None:
                return out
            top = cu.get_top_DIE().attributes
            base = top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0
            for entry in entries:
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

    def shown_name(self, die: DIE, cu: CompileUnit, ranges: list[tuple[int, int]], *, inlined: bool) -> str | None:
        """The name a function instance is shown with, as gdb's frames show it: C++ and
        Fortran by gdb's rules (gdb_name_of); C by DW_AT_name; another language's out-of-line
        function without a linkage name by the ELF symbol at its entry."""
        language = self._language(cu)
        name, linkage = self.name_of(die)
        if language in _CPLUS_LANGUAGES or language in _FORTRAN_LANGUAGES:
            had_linkage = linkage
            name = self.gdb_name_of(die, fortran=language in _FORTRAN_LANGUAGES) or name
            if name is not None and language in _CPLUS_LANGUAGES and not had_linkage and not inlined:
                # gdb canonicalizes the name it builds from DWARF for an out-of-line function
                # (cp_canonicalize_string): gcc's `operator()<short int>` is `operator()<short>`;
                # an inlined instance keeps its abstract origin's spelling (measured, gdb 13).
                name = canonical_integers(name)
            linkage = True  # a name gdb shows: no symbol for it
        if not inlined and ranges and (name is None or (not linkage and language not in _PLAIN_LANGUAGES)):
            name = self.symbol_name_at(ranges[0][0]) or name
        return name

    def _language(self, cu: CompileUnit) -> int | None:
        key = cu.cu_offset
        if key not in self._languages:
            top = cu.get_top_DIE().attributes
            self._languages[key] = top["DW_AT_language"].value if "DW_AT_language" in top else None
        return self._languages[key]

    def gdb_name_of(self, die: DIE, *, fortran: bool) -> str | None:
        """The function name gdb's `frame` shows for a C++ or Fortran function instance."""
        attrs = die.attributes
        origin = attrs.get("DW_AT_abstract_origin")
        cacheable = origin is not None and origin.form.startswith("DW_FORM_ref") and origin.form != "DW_FORM_ref_addr"
        key = -1 - (origin.value + die.cu.cu_offset) if cacheable and origin is not None else None
        if key is not None and key in self._gdb_names:
            return self._gdb_names[key]
        name = _gdb_name(die, fortran=fortran)
        if key is not None:
            self._gdb_names[key] = name
        return name

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
        # Units that list the same range (a template instance several units describe, kept once
        # by the linker): gdb takes the first unit's lines; the table returns the last given.
        return IntervalTable(reversed(items)), frozenset(offset for _, _, offset in items)

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

    def unit_offset_at(self, addr: int) -> int | None:
        """The offset of the unit whose code holds `addr`: .debug_aranges first, then the top
        DIEs of the units it does not list (read on the first miss only)."""
        offset = self._aranges[0].find(addr)
        if offset is None:
            offset = self._rest_table().find(addr)
        return offset  # type: ignore[no-any-return]

    def _unit_at(self, addr: int) -> Unit | None:
        offset = self.unit_offset_at(addr)
        if offset is None:
            return None
        if offset not in self._units:
            try:
                self._units[offset] = Unit(self, self.dwarfinfo.get_CU_at(offset))
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
