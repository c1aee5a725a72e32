"""The two lines of a `ualdbg break` report, as gdb and lldb print them alike."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
