"""Where ualdbg finds the external programs it runs (gdb, lldb, gdb-multiarch, qemu-user): one
table of the names to look for on PATH, the variable that overrides them, and the Debian package
a missing one comes from."""
from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from ..lazyclass import dataclass
from .errors import EXIT_TOOL, ToolError


@dataclass(frozen=True)
class Tool:
    names: tuple[str, ...]  # looked up on PATH in this order
    install: str  # what a Debian user installs
    override: str | None = None  # the variable naming the program instead (`ualdbg gdb` with another gdb)


TOOLS = {
    "gdb": Tool(("gdb",), "apt-get install gdb", "UALDBG_GDB"),
    # Debian's package is lldb-19, whose program is lldb-19; others call it lldb.
    "lldb": Tool(("lldb-19", "lldb"), "apt-get install lldb-19 python3-lldb-19 liblldb-19-dev", "UALDBG_LLDB"),
    "gdb-multiarch": Tool(("gdb-multiarch",), "apt-get install gdb-multiarch"),
    "qemu-user": Tool(("qemu-x86_64",), "apt-get install qemu-user"),  # the CPU's qemu-ARCH: names=
}


class ToolMissing(ToolError):
    """An external program ualdbg needs is not installed: ualdbg's own failure (125)."""

    status = EXIT_TOOL


def find_tool(kind: str, names: Sequence[str] | None = None) -> str:
    """The path of TOOLS[kind] (or of the first of `names` found, e.g. qemu-sparc64), its override
    variable first; ToolMissing, saying what to install, when there is none."""
    tool = TOOLS[kind]
    override = os.environ.get(tool.override) if tool.override else None
    candidates = [override] if override else list(names or tool.names)
    for name in candidates:
        path = shutil.which(name)
        if path is not None:
            return path
    raise ToolMissing(f"{' or '.join(candidates)} not found on PATH; install it (Debian: {tool.install})")
