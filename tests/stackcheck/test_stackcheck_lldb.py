"""`ualdbg stackcheck` measured by real lldb-19: from the shell (`--debugger lldb`) and as an lldb
command on the loaded program. The addresses lldb reads are the ones the program prints about
itself in the same run, and the ones gdb reads for the same variants (the exec helper gives both
debuggers byte-identical argv and environments); --trace under lldb counts what gdb counts."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from support.build import build_program
from support.cli import run_cli
from support.debuggers import lldb_path, run_lldb
from support.env import BUILD, require_tool
from support.run import Result


def stackcheck(*args: str, env: dict[str, str] | None = None) -> Result:
    lldb_path()
    return run_cli("stackcheck", *args, env=env, timeout=600)


OWN_TEMP = ("ualdbg-stackcheck-", "ualdbg-exec-")


def run_json(tmp_path: Path, *args: str, expect: int = 0, env: dict[str, str] | None = None, name: str = "sc") -> dict:
    out = tmp_path / f"{name}.json"
    p = stackcheck("--json", str(out), *args, env=env)
    assert p.returncode == expect, p.explain()
    doc = json.loads(out.read_text())
    doc["_explain"] = p.explain()
    return doc


def addr(variant: dict, item: str) -> int:
    return int(variant["addresses"][item]["address"], 16)


@pytest.mark.parametrize("prog", ["stack_double", "stack_double_m32"])
def test_lldb_addresses_are_the_programs_own_and_gdbs(prog: str, tmp_path: Path) -> None:
    """main:x as the program printed it, in every variant (ASLR ones too); every address of the
    ASLR-off variants equal to gdb's, parameters of another function (relax) included. The
    i386 build realigns main's frame: lldb must still place x right (a 32-bit exec helper)."""
    require_tool("gdb")
    sweep = ["--var", "main:x", "--var", "relax:x", "--var", "relax:passes", "--argv0-lengths", "1,7",
             "--env-pad", "0-12/4", "--run-to-exit", "--", f"examples/build/{prog}", "3"]
    lldb = run_json(tmp_path, "--debugger", "lldb", "--aslr", "2", *sweep, name="lldb")
    gdb = run_json(tmp_path, "--debugger", "gdb", *sweep, name="gdb")
    assert lldb["debugger"] == "lldb" and len(lldb["variants"]) == 2 * 4 + 2, lldb["_explain"]
    for v in lldb["variants"]:
        m = re.search(r"&x = (0x[0-9a-f]+)", v["output"] or "")
        assert m and v["error"] is None and v["exit_status"] == 0, (v, lldb["_explain"])
        assert addr(v, "main:x") == int(m.group(1), 16), v
        assert addr(v, "sp_entry") % 16 == 0
    fixed = [v for v in lldb["variants"] if not v["aslr"]]
    assert len({addr(v, "main:x") for v in fixed}) >= 2  # the sweep really moves x
    for lv, gv in zip(fixed, gdb["variants"]):
        assert lv["label"] == gv["label"]
        assert {k: a["address"] for k, a in lv["addresses"].items()} == {k: a["address"] for k, a in gv["addresses"].items()}, \
            (lv, gv)
    assert [v["verdict"] for v in lldb["verdicts"][:3]] == [v["verdict"] for v in gdb["verdicts"][:3]]


def test_lldb_argv_and_environment_strings(tmp_path: Path) -> None:
    """argv[1] and the ARGV_FIELDS string where the program sees them, across padding lengths
    that put argv[1] at every address mod 8."""
    doc = run_json(tmp_path, "--debugger", "lldb", "--env", "ARGV_FIELDS", "--env-pad", "1-8", "--run-to-exit",
                   "--", "examples/build/argv_fields", "ABCDEFGHIJKLMNOP", "2", env={"ARGV_FIELDS": "WXYZ-and-more"})
    for v in doc["variants"]:
        printed = int(re.search(r"argv\[1\] = (0x[0-9a-f]+)", v["output"]).group(1), 16)
        assert addr(v, "argv[1]") == printed, (v, doc["_explain"])
        value = int(re.search(r"ARGV_FIELDS value = (0x[0-9a-f]+)", v["output"]).group(1), 16)
        assert addr(v, "env ARGV_FIELDS") + len("ARGV_FIELDS=") == value
    verdict = next(v for v in doc["verdicts"] if v["item"] == "argv[1]")
    assert verdict["distinct"]["8"] == list(range(8)), doc["_explain"]


def test_lldb_leaves_nothing_behind(tmp_path: Path) -> None:
    before = set(os.listdir(tempfile.gettempdir()))
    build_before = set(os.listdir(BUILD))
    run_json(tmp_path, "--debugger", "lldb", "--argv0-lengths", "1-3", "--env-pad", "0", "--trace",
             "--", "examples/build/stack_double", "1")
    # stackcheck's own temporary folders (other ualdbg runs on this machine make ualdbg-* too)
    assert {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(OWN_TEMP)} == set()
    assert set(os.listdir(BUILD)) == build_before


