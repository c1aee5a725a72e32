"""ualdbg's own messages inside gdb: one line on gdb's stderr (with the traceback under
UALDBG_DEBUG), for the hooks and the step engine's breakpoints alike."""
from __future__ import annotations

import os
import traceback

import gdb  # type: ignore[import-not-found]


def warn(message: str) -> None:
    gdb.write(f"ualdbg: {message}\n", gdb.STDERR)
    if os.environ.get("UALDBG_DEBUG"):
        gdb.write(traceback.format_exc(), gdb.STDERR)
