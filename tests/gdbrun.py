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
