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
from dataclasses import dataclass, field

MAGIC = "ualdbg-exec-1"
ADDR_NO_RANDOMIZE = 0x0040000

_HELPER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <unistd.h>

/* spec: MAGIC\0 ASLR(0|1)\0 STDIN\0 STDOUT\0 STDERR\0 PATH\0 ARGC\0 ARGV...\0 ENV...\0
   (an empty STDIN/STDOUT/STDERR keeps what the helper inherited) */
static int redirect(const char *path, int fd, int flags, const char *same_as, int same_fd)
{
    if (!*path) return 0;
    if (same_as && strcmp(path, same_as) == 0) return dup2(same_fd, fd) < 0 ? -1 : 0;
    int f = open(path, flags, 0644);
    if (f < 0) { perror(path); return -1; }
    if (f != fd && (dup2(f, fd) < 0 || close(f) < 0)) return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fputs("ualdbg-exec: usage: ualdbg-exec SPEC\n", stderr); return 127; }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror(argv[1]); return 127; }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len == cap && !(buf = realloc(buf, cap *= 2))) return 127;
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) { perror(argv[1]); return 127; }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == 0;
    char **s = calloc(n + 1, sizeof *s);
    size_t k = 0;
    for (size_t i = 0; i < len && k < n; i += strlen(buf + i) + 1) s[k++] = buf + i;
    if (k < 7 || strcmp(s[0], "ualdbg-exec-1") != 0) { fprintf(stderr, "ualdbg-exec: %s: not a spec\n", argv[1]); return 127; }
    long ac = strtol(s[6], 0, 10);
    if (ac < 0 || (size_t)(7 + ac) > k) { fprintf(stderr, "ualdbg-exec: %s: bad argc\n", argv[1]); return 127; }
    if (redirect(s[2], 0, O_RDONLY, NULL, -1) || redirect(s[3], 1, O_WRONLY | O_CREAT | O_TRUNC, NULL, -1)
        || redirect(s[4], 2, O_WRONLY | O_CREAT | O_TRUNC, s[3], 1))
        return 127;
    int pers = personality(0xffffffff);
    if (pers != -1) personality(s[1][0] == '1' ? (pers & ~ADDR_NO_RANDOMIZE) : (pers | ADDR_NO_RANDOMIZE));
    /* argv and envp point into the spec's own buffer: NULL-terminated slices of s. */
    char **av = calloc((size_t)ac + 1, sizeof *av);
    for (long i = 0; i < ac; i++) av[i] = s[7 + i];
    s[k] = NULL;
    execve(s[5], av, s + 7 + ac);
    perror(s[5]);
    return 127;
}
"""

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


@dataclass(frozen=True)
class LaunchSpec:
    """One exact exec: the path handed to execve, the full argv (argv[0] included), the full
    environment as NAME=VALUE strings in order, and whether ASLR is on."""

    path: str
    argv: tuple[str, ...]
    env: tuple[str, ...]
    aslr: bool = False
    stdin: str = ""  # paths to redirect to; "" keeps what the helper inherited
    stdout: str = ""
    stderr: str = ""

    def encode(self) -> bytes:
        fields = [MAGIC, "1" if self.aslr else "0", self.stdin, self.stdout, self.stderr, self.path,
                  str(len(self.argv)), *self.argv, *self.env]
        return b"".join(f.encode("utf-8", "surrogateescape") + b"\0" for f in fields)


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
