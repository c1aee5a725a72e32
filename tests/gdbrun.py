"""Run real gdb in batch mode the way CPython's test_gdb does: -nx, scrubbed environment,
stdin from /dev/null, a timeout, and the full command line and output on failure."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, require_tool, scrubbed_env


@dataclass
class Run:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return (f"command: {' '.join(self.cmd)}\nexit status: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")


def run_gdb(program: list[str], commands: list[str], *, source: bool = True, timeout: float = 120,
            env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    gdb = require_tool("gdb")
    cmd = [gdb, "-q", "-nx", "-batch"]
    if source:
        cmd += ["-x", str(ROOT / "gdb" / "ualdbg.py")]
    for c in commands:
        cmd += ["-ex", c]
    cmd += ["--args", *program]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          env=scrubbed_env(env), cwd=cwd or ROOT)
    return Run(cmd, proc.returncode, proc.stdout, proc.stderr)


def run_gdb_script(program: list[str], script: str, tmp_path: Path, **kw: object) -> Run:
    """Run a Python script inside gdb (after ualdbg is sourced)."""
    path = tmp_path / "drive.py"
    path.write_text(script)
    return run_gdb(program, [f"source {path}"], **kw)  # type: ignore[arg-type]


import re  # noqa: E402

REPORT1 = re.compile(r"^Unaligned data access: virtual address = (0x[0-9a-f]+|unknown.*), PC = (0x[0-9a-f]+)$")
REPORT2 = re.compile(r"^  (\d+|unknown)-(?:byte|size) (read-write|read|write|access), (.+?)(?:, (\S+):(\d+))?(?:  \[thread (\d+)\])?$")


@dataclass(frozen=True)
class Report:
    va: int | None
    pc: int
    size: int | None
    access: str
    where: str
    file: str | None
    line: int | None
    tid: int | None

    @property
    def location(self) -> str:
        if self.file and self.line:
            return f"{Path(self.file).name}:{self.line}"
        return self.where.split(" in ")[0]


def parse_reports(text: str) -> list[Report]:
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = REPORT1.match(line)
        if not m or i + 1 >= len(lines):
            continue
        m2 = REPORT2.match(lines[i + 1])
        assert m2, f"malformed report line: {lines[i + 1]!r}"
        va = int(m.group(1), 16) if m.group(1).startswith("0x") else None
        out.append(Report(va, int(m.group(2), 16), int(m2.group(1)) if m2.group(1).isdigit() else None,
                          m2.group(2), m2.group(3), m2.group(4), int(m2.group(5)) if m2.group(5) else None,
                          int(m2.group(6)) if m2.group(6) else None))
    return out


BREAK_THROUGH = """
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


def break_through(program: list[str], tmp_path: Path, opts: str = "", *, before: list[str] = (),  # type: ignore[assignment]
                  **kw: object) -> tuple[Run, list[Report], int | None]:
    """`before` (gdb commands), `ualdbg break`, run, and `continue` at every stop until the
    program exits."""
    run = run_gdb_script(program, BREAK_THROUGH.format(opts=opts, before=list(before)), tmp_path, **kw)
    m = re.search(r"^EXIT-STATUS (\S+)$", run.stdout, re.M)
    status = int(m.group(1)) if m and m.group(1) != "None" else None
    return run, parse_reports(run.stdout), status
