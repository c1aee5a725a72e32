"""The gdb adapter: a Target over gdb's Python API, the hooks that feed the trap engine, and
the `ualdbg` commands installed from the shared declarations."""
from __future__ import annotations

import gdb  # type: ignore[import-not-found]

from .install import install

__all__ = ["install", "load"]

MIN_GDB = (12, 1)


def load() -> None:
    """What the loader (ualdbg/loaders/ualdbg_gdb.py) calls once the dependencies import: refuse a
    gdb older than ualdbg needs in one line, else install the commands."""
    version = tuple(int(x) for x in gdb.VERSION.split()[0].split(".")[:2] if x.isdigit())
    if version < MIN_GDB:
        gdb.write(f"ualdbg: gdb {gdb.VERSION} is too old; ualdbg needs gdb {'.'.join(map(str, MIN_GDB))} or newer\n",
                  gdb.STDERR)
        return
    install()
