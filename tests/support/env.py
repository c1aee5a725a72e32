"""Where the repository is, what a test may assume of the machine, and the environment every
command of a test runs in."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
EXAMPLES = ROOT / "examples"
BUILD = EXAMPLES / "build"
FIXTURES = TESTS / "fixtures"


def require_tool(name: str) -> str:
    """A missing tool skips locally and fails under CI (CI=true must never pass by skipping)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed, and CI must not skip debugger tests")
        pytest.skip(f"{name} is not installed")
    return path


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without anything that changes ualdbg, Python or the debuggers,
    no terminal size, no colour; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UALDBG_", "PYTHON", "LLDB", "GDB"))}
    env.update(TERM="dumb", NO_COLOR="1", LC_ALL="C.UTF-8")
    env.pop("LINES", None)
    env.pop("COLUMNS", None)
    if extra:
        env.update(extra)
    return env
