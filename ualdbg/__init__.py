"""ualdbg: find unaligned memory accesses in native programs, from gdb, lldb or the shell."""
from __future__ import annotations

__version__ = "0.1.0"


def __lldb_init_module(debugger, internal_dict):  # type: ignore[no-untyped-def]
    """lldb calls this after `command script import` of lldb/ualdbg.py, whose import hands lldb
    this package (the entry file shares its name: PLATFORM.md), or of the package itself."""
    from .adapters.lldb.entry import init

    init(debugger, internal_dict)
