"""Run the `ualdbg` shell command as a user would, with a scrubbed environment and a timeout;
a failing test prints the full command and output."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, scrubbed_env


def run_cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ualdbg", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=scrubbed_env(env), cwd=ROOT,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def explain(p: subprocess.CompletedProcess[str]) -> str:
    return f"command: {' '.join(p.args)}\nexit {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}"
