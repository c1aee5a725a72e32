"""The gdb adapter: a Target over gdb's Python API, the hooks that feed the trap engine, and
the `ualdbg` commands installed from the shared declarations."""
from __future__ import annotations

from .install import install

__all__ = ["install"]
