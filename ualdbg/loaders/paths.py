"""Where ualdbg and its dependencies live, for a debugger's embedded Python, which knows neither
the venv nor the clone (PLATFORM.md: gdb does not put a sourced file's folder on sys.path).
Shared by both loaders and by `ualdbg gdb|lldb|gdbinit|lldbinit`; imports nothing of ualdbg."""
from __future__ import annotations

import glob
import os
import sys

# Set by `ualdbg gdb|lldb`: the launching Python's sys.path entries, so the debugger's Python
# (the system /usr/bin/python3) finds ualdbg's dependencies in whatever venv ualdbg runs from.
ENV_PATH = "UALDBG_SYS_PATH"
REQUIRED = (("capstone", "capstone"), ("elftools", "pyelftools"), ("rich", "rich"))


def candidate_paths(root: str) -> list[str]:
    """sys.path entries, first wins: the package root, the launcher's paths, and a clone's venv
    (scripts/bootstrap.sh makes `.venv` from /usr/bin/python3, the Python gdb and lldb embed)."""
    out = [root]
    out += [p for p in os.environ.get(ENV_PATH, "").split(os.pathsep) if p]
    venv = os.environ.get("UALDBG_VENV") or os.path.join(root, ".venv")
    pyver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    out += sorted(glob.glob(os.path.join(venv, "lib", pyver, "site-packages")))
    return list(dict.fromkeys(out))


def add_paths(root: str) -> None:
    for path in reversed(candidate_paths(root)):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def missing_dependencies() -> list[str]:
    missing = []
    for module, package in REQUIRED:
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    return missing


def missing_message(root: str, missing: list[str]) -> str:
    return (f"ualdbg: the debugger's Python ({sys.executable or 'python'} {sys.version.split()[0]}) cannot import "
            f"{', '.join(missing)}; start the debugger with `ualdbg gdb` / `ualdbg lldb`, or run "
            f"`make -C {root} setup`, or pip install ualdbg for this Python\n")
