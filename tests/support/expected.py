"""The expected counts, parsed from examples/README.md (one source of truth for docs and tests),
and a JSON document's counts in the same shape."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.env import EXAMPLES


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


def by_location(doc: dict[str, Any]) -> Counter[str]:
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
