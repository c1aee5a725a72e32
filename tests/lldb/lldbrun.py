"""Run real lldb the way tests/gdbrun.py runs gdb: --no-lldbinit, a scrubbed environment, stdin
from /dev/null, a timeout, and the full command line and output on failure.

`lldb --batch` stops running `-o` commands at the first stop it takes for a crash, and a SIGBUS
stop (a `ualdbg break` report) is one: it then runs only the `-k` commands, and stops running
those at the next crash too. Tests that go through many stops therefore run lldb without
--batch, reading its commands from `-o` and quitting at the end of stdin (/dev/null)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, require_tool, scrubbed_env
from gdbrun import Report, Run, parse_reports

ENTRY = ROOT / "lldb" / "ualdbg.py"
EXITED = re.compile(r"^Process \d+ exited with status = (-?\d+)", re.M)


class LldbRun(Run):
    def explain(self) -> str:
        # Many `-o continue`: say how many instead of repeating them.
        shown: list[str] = []
        i = 0
        while i < len(self.cmd):
            j = i
            while j + 2 <= len(self.cmd) and self.cmd[j:j + 2] == ["-o", "continue"]:
                j += 2
            if j - i > 4:
                shown.append(f"-o continue (x{(j - i) // 2})")
                i = j
            else:
                shown.append(self.cmd[i])
                i += 1
        return (f"command: {' '.join(shown)}\nexit status: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")


def lldb_path() -> str:
    for name in ("lldb-19", "lldb"):
        if shutil.which(name):
            return require_tool(name)
    return require_tool("lldb-19")


def run_lldb(program: list[str], commands: list[str], *, crash: list[str] = (), batch: bool = True,  # type: ignore[assignment]
             source: bool = True, timeout: float = 180, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> Run:
    cmd = [lldb_path(), "--no-lldbinit"] + (["--batch"] if batch else [])
    if source:
        cmd += ["-o", f"command script import {ENTRY}"]
    for c in commands:
        cmd += ["-o", c]
    for c in crash:
        cmd += ["-k", c]
    if program:
        cmd += ["--", *program]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=scrubbed_env(env), cwd=cwd or ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"lldb timed out after {timeout} s\ncommand: {' '.join(cmd)}\n--- stdout ---\n{exc.stdout}\n"
                    f"--- stderr ---\n{exc.stderr}")
    return LldbRun(cmd, proc.returncode, proc.stdout, proc.stderr)


def exit_status(run: Run) -> int | None:
    m = EXITED.search(run.stdout)
    return int(m.group(1)) if m else None


def break_through(program: list[str], opts: str = "", *, stops: int, before: list[str] = (),  # type: ignore[assignment]
                  launch: str = "process launch", **kw: object) -> tuple[Run, list[Report], int | None]:
    """`ualdbg break`, launch, and `continue` at every stop (up to `stops` of them, plus a few)
    until the program exits."""
    commands = [*before, f"ualdbg break {opts}".strip(), launch] + ["continue"] * (stops + 3)
    run = run_lldb(program, commands, batch=False, **kw)  # type: ignore[arg-type]
    return run, parse_reports(run.stdout), exit_status(run)
