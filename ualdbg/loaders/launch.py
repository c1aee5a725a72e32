"""`ualdbg gdb|lldb [DEBUGGER ARGS] [-- PROG ARGS]`: start the real debugger with ualdbg loaded,
and `ualdbg gdbinit|lldbinit`: the lines that load it in every session. The debugger's Python is
the system /usr/bin/python3 (PLATFORM.md), so the launcher hands it this Python's sys.path."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import UaldbgError
from ..core.external import ToolMissing, find_tool
from .paths import ENV_PATH, candidate_paths

HERE = Path(__file__).resolve().parent
GDB_LOADER = HERE / "ualdbg_gdb.py"
LLDB_LOADER = HERE / "ualdbg_lldb.py"
PACKAGE_ROOT = str(HERE.parent.parent)
# lldb driven from outside its own binary needs this (PLATFORM.md); the lldb binary finds it by
# itself, but a Debian lldb-19 without the llvm-19 bin folder on PATH does not always.
DEBUGSERVER = "/usr/lib/llvm-19/bin/lldb-server"


class LaunchError(UaldbgError):
    """The debugger cannot be started: one line for the user."""


def split_program(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """DEBUGGER ARGS -- PROG ARGS: everything before the first `--` is the debugger's."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def find_debugger(kind: str) -> str:
    try:
        return find_tool(kind)
    except ToolMissing as exc:
        raise LaunchError(f"ualdbg {kind}: {exc}") from None


def dependency_paths() -> list[str]:
    """This Python's sys.path entries that hold ualdbg's dependencies, for the debugger's Python."""
    return [p for p in sys.path if p and os.path.isdir(p) and (p.endswith("-packages") or p == PACKAGE_ROOT)]


def command_line(kind: str, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The debugger's argv and environment for `ualdbg KIND ARGV`."""
    debugger = find_debugger(kind)
    own, program = split_program(argv)
    env = dict(os.environ)
    env[ENV_PATH] = os.pathsep.join(dependency_paths())
    if kind == "gdb":
        cmd = [debugger, "-q", "-x", str(GDB_LOADER), *own]
        if program:
            cmd += ["--args", *program]
    else:
        # -O: before the target is created, so `ualdbg break` works on the first prompt.
        cmd = [debugger, "-O", f"command script import {LLDB_LOADER}", *own]
        if program:
            cmd += ["--", *program]
        if "LLDB_DEBUGSERVER_PATH" not in env and os.path.exists(DEBUGSERVER):
            env["LLDB_DEBUGSERVER_PATH"] = DEBUGSERVER
    return cmd, env


def launch(kind: str, argv: Sequence[str]) -> int:
    """Replace this process with the debugger (it owns the terminal and the exit status)."""
    cmd, env = command_line(kind, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(cmd[0], cmd, env)
    except OSError as exc:
        raise LaunchError(f"ualdbg {kind}: cannot start {cmd[0]}: {exc.strerror}") from None
    return 2  # not reached


def _needs_path_line() -> list[str]:
    """The dependencies' folders the loader would not find by itself from its own location."""
    found = set(candidate_paths(PACKAGE_ROOT))
    extra = []
    for module in ("capstone", "elftools", "rich"):
        mod = sys.modules.get(module) or __import__(module)
        folder = str(Path(mod.__file__ or "").resolve().parent.parent)
        if folder not in found and folder not in extra:
            extra.append(folder)
    return extra


def init_lines(kind: str) -> list[str]:
    """What to put in ~/.gdbinit or ~/.lldbinit to have ualdbg in every session."""
    extra = _needs_path_line()
    lines = [f"# ualdbg {kind} plugin: add to ~/.{kind}init"]
    if extra:
        joined = ", ".join(repr(p) for p in extra)
        if kind == "gdb":
            lines.append(f"python import sys; sys.path[:0] = [p for p in ({joined},) if p not in sys.path]")
        else:
            lines.append(f"script import sys; sys.path[:0] = [p for p in ({joined},) if p not in sys.path]")
    lines.append(f"source {GDB_LOADER}" if kind == "gdb" else f"command script import {LLDB_LOADER}")
    return lines
