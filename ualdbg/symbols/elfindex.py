"""What one ELF file says about its addresses, built once per file version and cached: load
segments, function symbols (.symtab, .dynsym) and the DWARF index, from the file itself or
its separate debug file. Every lookup takes a link-time address and is a bisection."""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from collections.abc import Iterator
from functools import cached_property
from typing import IO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection
from elftools.elf.segments import InterpSegment

from ualdbg.symbols.abbrevs import install as install_abbrevs
from ualdbg.symbols.demangle import frame_name
from ualdbg.symbols.dieparse import install as install_dies
from ualdbg.symbols.dietree import CodeHolders, DieTree
from ualdbg.symbols.dwarfindex import DWARF_ERRORS, DwarfIndex, SourcePos, dwarf_info
from ualdbg.symbols.intervals import IntervalTable

from ..lazyclass import dataclass

PAGE_SIZE = mmap.PAGESIZE
_DEBUG_ROOT = "/usr/lib/debug"


def debug_file_directories() -> list[str]:
    """Where separate debug files are looked for, as gdb's `debug-file-directory` (a
    colon-separated list, /usr/lib/debug by default): UALDBG_DEBUG_FILE_DIRECTORY sets it."""
    value = os.environ.get("UALDBG_DEBUG_FILE_DIRECTORY", "")
    return [d for d in value.split(os.pathsep) if d] or [_DEBUG_ROOT]


_PT_LOAD = "PT_LOAD"
_PF_X = 1
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_STB_RANK = {1: 0, 2: 1, 0: 2}  # GLOBAL, WEAK, LOCAL: the name a user knows a function by first
_SHN_LORESERVE = 0xFF00
_DWARF_LOAD_ERRORS: tuple[type[BaseException], ...] = (*DWARF_ERRORS, OSError)


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD program header."""

    vaddr: int
    memsz: int
    offset: int
    filesz: int
    executable: bool


@dataclass(frozen=True)
class Symbol:
    """A function symbol from .symtab or .dynsym; `size` is inferred when the symbol has none."""

    name: str
    start: int
    size: int


@dataclass(frozen=True)
class CallerFrame:
    """A function into which the code at an address was inlined, and the call's position."""

    function: str
    pos: SourcePos | None


@dataclass(frozen=True)
class AddrInfo:
    """What the file knows about one link-time address."""

    function: str | None = None  # innermost: the inlined helper when the address is in one
    function_start: int | None = None  # start of that function instance's range holding the address
    pos: SourcePos | None = None  # the line-table row (what addr2line prints)
    inlined_from: tuple[CallerFrame, ...] = ()  # outward, ending with the out-of-line function


def _page_down(value: int) -> int:
    return value & ~(PAGE_SIZE - 1)