def test_lldb_trace_names_the_misaligning_variants_as_gdb_does(tmp_path: Path) -> None:
    """--trace under lldb's trap engine, in the measured runs: argv_fields faults at line 37
    exactly when argv[1] mod 4 != 0 and at line 38 when (argv[1] + 4) mod 8 != 0, and every
    variant's counts (in scope and ignored, in libc) are gdb's."""
    require_tool("gdb")
    sweep = ["--env-pad", "1-8", "--trace", "--run-to-exit", "--", "examples/build/argv_fields", "ABCDEFGHIJKLMNOP", "5"]
    lldb = run_json(tmp_path, "--debugger", "lldb", *sweep, expect=1, name="lldb")
    gdb = run_json(tmp_path, "--debugger", "gdb", *sweep, expect=1, name="gdb")
    for lv, gv in zip(lldb["variants"], gdb["variants"]):
        a = addr(lv, "argv[1]")
        assert a == int(re.search(r"argv\[1\] = (0x[0-9a-f]+)", lv["output"]).group(1), 16), lldb["_explain"]
        want = ({"argv_fields.c:37"} if a % 4 else set()) | ({"argv_fields.c:38"} if (a + 4) % 8 else set())
        assert {s["location"] for s in lv["trace"]["sites"]} == want, (lv["label"], hex(a), lv["trace"])
        assert all(s["count"] == 5 for s in lv["trace"]["sites"])
        keys = ("faults_total", "faults_ignored", "sites", "exit_status")
        assert {k: lv["trace"][k] for k in keys} == {k: gv["trace"][k] for k in keys}, (lv["trace"], gv["trace"])
    assert lldb["trace"]["variants_with_faults"] == gdb["trace"]["variants_with_faults"] != []
    assert any("traced variant" in r for r in lldb["reasons"])


def test_lldb_command_on_the_loaded_program(tmp_path: Path) -> None:
    """In lldb, on the loaded program with its `process launch` arguments and environment; the
    sweep runs in a child lldb and the user's stopped process goes on untouched."""
    out = tmp_path / "l.json"
    run = run_lldb([str(BUILD / "stack_double"), "3"], [
        "settings set target.env-vars UALDBG_TEST_VAR=abc",
        "breakpoint set -n relax", "process launch",
        f"ualdbg stackcheck --var main:x --env UALDBG_TEST_VAR --env-pad 0-16/8 --argv0-lengths 4 --run-to-exit --trace --json {out}",
        "breakpoint list", "bt 1", "continue",
        "ualdbg stackcheck --var main:nosuch",  # last: lldb runs no -o command after a failed one
    ])
    assert out.exists(), run.explain()
    doc = json.loads(out.read_text())
    assert doc["debugger"] == "lldb" and doc["program"]["argv"][1:] == ["3"] and len(doc["variants"]) == 3, run.explain()
    assert doc["program"]["path"] == str(BUILD / "stack_double")
    assert "process launch" in doc["environment"]["note"]
    for v in doc["variants"]:
        assert addr(v, "main:x") == int(re.search(r"&x = (0x[0-9a-f]+)", v["output"]).group(1), 16), v
        assert v["addresses"]["env UALDBG_TEST_VAR"]["address"] is not None
    assert doc["trace"]["variants"] == 3 and doc["trace"]["variants_with_faults"] == [], run.explain()
    assert "ualdbg stackcheck: ok" in run.stdout and "main:x (8)" in run.stdout, run.explain()
    assert "main has no local or parameter 'nosuch'" in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr
    # the user's session goes on: still stopped in relax, the breakpoint kept, the program finishes
    assert "hit count = 1" in run.stdout and "frame #0: " in run.stdout and "`relax" in run.stdout, run.explain()
    assert "passes=3" in run.stdout and "exited with status = 0" in run.stdout, run.explain()


@pytest.mark.parametrize("debugger", ["gdb", "lldb"])
def test_statics_by_link_address_in_every_variant(debugger: str, tmp_path: Path) -> None:
    """A static of main, of a function that runs later and of one that never runs: the
    address is the link-time one plus the load bias, as the program prints it, ASLR included."""
    require_tool(debugger if debugger == "gdb" else lldb_path())
    prog = build_program(tmp_path / "statics", Path(__file__).parent / "programs" / "statics.c")
    doc = run_json(tmp_path, "--debugger", debugger, "--var", "main:table", "--var", "later:counts", "--var", "never:unused",
                   "--env-pad", "0-8/8", "--aslr", "2", "--run-to-exit", "--", str(prog))
    assert len(doc["variants"]) == 4, doc["_explain"]
    for v in doc["variants"]:
        for item, name in (("main:table", "table"), ("later:counts", "counts")):
            printed = int(re.search(rf"&{name} = (0x[0-9a-f]+)", v["output"]).group(1), 16)
            assert addr(v, item) == printed, (item, v, doc["_explain"])
        # `never` sits next to the others in .bss/.data: same load bias, never an error
        assert v["addresses"]["never:unused"]["address"] is not None and not v.get("variable_errors"), v
    assert len({addr(v, "main:table") for v in doc["variants"]}) >= 2  # the ASLR runs move it
    items = {i["id"]: i for i in doc["items"]}
    assert items["never:unused"]["storage"] == "static" and items["later:counts"]["probe"].startswith("a static at")



def test_lldb_command_with_no_program_loaded_takes_one_after_dashes(tmp_path: Path) -> None:
    out = tmp_path / "l.json"
    run = run_lldb([], [f"ualdbg stackcheck --env-pad 0-8/8 --json {out} -- {BUILD / 'stack_double'} 2"])
    assert out.exists(), run.explain()
    doc = json.loads(out.read_text())
    assert doc["debugger"] == "lldb" and doc["program"]["argv"] == [str(BUILD / "stack_double"), "2"], run.explain()
    assert len(doc["variants"]) == 2 and doc["environment"]["note"] == "environment: the debugger's own (no program loaded)"
