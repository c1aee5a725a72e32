"""The real binaries the DWARF readers are compared on (tests/symbols/test_line_programs.py,
test_abbrevs.py, test_dieparse.py, test_rangelists.py, test_loclists.py): every example with
DWARF (32-bit and Fortran among them), examples/threads.c built with DWARF 4 and with DWARF 5 at
-O2, and the agent (-O2 -g)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.env import BUILD, EXAMPLES

from ualdbg.agent.build import build
from ualdbg.symbols.elfindex import ElfIndex


@pytest.fixture(scope="session")
def dwarf_binaries(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("dwarf")
    paths = [p for p in sorted(BUILD.iterdir())
             if p.is_file() and p.read_bytes()[:4] == b"\x7fELF" and ElfIndex(str(p)).dwarf is not None]
    for version in ("4", "5"):
        exe = out / f"threads-dwarf{version}"
        subprocess.run(["gcc", f"-gdwarf-{version}", "-O2", "-pthread", "-o", str(exe), str(EXAMPLES / "threads.c")],
                       check=True)
        paths.append(exe)
    paths.append(build())
    return paths
