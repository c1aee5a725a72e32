"""Symbolization: runtime PC -> module+offset, function+offset, file:line and inline chain,
from /proc/PID/maps and each module's ELF symbols and DWARF (read with pyelftools)."""

from __future__ import annotations

from ualdbg.symbols.dwarfindex import DwarfIndex, ScopeFrame, SourcePos
from ualdbg.symbols.elfindex import AddrInfo, CallerFrame, ElfIndex, Segment, Symbol, elf_index
from ualdbg.symbols.maps import Mapping, ModuleMap, group_modules, is_system_path, parse_maps, read_maps
from ualdbg.symbols.resolver import Symbolizer

__all__ = [
    "AddrInfo",
    "CallerFrame",
    "DwarfIndex",
    "ElfIndex",
    "Mapping",
    "ModuleMap",
    "ScopeFrame",
    "Segment",
    "SourcePos",
    "Symbol",
    "Symbolizer",
    "elf_index",
    "group_modules",
    "is_system_path",
    "parse_maps",
    "read_maps",
]
