"""Exec a program with an exact argv[0], environment and ASLR setting, from a debugger or
natively: the spec file the exec helper reads, the helper itself (a tiny C program built into a
temporary folder for one sweep, or a Python fallback), and native runs for timing.

Why a helper: gdb can neither set argv[0] nor stop its shell (dash adds PWD, bash adds `_` and
SHLVL) and itself (LINES, COLUMNS) from editing the environment. gdb's `exec-wrapper` runs the
helper between the shell and the program; the helper execve()s the program with exactly the
argv and environment in the spec, so a run under gdb and a native run get byte-identical stacks.
No copy of or link to the program is ever made: argv[0] is only a string."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import field

from ...lazyclass import dataclass
from ...stepper.execspec import MAGIC, SOURCE, LaunchSpec

__all__ = ["MAGIC", "ExecHelper", "LaunchSpec", "environment_strings", "time_native"]

ADDR_NO_RANDOMIZE = 0x0040000

# The helper's C source is the one the trace engines use too (ualdbg/stepper/src/exec.c), built
# here into the sweep's folder, 32-bit when the program is.
_HELPER_C = SOURCE.read_text()

_HELPER_PY = r"""
import ctypes, os, sys
d = open(sys.argv[1], "rb").read().split(b"\0")[:-1]
if len(d) < 7 or d[0] != b"ualdbg-exec-1":
    sys.exit("ualdbg-exec: %s: not a spec" % sys.argv[1])
ac = int(d[6])
for fd, path, flags in ((0, d[2], os.O_RDONLY), (1, d[3], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                        (2, d[4], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
    if path:
        if fd == 2 and path == d[3]:
            os.dup2(1, 2)
        else:
            f = os.open(path, flags, 0o644)
            os.dup2(f, fd)
            os.close(f)
libc = ctypes.CDLL(None)
p = libc.personality(0xffffffff)
if p != -1:
    libc.personality((p & ~0x40000) if d[1] == b"1" else (p | 0x40000))
os.execve(d[5], d[7:7 + ac], dict(e.split(b"=", 1) if b"=" in e else (e, b"") for e in d[7 + ac:]))
"""


def environment_strings(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """The environment as execve receives it, in order (os.environ keeps the C order)."""
    items = os.environ.items() if env is None else env.items()
    return tuple(f"{k}={v}" for k, v in items)


@dataclass
class ExecHelper:
    """The helper for one sweep, in a temporary folder removed by close(): nothing is left."""

    # The word size of the program to exec: a 32-bit helper for a 32-bit program, because lldb
    # keeps the helper's architecture across the exec (a 64-bit helper makes lldb 19 read an
    # i386 program's CFI with x86-64 register numbers, and its frame addresses go wrong).
    bits: int = 64
    folder: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="ualdbg-exec-"))
    command: list[str] = field(default_factory=list)
    kind: str = ""
    same_bits: bool = False  # the helper has the program's word size
    _count: int = 0

    def __post_init__(self) -> None:
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("cc")
        if cc is not None:
            src = os.path.join(self.folder, "ualdbg-exec.c")
            exe = os.path.join(self.folder, "ualdbg-exec")
            with open(src, "w") as f:
                f.write(_HELPER_C)
            flags = [["-m32"], []] if self.bits == 32 else [[]]
            for extra in flags:
                done = subprocess.run([cc, "-O1", *extra, "-o", exe, src], capture_output=True, check=False,
                                      stdin=subprocess.DEVNULL)
                if done.returncode == 0:
                    self.command, self.kind = [exe], "c"
                    self.same_bits = self.bits == 64 or bool(extra)
                    return
        # No C compiler: the same in Python (tens of ms more per run; see docs).
        script = os.path.join(self.folder, "ualdbg_exec.py")
        with open(script, "w") as f:
            f.write(_HELPER_PY)
        self.command, self.kind = [_python(), "-I", "-S", script], "python"

    def write(self, spec: LaunchSpec, name: str | None = None) -> str:
        self._count += 1
        path = os.path.join(self.folder, f"{name or 'spec'}-{self._count}.spec")
        with open(path, "wb") as f:
            f.write(spec.encode())
        return path

    def argv(self, spec_file: str) -> list[str]:
        return [*self.command, spec_file]

    def shell_words(self, spec_file: str) -> str:
        """The helper as gdb's `exec-wrapper` wants it (a shell command prefix)."""
        import shlex

        return " ".join(shlex.quote(w) for w in self.argv(spec_file))

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ExecHelper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _python() -> str:
    exe = sys.executable or ""
    # Inside gdb or lldb sys.executable may name the debugger, not a Python.
    if os.path.basename(exe).startswith("python"):
        return exe
    return shutil.which("python3") or "/usr/bin/python3"


def time_native(helper: ExecHelper, spec_file: str) -> tuple[float, int]:
    """Wall time of one native run through the helper (one extra exec of a tiny program),
    stdio to /dev/null so a terminal does not time the output. Returns (seconds, status)."""
    t0 = time.perf_counter()
    proc = subprocess.run(helper.argv(spec_file), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0, proc.returncode
