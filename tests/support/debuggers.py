"""Real gdb, lldb and gdb-multiarch (against qemu-user) run the way CPython's test_gdb runs gdb:
no init files, a scrubbed environment, stdin from /dev/null, a timeout; each builds its command
line and leaves the running to support.run (a timeout fails the test with the output so far).

`lldb --batch` stops running `-o` commands at the first stop it takes for a crash, and a SIGBUS
stop (a `ualdbg break` report) is one: it then runs only the `-k` commands, and stops running
those at the next crash too. Tests that go through many stops therefore run lldb without
--batch, reading its commands from `-o` and quitting at the end of stdin (/dev/null)."""
from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from support.env import ROOT, require_tool, scrubbed_env
from support.reports import Report, parse_reports
from support.run import Result, run
from ualdbg.engines import qemu
from ualdbg.isa.arch import arch_by_name

GDB_ENTRY = ROOT / "gdb" / "ualdbg.py"
LLDB_ENTRY = ROOT / "lldb" / "ualdbg.py"
EXITED = re.compile(r"^Process \d+ exited with status = (-?\d+)", re.M)


# --- gdb ------------------------------------------------------------------------------------

def run_gdb(program: list[str], commands: list[str], *, source: bool = True, timeout: float = 120,
            env: dict[str, str] | None = None, cwd: Path | None = None) -> Result:
    """gdb -batch: `source gdb/ualdbg.py` (unless not `source`), then each command, on `program`."""
    cmd = [require_tool("gdb"), "-q", "-nx", "-batch"]
    if source:
        cmd += ["-x", str(GDB_ENTRY)]
    for c in commands:
        cmd += ["-ex", c]
    if program:
        cmd += ["--args", *program]
    return run(cmd, env=scrubbed_env(env), cwd=cwd, timeout=timeout).fail_on_timeout()


def run_gdb_script(program: list[str], script: str, tmp_path: Path, **kw: object) -> Result:
    """Run a Python script inside gdb (after ualdbg is sourced)."""
    path = tmp_path / "drive.py"
    path.write_text(script)
    return run_gdb(program, [f"source {path}"], **kw)  # type: ignore[arg-type]


GDB_BREAK_THROUGH = """
import gdb
for command in {before!r}:
    gdb.execute(command)
gdb.execute("ualdbg break {opts}")
gdb.execute("run")
while gdb.selected_inferior().pid:
    gdb.execute("continue")
code = gdb.convenience_variable("_exitcode")
print("EXIT-STATUS", None if code is None else int(code))
"""


def gdb_break_through(program: list[str], tmp_path: Path, opts: str = "", *, before: Sequence[str] = (),
                      **kw: object) -> tuple[Result, list[Report], int | None]:
    """`before` (gdb commands), `ualdbg break`, run, and `continue` at every stop until the
    program exits."""
    result = run_gdb_script(program, GDB_BREAK_THROUGH.format(opts=opts, before=list(before)), tmp_path, **kw)
    m = re.search(r"^EXIT-STATUS (\S+)$", result.stdout, re.M)
    status = int(m.group(1)) if m and m.group(1) != "None" else None
    return result, parse_reports(result.stdout), status


# --- lldb -----------------------------------------------------------------------------------

def lldb_path() -> str:
    for name in ("lldb-19", "lldb"):
        if shutil.which(name):
            return require_tool(name)
    return require_tool("lldb-19")


def run_lldb(program: list[str], commands: list[str], *, crash: Sequence[str] = (), batch: bool = True,
             source: bool = True, timeout: float = 180, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> Result:
    """lldb --no-lldbinit: `command script import lldb/ualdbg.py` (unless not `source`), each
    command as `-o`, each of `crash` as `-k`, on `program`."""
    cmd = [lldb_path(), "--no-lldbinit"] + (["--batch"] if batch else [])
    if source:
        cmd += ["-o", f"command script import {LLDB_ENTRY}"]
    for c in commands:
        cmd += ["-o", c]
    for c in crash:
        cmd += ["-k", c]
    if program:
        cmd += ["--", *program]
    return run(cmd, env=scrubbed_env(env), cwd=cwd, timeout=timeout).fail_on_timeout()


def lldb_exit_status(result: Result) -> int | None:
    m = EXITED.search(result.stdout)
    return int(m.group(1)) if m else None


def lldb_break_through(program: list[str], opts: str = "", *, stops: int, before: Sequence[str] = (),
                       launch: str = "process launch", **kw: object) -> tuple[Result, list[Report], int | None]:
    """`ualdbg break`, launch, and `continue` at every stop (up to `stops` of them, plus a few)
    until the program exits."""
    commands = [*before, f"ualdbg break {opts}".strip(), launch] + ["continue"] * (stops + 3)
    result = run_lldb(program, commands, batch=False, **kw)  # type: ignore[arg-type]
    return result, parse_reports(result.stdout), lldb_exit_status(result)


# --- gdb-multiarch against qemu-user ----------------------------------------------------------

def run_gdb_multiarch(arch: str, program: list[str], commands: list[str], timeout: float = 120) -> Result:
    """qemu-ARCH -g on a private socket, gdb-multiarch -batch connected to it running `commands`
    after `source gdb/ualdbg.py`; the program's own output is in the result's stdout too, and
    its (status, signal) in program_exit."""
    info = arch_by_name(arch)
    gdb = require_tool("gdb-multiarch")
    with tempfile.TemporaryDirectory(prefix="ualdbg-cross-") as tmp:
        out_path = Path(tmp) / "out"
        with open(out_path, "w") as out:
            target = qemu.start(info, program, tmp, stdout=out)
            cmd = [gdb, "-q", "-nx", "-batch", "-ex", f"file {program[0]}"]
            if info.sysroot:
                cmd += ["-ex", f"set sysroot {info.sysroot}"]
            cmd += ["-ex", f"target remote {target.endpoint}", "-x", str(GDB_ENTRY)]
            for c in commands:
                cmd += ["-ex", c]
            try:
                result = run(cmd, timeout=timeout, output=out)
                if not result.timed_out:
                    result.program_exit = target.wait(timeout=10)
            finally:
                target.stop()
        result.stdout = out_path.read_text(errors="replace")  # with what qemu wrote after gdb ended
    return result.fail_on_timeout()


# --- one test body for both debuggers (tests/debuggers/) ----------------------------------------

DEBUGGERS = ("gdb", "lldb")


def run_debugger(debugger: str, program: list[str], commands: list[str], *, timeout: float = 120,
                 env: dict[str, str] | None = None) -> Result:
    """The same ualdbg and debugger commands (`run`, `continue` and `ualdbg ...` are spelled alike
    in both) under gdb -batch or lldb; lldb reads them as `-o` without --batch (module
    docstring: its --batch skips the rest after a SIGBUS stop) and quits at the end of stdin."""
    if debugger == "gdb":
        return run_gdb(program, commands, timeout=timeout, env=env)
    return run_lldb(program, commands, batch=False, timeout=timeout, env=env)
