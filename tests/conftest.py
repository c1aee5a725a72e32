"""Shared test fixtures: the repository paths, the built examples, and the expected counts
parsed from examples/README.md (one source of truth for docs and tests)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BUILD = EXAMPLES / "build"


def require_tool(name: str) -> str:
    """A missing debugger skips locally and fails under CI (CI=true must never pass by skipping)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed, and CI must not skip debugger tests")
        pytest.skip(f"{name} is not installed")
    return path


@dataclass(frozen=True)
class Expected:
    program: str
    args: tuple[str, ...]
    location: str  # "file.c:LINE" or "-"
    count: int
    size: int | None
    access: str | None


def expected_rows() -> list[Expected]:
    rows = []
    text = (EXAMPLES / "README.md").read_text()
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("program", "") or set(cells[0]) <= set("-: "):
            continue
        prog, args, loc, count, size, access = cells
        rows.append(Expected(prog, tuple(args.split()), loc, int(count),
                             int(size) if size.isdigit() else None, access if access not in ("-", "") else None))
    return rows


def expected_by_program() -> dict[tuple[str, tuple[str, ...]], list[Expected]]:
    out: dict[tuple[str, tuple[str, ...]], list[Expected]] = {}
    for row in expected_rows():
        out.setdefault((row.program, row.args), []).append(row)
    return out


@pytest.fixture(scope="session", autouse=True)
def built_examples() -> Path:
    subprocess.run(["make", "-s", "-C", str(EXAMPLES)], check=True, capture_output=True)
    return BUILD


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UALDBG_", "PYTHON", "LLDB", "GDB"))}
    env.update(TERM="dumb", NO_COLOR="1", LC_ALL="C.UTF-8")
    env.pop("LINES", None)
    env.pop("COLUMNS", None)
    if extra:
        env.update(extra)
    return env


ADDR_RE = re.compile(r"0x[0-9a-f]+")


FIXTURE_PROGRAMS = Path(__file__).resolve().parent / "fixtures" / "programs"


@pytest.fixture(scope="session")
def test_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small programs written for one behaviour each (fork, exec, attach), built once."""
    out = tmp_path_factory.mktemp("programs")
    for src in FIXTURE_PROGRAMS.glob("*.c"):
        subprocess.run(["gcc", "-g", "-O1", "-o", str(out / src.stem), str(src)], check=True)
    return out


def by_location(doc: dict) -> Counter[str]:
    """Fault counts of a JSON document per source line (or function+offset, or module+offset
    where there is no line): the shape of examples/README.md's table."""
    got: Counter[str] = Counter()
    for s in doc["sites"]:
        if s["file"] and s["line"]:
            loc = f"{Path(s['file']).name}:{s['line']}"
        elif s["function"]:
            loc = f"{s['function']}+{s['function_offset']}"
        else:
            loc = f"{s['module']}+{s['offset']}"
        got[loc] += s["count"]
    return got
