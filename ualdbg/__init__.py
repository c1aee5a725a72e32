"""ualdbg: find unaligned memory accesses in native programs, from gdb, lldb or the shell."""
from __future__ import annotations

__version__ = "0.1.0"
