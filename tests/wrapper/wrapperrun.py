"""What the wrapper tests share (issue 29): the engines a program can be run under from the shell,
the program that shows what it sees (programs/wrapped.c, dynamic and static), ualdbg started as a
user's shell would start it, and the processes left in a session after ualdbg is gone."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support.build import build_source
from support.env import ROOT, require_tool, scrubbed_env

PROGRAMS = Path(__file__).resolve().parent / "programs"

# Every way `trace`/`check` runs a program: the agent (default), gdb's trap engine (asked for, and
# the fallback for a static program), lldb's, and the native stepper.
ENGINES: dict[str, list[str]] = {
    "agent": [],
    "trap-gdb": ["--engine", "trap"],
    "static-gdb": [],  # the static build: the agent cannot go in, gdb's trap engine runs it
    "trap-lldb": ["--engine", "trap", "--debugger", "lldb"],
    "step": ["--engine", "step", "--in", "touch"],
}


def need(engine: str) -> None:
    """A missing debugger skips locally and fails under CI=true."""
    if engine in ("trap-gdb", "static-gdb"):
        require_tool("gdb")
    if engine == "trap-lldb":
        require_tool("lldb-19")


def build_wrapped(out: Path) -> tuple[Path, Path]:
    """programs/wrapped.c, dynamic and static (into `out`)."""
    dynamic = build_source(PROGRAMS / "wrapped.c", out / "dynamic")
    static = build_source(PROGRAMS / "wrapped.c", out / "static", flags=("-g", "-O1", "-static"))
    return dynamic, static


def program_for(engine: str, dynamic: Path, static: Path) -> Path:
    return static if engine == "static-gdb" else dynamic


def ualdbg_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ualdbg", *args]


def env_with(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The scrubbed environment, with ualdbg importable from any folder."""
    return scrubbed_env({"PYTHONPATH": str(ROOT), **(extra or {})})


def ignoring(*names: str, blocked: tuple[str, ...] = ()) -> Callable[[], None]:
    """A preexec_fn: the child starts with these signals ignored (as nohup, or a script's
    background job, start what they run), and `blocked` blocked."""
    import signal

    def setup() -> None:
        for name in names:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        if blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {getattr(signal, name) for name in blocked})

    return setup


def live_in_session(sid: int) -> list[str]:
    """The processes of session `sid` still running (zombies waiting for a reaper are not)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            left.append(f"{pid} {stat.split('(', 1)[1].split(')', 1)[0]} ({fields[0]})")
    return left


def kill_session(sid: int) -> None:
    """Whatever a failed test left in the session (never the test's own processes)."""
    import signal

    for line in live_in_session(sid):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass


def popen(args: list[str], *, cwd: Path, **kw: object) -> subprocess.Popen[bytes]:
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("env", env_with())
    return subprocess.Popen(args, cwd=cwd, **kw)  # type: ignore[call-overload, no-any-return]


@contextmanager
def in_session(args: list[str], *, cwd: Path, **kw: object) -> Iterator[subprocess.Popen[bytes]]:
    """`args` started in a session of its own (its pid is the session's id); whatever is left of
    it is killed at the end."""
    proc = popen(args, cwd=cwd, start_new_session=True, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_session(proc.pid)


def on_terminal(argv: list[str], *, cwd: Path, env: dict[str, str], key: bytes, wait: float = 0.3,
                timeout: float = 300) -> tuple[str, int | None]:
    """Run `argv` on a pseudo-terminal of its own (a session whose controlling terminal it is, as
    a user's shell runs it) and type `key` `wait` seconds after the program printed "up".
    Returns what the terminal showed and the exit status (None when it never printed "up")."""
    import pty
    import select
    import signal
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    text, typed = b"", False
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the terminal's last reader is gone
                    break
                if not data:
                    break
                text += data
            if not typed and b"up\r\n" in text:
                time.sleep(wait)
                os.write(fd, key)
                typed = True
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return text.decode(errors="replace"), os.waitstatus_to_exitcode(status) if typed else None
