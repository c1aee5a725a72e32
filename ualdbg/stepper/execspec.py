"""The exec helper (src/exec.c): the spec file it reads (one exact exec: path, argv with argv[0],
environment, ASLR) and its build, once per source version into the agent's cache. gdb's
`exec-wrapper` runs it between gdb's shell and the program (engines/runner.py for a trace,
tools/stackcheck for a sweep)."""
from __future__ import annotations

from pathlib import Path

from ..agent.build import cached_build
from ..lazyclass import dataclass

MAGIC = "ualdbg-exec-1"
SOURCE = Path(__file__).resolve().parent / "src" / "exec.c"
EXE_NAME = "ualdbg-exec"


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


def build(dest_dir: Path | None = None) -> Path:
    """The path of the built helper (64-bit), compiling it if this source version is not cached."""
    return cached_build("the exec helper", "exec", EXE_NAME, [SOURCE], (), ("-O2", "-Wall", "-Wextra"), (), dest_dir)