class ElfIndex:
    """Address lookups into one ELF file. Headers are read at construction; symbols and DWARF
    are indexed on first use. Raises ELFError or OSError when the file is not a readable ELF."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._streams: list[IO[bytes]] = []
        self.code_holders: CodeHolders | None = None  # with `dwarf`
        self._elf = self._open(path)
        self.elf_type: str = self._elf["e_type"]
        self.segments: tuple[Segment, ...] = tuple(
            Segment(
                vaddr=seg["p_vaddr"],
                memsz=seg["p_memsz"],
                offset=seg["p_offset"],
                filesz=seg["p_filesz"],
                executable=bool(seg["p_flags"] & _PF_X),
            )
            for seg in self._elf.iter_segments()
            if seg["p_type"] == _PT_LOAD
        )
        self.interp: str | None = next(
            (
                seg.get_interp_name()
                for seg in self._elf.iter_segments()
                if isinstance(seg, InterpSegment)
            ),
            None,
        )

    def _open(self, path: str) -> ELFFile:
        """An ELFFile whose stream stays open as long as this index: pyelftools reads lazily."""
        stream = open(path, "rb")  # noqa: SIM115 - closed by close(), not at scope exit
        try:
            elf = ELFFile(stream)
        except BaseException:
            stream.close()
            raise
        self._streams.append(stream)
        return elf

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
        self._streams.clear()

    # -- load bias ---------------------------------------------------------------------------

    def load_bias(self, file_offset: int, mapped_at: int) -> int:
        """Bias (runtime = link-time + bias) of a copy whose page at `file_offset` is mapped at
        `mapped_at`: 0 for a non-PIE executable, the load address for a PIE or shared object."""
        for seg in self.segments:
            first_page = _page_down(seg.offset)
            if first_page <= file_offset < max(seg.offset + seg.filesz, first_page + 1):
                # p_vaddr and p_offset agree modulo the page size, so the page holding
                # `file_offset` sits at this link-time address.
                return mapped_at - (_page_down(seg.vaddr) + file_offset - first_page)
        if self.segments:
            return mapped_at - _page_down(self.segments[0].vaddr) - file_offset
        return mapped_at - file_offset

    @cached_property
    def _code_spans(self) -> tuple[tuple[int, int], ...]:
        return tuple((seg.vaddr, seg.vaddr + seg.memsz) for seg in self.segments if seg.executable)

    def _is_code(self, addr: int) -> bool:
        # (called for every range of every inlined instance a unit's scopes read: CPython's
        # eval loop has thousands)
        for lo, hi in self._code_spans:
            if lo <= addr < hi:
                return True
        return False

    # -- symbols -----------------------------------------------------------------------------

    @cached_property
    def symbols(self) -> IntervalTable[Symbol]:
        """Function symbols of .symtab and .dynsym (and of a debug file's .symtab): a stripped
        file falls back to what is left, a file with none (or unreadable ones) an empty table."""
        try:
            return self._read_symbols()
        except _DWARF_LOAD_ERRORS:  # a corrupt symbol table costs the names, not the run
            return IntervalTable([])

    def _read_symbols(self) -> IntervalTable[Symbol]:
        best: dict[int, tuple[tuple[int, int, int, int, str], str, int, int]] = {}
        sections: dict[int, tuple[int, int]] = {}
        for elf in self.symbol_sources():
            for name, value, size, info, shndx in _function_symbols(elf):
                rank = (
                    size == 0,
                    _STB_RANK.get(info >> 4, 3),
                    len(name) - len(name.lstrip("_")),
                    len(name),
                    name,
                )
                current = best.get(value)
                if current is None or rank < current[0]:
                    best[value] = (rank, name, size, shndx)
                if shndx not in sections:
                    try:
                        header = elf.get_section(shndx).header
                        sections[shndx] = (header["sh_addr"], header["sh_addr"] + header["sh_size"])
                    except (ELFError, IndexError):
                        sections[shndx] = (value, value)
        starts = sorted(best)
        items: list[tuple[int, int, Symbol]] = []
        for i, start in enumerate(starts):
            _, name, size, shndx = best[start]
            if size == 0:
                # Assembly routines often carry no size: let them reach the next function
                # symbol, but not past their section.
                end = sections[shndx][1]
                if i + 1 < len(starts):
                    end = min(end, starts[i + 1])
                size = max(end - start, 1)
            items.append((start, start + size, Symbol(name, start, size)))
        return IntervalTable(items)

    @property
    def elf(self) -> ELFFile:
        """The ELF file itself (pyelftools), for what this index does not answer (symbols/data.py)."""
        return self._elf

    def symbol_sources(self) -> Iterator[ELFFile]:
        """The file and its separate debug file, if any: where symbol tables are."""
        yield self._elf
        debug = self._debug_elf
        if debug is not None and debug is not self._elf:
            yield debug

    def symbol_at(self, addr: int) -> Symbol | None:
        return self.symbols.find(addr)

    def function_symbols(self) -> Iterator[Symbol]:
        """Every defined function symbol, aliases and duplicates included (`symbols` keeps one
        name per address); a symbol without a size gets the one `symbols` infers for it."""
        try:
            found = [entry for elf in self.symbol_sources() for entry in _function_symbols(elf)]
        except _DWARF_LOAD_ERRORS:
            return
        for name, value, size, _info, _shndx in found:
            if size == 0:
                hit = self.symbols.find_interval(value)
                size = hit[1] - value if hit is not None and hit[0] == value else 1
            yield Symbol(name, value, size)

    @cached_property
    def arm_modes(self) -> tuple[tuple[int, str], ...]:
        """32-bit ARM: where each instruction set starts, sorted (address, "arm" | "thumb" |
        "data"), from the mapping symbols `$a`, `$t` and `$d` (ELF for the Arm Architecture,
        "Mapping symbols"), or, in a file without them, from the function symbols (bit 0 set:
        Thumb). Empty for other machines and files without symbols."""
        try:
            if self._elf["e_machine"] != "EM_ARM":
                return ()
            marks = dict(_arm_mapping_symbols(self._elf))
            if not marks:
                marks = dict(_arm_function_modes(self._elf))
        except _DWARF_LOAD_ERRORS:
            return ()
        return tuple(sorted(marks.items()))

    def arm_mode_at(self, addr: int) -> str | None:
        """The instruction set at `addr` by `arm_modes` (None: no symbol says)."""
        modes = self.arm_modes
        i = bisect_right(modes, (addr, "~")) - 1
        return modes[i][1] if i >= 0 else None

    # -- DWARF -------------------------------------------------------------------------------

    @cached_property
    def _debug_elf(self) -> ELFFile | None:
        """The ELF that holds this file's DWARF: itself, or a separate debug file found by
        build-id or .gnu_debuglink under the usual directories (as gdb looks for them). None
        also when the headers that say so cannot be parsed (a truncated or hostile file)."""
        try:
            if _has_debug_info(self._elf):
                return self._elf
            for candidate in list(self._debug_candidates()):
                if not os.path.isfile(candidate):
                    continue
                try:
                    elf = self._open(candidate)
                except _DWARF_LOAD_ERRORS:
                    continue
                if _has_debug_info(elf):
                    return elf
        except _DWARF_LOAD_ERRORS:
            return None
        return None

    def _debug_candidates(self) -> Iterator[str]:
        for section in self._elf.iter_sections():
            if not isinstance(section, NoteSection):
                continue
            for note in section.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    build_id = str(note["n_desc"])
                    for root in debug_file_directories():
                        yield os.path.join(
                            root, ".build-id", build_id[:2], build_id[2:] + ".debug"
                        )
        link = self._elf.get_section_by_name(".gnu_debuglink")
        if link is not None:
            name = os.fsdecode(link.data().split(b"\0", 1)[0])
            directory = os.path.dirname(os.path.realpath(self.path))
            yield os.path.join(directory, name)
            yield os.path.join(directory, ".debug", name)
            for root in debug_file_directories():
                yield os.path.join(root, directory.lstrip("/"), name)

    @cached_property
    def dwarf(self) -> DwarfIndex | None:
        elf = self._debug_elf
        if elf is None:
            return None
        try:
            info = install_dies(install_abbrevs(dwarf_info(elf)))
            is_code = self._is_code if any(s.executable for s in self.segments) else None
            index = DwarfIndex(info, is_code, self._symbol_name_at, self._symbol_start_at)
        except _DWARF_LOAD_ERRORS:
            return None
        # A PC's function found from the unit's shape, not by pyelftools reading the whole
        # unit (issue 34); shared with the data naming (symbols/data.py).
        self.code_holders = CodeHolders(DieTree(info), index.die_ranges)
        index.holders = self.code_holders
        return index

    def _symbol_name_at(self, addr: int) -> str | None:
        symbol = self.symbol_at(addr)
        return symbol.name if symbol is not None and symbol.start == addr else None

    def _symbol_start_at(self, addr: int) -> int | None:
        symbol = self.symbol_at(addr)
        return symbol.start if symbol is not None else None

    @property
    def has_dwarf(self) -> bool:
        return self.dwarf is not None

    def line_at(self, addr: int) -> SourcePos | None:
        dwarf = self.dwarf
        try:
            return None if dwarf is None else dwarf.line_at(addr)
        except _DWARF_LOAD_ERRORS:
            return None

    # -- the combined answer ----------------------------------------------------------------

    def lookup(self, addr: int) -> AddrInfo:
        """Function, line and inline chain of a link-time address: DWARF first, then symbols,
        then nothing (the caller still has module+offset)."""
        dwarf = self.dwarf
        try:
            frames = dwarf.frames_at(addr) if dwarf is not None else ()
            pos = dwarf.line_at(addr) if dwarf is not None else None
        except _DWARF_LOAD_ERRORS:  # DWARF that parses in part: what symbols say instead
            frames, pos = (), None
        if frames:
            callers = tuple(
                CallerFrame(frames[i + 1].function, frames[i].call) for i in range(len(frames) - 1)
            )
            return AddrInfo(frames[0].function, frames[0].entry, pos, callers)
        symbol = self.symbol_at(addr)
        if symbol is None:
            return AddrInfo(pos=pos)
        # gdb shows a minimal symbol demangled (DMGL_PARAMS | DMGL_ANSI), params removed.
        return AddrInfo(frame_name(symbol.name, symbol=True), symbol.start, pos)


def _has_debug_info(elf: ELFFile) -> bool:
    return elf.has_dwarf_info(strict=True)


def symbol_entries(elf: ELFFile) -> Iterator[tuple[bytes, int, int, int, int]]:
    """(name, value, size, st_info, st_shndx) of every entry of the file's .symtab and .dynsym, in
    file order, read straight from the section bytes: pyelftools' per-symbol objects cost seconds
    on large tables. A table whose bytes cannot be read is left out."""
    little = elf.little_endian
    if elf.elfclass == 64:
        layout = struct.Struct(("<" if little else ">") + "IBBHQQ")
    else:
        layout = struct.Struct(("<" if little else ">") + "IIIBBH")
    for section in elf.iter_sections():
        if section["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
            continue
        try:
            data = section.data()
            strtab = elf.get_section(section["sh_link"]).data()
        except (ELFError, IndexError, OSError):
            continue
        entsize = section["sh_entsize"] or layout.size
        for offset in range(0, len(data) - layout.size + 1, entsize):
            if elf.elfclass == 64:
                st_name, info, _, shndx, value, size = layout.unpack_from(data, offset)
            else:
                st_name, value, size, info, _, shndx = layout.unpack_from(data, offset)
            end = strtab.find(b"\0", st_name)
            yield strtab[st_name : end if end >= 0 else len(strtab)], value, size, info, shndx


def _function_symbols(elf: ELFFile) -> Iterator[tuple[str, int, int, int, int]]:
    """(name, value, size, st_info, st_shndx) of defined function symbols."""
    # ARM: bit 0 of a function symbol's value says it is Thumb code (ELF for the Arm
    # Architecture, "Symbol values"); the function starts at the even address.
    thumb_bit = ~1 if elf["e_machine"] == "EM_ARM" else ~0
    for raw, value, size, info, shndx in symbol_entries(elf):
        if info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC):
            continue
        if shndx == 0 or shndx >= _SHN_LORESERVE or value == 0:
            continue
        name = raw.decode("utf-8", "surrogateescape")
        if name:
            yield name, value & thumb_bit, size, info, shndx


_ARM_MAPPING = {b"$a": "arm", b"$t": "thumb", b"$d": "data"}


def _arm_symbols(elf: ELFFile) -> Iterator[tuple[bytes, int, int]]:
    """(name, value, st_info) of the defined symbols of a 32-bit ELF's .symtab."""
    layout = struct.Struct(("<" if elf.little_endian else ">") + "IIIBBH")
    for section in elf.iter_sections():
        if section["sh_type"] != "SHT_SYMTAB":
            continue
        data = section.data()
        strtab = elf.get_section(section["sh_link"]).data()
        entsize = section["sh_entsize"] or layout.size
        for offset in range(0, len(data) - layout.size + 1, entsize):
            st_name, value, _, info, _, shndx = layout.unpack_from(data, offset)
            if shndx == 0 or shndx >= _SHN_LORESERVE:
                continue
            end = strtab.find(b"\0", st_name)
            yield strtab[st_name: end if end >= 0 else len(strtab)], value, info


def _arm_mapping_symbols(elf: ELFFile) -> Iterator[tuple[int, str]]:
    for name, value, _ in _arm_symbols(elf):
        mode = _ARM_MAPPING.get(name.split(b".", 1)[0]) if name.startswith(b"$") else None
        if mode is not None:
            yield value, mode


def _arm_function_modes(elf: ELFFile) -> Iterator[tuple[int, str]]:
    for _, value, info in _arm_symbols(elf):
        if info & 0xF in (_STT_FUNC, _STT_GNU_IFUNC) and value:
            yield value & ~1, "thumb" if value & 1 else "arm"


_CACHE: dict[str, tuple[tuple[int, int, int, int], ElfIndex | None]] = {}


def elf_index(path: str) -> ElfIndex | None:
    """The index of the ELF at `path`, built once per file version (device, inode, size,
    mtime): a rebuilt binary gets a fresh index. None when the path is not a readable ELF."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    if cached is not None and cached[1] is not None:
        cached[1].close()
    try:
        index: ElfIndex | None = ElfIndex(path)
    except _DWARF_LOAD_ERRORS:  # any parse error of a truncated or hostile file: not readable
        index = None
    _CACHE[path] = (key, index)
    return index


def clear_cache() -> None:
    for _, index in _CACHE.values():
        if index is not None:
            index.close()
    _CACHE.clear()
