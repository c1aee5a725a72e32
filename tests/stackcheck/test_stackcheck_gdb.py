"""`ualdbg stackcheck` as a gdb command on the loaded program: the sweep runs in a child gdb,
the user's session (breakpoints, the stopped process, `run` arguments) is left as it was."""
from __future__ import annotations

import json
from pathlib import Path

from support.debuggers import run_gdb
from support.env import BUILD


def test_gdb_command_on_the_loaded_program(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    run = run_gdb([str(BUILD / "stack_double"), "3"], [
        "break relax", "run",
        f"ualdbg stackcheck --var main:x --env-pad 0-16/8 --argv0-lengths 4 --json {out}",
        "info breakpoints", "bt 1", "continue",
    ])
    assert out.exists(), run.explain()
    doc = json.loads(out.read_text())
    assert doc["program"]["argv"][1:] == ["3"] and len(doc["variants"]) == 3, run.explain()
    assert doc["program"]["path"] == str(BUILD / "stack_double")
    assert "less LINES and COLUMNS" in doc["environment"]["note"]
    x = next(v for v in doc["verdicts"] if v["item"] == "main:x")
    assert x["misaligned_in"] == [] and x["measured"] == 3
    assert "ualdbg stackcheck: ok" in run.stdout and "main:x (8)" in run.stdout
    # the user's session goes on: still stopped in relax, the breakpoint kept, the program finishes
    assert "#0  relax" in run.stdout and "breakpoint already hit 1 time" in run.stdout, run.explain()
    assert "passes=3" in run.stdout and "exited normally" in run.stdout, run.explain()


def test_gdb_command_errors_are_one_line() -> None:
    run = run_gdb([str(BUILD / "stack_double")], ["ualdbg stackcheck --var main:nosuch", "ualdbg stackcheck --env-pad 5-1",
                                                  "echo STILL-HERE\\n"])
    assert "main has no local or parameter 'nosuch'" in run.stderr, run.explain()
    assert "5 is more than 1" in run.stderr and "Traceback" not in run.stderr + run.stdout
    assert "STILL-HERE" in run.stdout


def test_gdb_command_with_no_program_loaded_takes_one_after_dashes(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    # `file` with no argument unloads what run_gdb loaded
    run = run_gdb([str(BUILD / "aligned")], ["file", f"ualdbg stackcheck --env-pad 0-8/8 --json {out} -- {BUILD / 'stack_double'} 2"])
    assert out.exists(), run.explain()
    doc = json.loads(out.read_text())
    assert doc["program"]["argv"] == [str(BUILD / "stack_double"), "2"] and len(doc["variants"]) == 2, run.explain()
    assert doc["environment"]["note"] == "environment: the debugger's own (no program loaded)"
