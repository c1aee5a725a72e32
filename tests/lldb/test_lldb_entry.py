"""`lldb/ualdbg.py`: imported from anywhere, twice, after `script import ualdbg`, and one
actionable line when lldb's Python cannot run it."""
from __future__ import annotations

import os
import re
from pathlib import Path

from support.debuggers import LLDB_ENTRY, run_lldb
from support.env import BUILD, ROOT


def _works(run) -> None:  # type: ignore[no-untyped-def]
    assert run.stdout.count("Unaligned data access") == 1, run.explain()
    assert "error:" not in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr, run.explain()


def test_import_by_relative_path_from_another_directory_twice(tmp_path: Path) -> None:
    rel = os.path.relpath(LLDB_ENTRY, tmp_path)
    run = run_lldb([str(BUILD / "not_aligned"), "1"], [f"command script import {rel}", f"command script import {rel}",
                                                       "ualdbg break", "process launch"], source=False, cwd=tmp_path)
    _works(run)


def test_import_after_script_import_ualdbg() -> None:
    # From the repository root `script import ualdbg` finds the package itself; from lldb/ it
    # finds the entry file. Either way the command import that follows installs ualdbg.
    for cwd, entry in ((ROOT, "lldb/ualdbg.py"), (ROOT / "lldb", "ualdbg.py")):
        run = run_lldb([str(BUILD / "not_aligned"), "1"], ["script import ualdbg", f"command script import {entry}",
                                                           f"command script import {LLDB_ENTRY}", "ualdbg break",
                                                           "process launch"], source=False, cwd=cwd)
        _works(run)


def test_commands_are_installed_once() -> None:
    run = run_lldb([], ["command script import " + str(LLDB_ENTRY), "help ualdbg"])
    assert len(re.findall(r"^\s+break\s+--", run.stdout, re.M)) == 1, run.explain()
    from commands_registry import declared_verbs

    for verb in declared_verbs():  # every declared command, generated from the one registry
        assert re.search(rf"^\s+{verb}\s+--", run.stdout, re.M), run.explain()


def test_missing_dependencies_give_one_actionable_line(tmp_path: Path) -> None:
    run = run_lldb([str(BUILD / "aligned")], ["ualdbg status"], env={"UALDBG_VENV": str(tmp_path / "novenv")})
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("ualdbg:")]
    assert len(lines) == 1, run.explain()
    assert "cannot import capstone, pyelftools, rich" in lines[0] and "make -C" in lines[0] and "setup" in lines[0], run.explain()
    assert "Traceback" not in run.stdout + run.stderr, run.explain()


def test_a_venv_for_another_python_is_named(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.99" / "site-packages").mkdir(parents=True)
    run = run_lldb([str(BUILD / "aligned")], ["ualdbg status"], env={"UALDBG_VENV": str(venv)})
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("ualdbg:")]
    assert len(lines) == 1 and "is for python3.99, not python3." in lines[0], run.explain()
