"""`gdb/ualdbg.py`: sourced from anywhere, twice, and one actionable line when it cannot work."""
from __future__ import annotations

import os
from pathlib import Path

from support.debuggers import run_gdb
from support.env import BUILD, ROOT


def test_source_by_relative_path_from_another_directory(tmp_path: Path) -> None:
    rel = os.path.relpath(ROOT / "gdb" / "ualdbg.py", tmp_path)
    run = run_gdb([str(BUILD / "not_aligned"), "1"], [f"source {rel}", f"source {rel}", "ualdbg break", "run"],
                  source=False, cwd=tmp_path)
    assert run.stdout.count("Unaligned data access") == 1, run.explain()
    assert run.stderr.strip() == "", run.explain()


def test_missing_dependencies_give_one_actionable_line(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "aligned")], ["ualdbg status"], env={"UALDBG_VENV": str(tmp_path / "novenv")})
    lines = [line for line in run.stderr.splitlines() if line.startswith("ualdbg:")]
    assert len(lines) == 1, run.explain()
    assert "cannot import capstone, pyelftools, rich" in lines[0] and "make -C" in lines[0] and "setup" in lines[0], run.explain()
    assert "Traceback" not in run.stderr, run.explain()


def test_a_too_old_gdb_is_refused_with_one_line(tmp_path: Path) -> None:
    # No gdb older than 12.1 is installable here: present this one as 11.2 to the entry script.
    entry = ROOT / "gdb" / "ualdbg.py"
    run = run_gdb([str(BUILD / "aligned")], ["python import gdb; gdb.VERSION = '11.2'", f"source {entry}", "ualdbg status"],
                  source=False)
    lines = [line for line in run.stderr.splitlines() if line.startswith("ualdbg:")]
    assert lines == ["ualdbg: gdb 11.2 is too old; ualdbg needs gdb 12.1 or newer"], run.explain()
    assert 'Undefined command: "ualdbg"' in run.stderr and "Traceback" not in run.stderr, run.explain()
