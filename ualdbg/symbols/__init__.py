"""Symbolization: runtime PC -> module+offset, function+offset, file:line and inline chain,
from /proc/PID/maps and each module's ELF symbols and DWARF (read with pyelftools)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ualdbg.symbols.dwarfindex import DwarfIndex, ScopeFrame, SourcePos
    from ualdbg.symbols.elfindex import AddrInfo, CallerFrame, ElfIndex, Segment, Symbol, elf_index
    from ualdbg.symbols.maps import Mapping, ModuleMap, group_modules, is_system_path, parse_maps, read_maps
    from ualdbg.symbols.resolver import Symbolizer

# Each name from its module when first asked for (PEP 562): `ualdbg.symbols.maps` alone (the agent
# engine's scope decisions) then imports neither pyelftools nor the DWARF index (issue 34).
_HOME = {
    "DwarfIndex": "dwarfindex", "ScopeFrame": "dwarfindex", "SourcePos": "dwarfindex",
    "AddrInfo": "elfindex", "CallerFrame": "elfindex", "ElfIndex": "elfindex", "Segment": "elfindex",
    "Symbol": "elfindex", "elf_index": "elfindex",
    "Mapping": "maps", "ModuleMap": "maps", "group_modules": "maps", "is_system_path": "maps",
    "parse_maps": "maps", "read_maps": "maps",
    "Symbolizer": "resolver",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


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
