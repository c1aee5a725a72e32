"""Helpers of the data/audit tests: a CLI trace as JSON, and declaration lines looked up in the
example sources (so expected lines come from the source, not from the code under test). The
programs of tests/data/programs are fixtures of tests/data/conftest.py."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support.cli import run_cli
from support.env import BUILD, EXAMPLES


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
    assert out.exists(), p.explain()
    return json.loads(out.read_text()), p.stdout + "\n" + p.explain()


