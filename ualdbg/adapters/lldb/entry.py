"""What `command script import lldb/ualdbg.py` ends in (through the package's
`__lldb_init_module`): check this lldb and its Python, then install the commands."""
from __future__ import annotations

import glob
import os
import sys
from typing import Any

from ...loaders.paths import add_paths, missing_dependencies

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def problem() -> str | None:
    """One line saying why ualdbg cannot run in this lldb, or None."""
    missing = missing_dependencies()
    if missing:
        root = _ROOT
        venv = os.environ.get("UALDBG_VENV") or os.path.join(root, ".venv")
        mine = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        made_for = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(venv, "lib", "python*", "site-packages")))
        why = (f"; {venv} is for {', '.join(made_for)}, not {mine}" if made_for and mine not in made_for
               else f"; run `make -C {root} setup` to create {venv}")
        return f"lldb's Python ({sys.executable or 'python'} {sys.version.split()[0]}) cannot import {', '.join(missing)}{why}"
    import lldb  # type: ignore[import-not-found]

    if not hasattr(lldb.SBThread, "GetSiginfo"):
        return f"this lldb ({lldb.SBDebugger.GetVersionString().splitlines()[0]}) has no SBThread.GetSiginfo; ualdbg needs lldb 15 or newer"
    return None


def add_venv() -> None:
    """The clone's virtualenv (and ualdbg gdb|lldb's paths) on sys.path, as the loaders do:
    needed here too when lldb found the package without running a loader."""
    add_paths(_ROOT)


def init(debugger: Any, internal_dict: dict[str, Any] | None = None) -> None:
    add_venv()
    reason = problem()
    if reason is not None:
        sys.stderr.write(f"ualdbg: {reason}\n")
        return
    from . import breakpoints, faultstep, hooks, install, stepping, stophook

    # lldb finds command classes and callbacks by dotted names from its script namespace, where
    # `ualdbg` may still be the entry file's module (imported under the same name), and a
    # package re-imported by that file lacks the attributes of submodules imported before.
    for module in (hooks, install, breakpoints, faultstep, stophook, stepping):
        parts = module.__name__.split(".")
        for i in range(1, len(parts)):
            parent, child = sys.modules[".".join(parts[:i])], sys.modules[".".join(parts[:i + 1])]
            if getattr(parent, parts[i], None) is not child:
                setattr(parent, parts[i], child)
    if internal_dict is not None:
        internal_dict["ualdbg"] = sys.modules[__name__.split(".")[0]]
    install.install(debugger)
