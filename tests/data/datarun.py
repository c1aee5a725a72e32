"""Helpers of the data/audit tests: a CLI trace as JSON, and declaration lines looked up in the
example sources (so expected lines come from the source, not from the code under test)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from clirun import explain, run_cli
from conftest import BUILD, EXAMPLES


def decl_line(source: str, pattern: str) -> int:
    """The 1-based line of the only line of examples/SOURCE matching the regex."""
    lines = [i for i, text in enumerate((EXAMPLES / source).read_text().split("\n"), 1) if re.search(pattern, text)]
    assert len(lines) == 1, (source, pattern, lines)
    return lines[0]


def cli_trace(prog: str, *args: str, tmp_path: Path, engine: str | None = None,
              options: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    out = tmp_path / f"{prog}.json"
    cmd = ["trace", "--json", str(out), *(["--engine", engine] if engine else []), *options, "--", str(BUILD / prog),
           *args]
    p = run_cli(*cmd)
    assert out.exists(), explain(p)
    return json.loads(out.read_text()), p.stdout + "\n" + explain(p)



PROGRAMS = Path(__file__).resolve().parent / "programs"


def build(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data-programs") / name
    # Compiled from its folder with a bare file name, so DWARF names it NAME.c.
    subprocess.run(["gcc", "-g", "-O1", "-Wall", "-o", str(out), f"{name}.c"], check=True, cwd=PROGRAMS)
    return out


@pytest.fixture(scope="session", name="stack_locals")
def stack_locals_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/programs/stack_locals.c, built once; imported by the modules that use it."""
    return build("stack_locals", tmp_path_factory)


@pytest.fixture(scope="session", name="libc_data")
def libc_data_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("libc_data", tmp_path_factory)
