"""Running a program under a debugger from the shell: build the batch command line, pass the
program's stdio and environment through untouched, and collect the JSON and exit status."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import capstone
import elftools
import rich

import ualdbg

MIN_GDB = (12, 1)


class ToolError(Exception):
    """A usage or tool problem: one line for the user, exit status 2."""


@dataclass
class RunRequest:
    program: list[str]
    debugger: str = "gdb"
    at: str = "main"
    all_modules: bool = False
    modules: list[str] = field(default_factory=list)
    buffer: int = 100_000


@dataclass
class RunResult:
    doc: dict[str, Any]
    exit_status: int | None
    exit_signal: int | None
    log: str


def resolve_program(argv0: str) -> str:
    path = argv0 if "/" in argv0 else (shutil.which(argv0) or argv0)
    if not os.path.exists(path):
        raise ToolError(f"{argv0}: no such file")
    if os.path.isdir(path):
        raise ToolError(f"{argv0}: is a directory, not a program")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ToolError(f"{argv0}: cannot read: {exc.strerror}") from None
    if magic != b"\x7fELF":
        raise ToolError(f"{argv0}: not an ELF executable (ualdbg runs native programs; for a script, name its interpreter)")
    if not os.access(path, os.X_OK):
        raise ToolError(f"{argv0}: not executable")
    return os.path.abspath(path)


def _pkg_roots() -> list[str]:
    """Folders that make ualdbg and its dependencies importable in the debugger's Python."""
    roots = []
    for mod in (ualdbg, capstone, elftools, rich):
        d = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__ or "")))
        if d not in roots:
            roots.append(d)
    return roots


def find_gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise ToolError("gdb not found on PATH; install it (Debian: apt-get install gdb)")
    return gdb


def gdb_command(req: RunRequest, cfg: dict[str, Any], log: str) -> list[str]:
    setup = f"import sys; sys.path[:0] = {_pkg_roots()!r}"
    return [
        find_gdb(), "-q", "-nx", "-batch",
        "-iex", f"set logging file {log}", "-iex", "set logging overwrite on",
        # gdb's own messages go to the log; the program writes to the user's stdout/stderr.
        "-iex", "set logging redirect on", "-iex", "set logging enabled on",
        "-iex", "set pagination off", "-iex", "set confirm off",
        "-iex", "set print thread-events off", "-iex", "set print inferior-events off",
        "-ex", f"python {setup}",
        "-ex", f"python from ualdbg.adapters.gdb.driver import main; main({json.dumps(json.dumps(cfg))})",
        "--args", *req.program,
    ]


def run_traced(req: RunRequest, on_progress: Callable[[int, int, float], None] | None = None) -> RunResult:
    req.program[0] = resolve_program(req.program[0])
    if req.debugger != "gdb":
        raise ToolError(f"--debugger {req.debugger}: not available yet (gdb is)")
    with tempfile.TemporaryDirectory(prefix="ualdbg-") as tmp:
        cfg: dict[str, Any] = {
            "program": req.program[0], "args": req.program[1:], "at": req.at,
            "all_modules": req.all_modules, "modules": req.modules, "buffer": req.buffer,
            "json": os.path.join(tmp, "trace.json"), "status": os.path.join(tmp, "status.json"),
            "progress": os.path.join(tmp, "progress") if on_progress else None,
        }
        log = os.path.join(tmp, "debugger.log")
        cmd = gdb_command(req, cfg, log)
        done = threading.Event()
        poller = None
        if on_progress is not None:
            poller = threading.Thread(target=_poll, args=(cfg["progress"], on_progress, done), daemon=True)
            poller.start()
        try:
            proc = subprocess.run(cmd, stdin=None, stdout=None, stderr=None, check=False)
        finally:
            done.set()
            if poller is not None:
                poller.join()
        log_text = open(log, errors="replace").read() if os.path.exists(log) else ""
        if not os.path.exists(cfg["status"]):
            tail = "\n".join(log_text.strip().splitlines()[-5:])
            raise ToolError(f"the debugger did not finish the trace (gdb exit status {proc.returncode})"
                            + (f": {tail}" if tail else ""))
        status = json.load(open(cfg["status"]))
        if status.get("error") and status.get("exit_status") is None and status.get("exit_signal") is None:
            raise ToolError(f"gdb could not run {req.program[0]}: {status['error']}")
        doc = json.load(open(cfg["json"]))
    return RunResult(doc, status["exit_status"], status["exit_signal"], log_text)


def _poll(path: str, cb: Callable[[int, int, float], None], done: threading.Event) -> None:
    while not done.wait(0.2):
        try:
            total, ignored, secs = open(path).read().split()
            cb(int(total), int(ignored), float(secs))
        except (OSError, ValueError):
            pass


def pass_exit_status(status: int | None, signal_no: int | None) -> int:
    """The program's own status as the CLI's; a death by signal is re-raised on ourselves."""
    if signal_no is not None:
        import signal

        sys.stdout.flush()
        sys.stderr.flush()
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signal_no, signal.SIG_DFL)
            os.kill(os.getpid(), signal_no)
        except (OSError, ValueError):
            pass
        return 128 + signal_no
    return status if status is not None else 0
