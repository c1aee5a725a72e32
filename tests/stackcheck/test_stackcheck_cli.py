"""`ualdbg stackcheck` from the shell on the examples: the tool's addresses are the ones the
program prints about itself in the same run, the verdicts are this platform's truth for the
x86-64 and i386 builds of stack_double, argv_fields' misaligning variants are named exactly,
and the JSON, exit statuses and bad-input errors are as documented."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from support.cli import run_cli
from support.env import BUILD, require_tool
from support.run import Result


def stackcheck(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> Result:
    require_tool("gdb")
    return run_cli("stackcheck", *args, env=env, timeout=timeout)


OWN_TEMP = ("ualdbg-stackcheck-", "ualdbg-exec-")


def run_json(tmp_path: Path, *args: str, expect: int = 0, env: dict[str, str] | None = None) -> dict:
    out = tmp_path / "sc.json"
    p = stackcheck("--json", str(out), *args, env=env)
    assert p.returncode == expect, p.explain()
    doc = json.loads(out.read_text())
    doc["_explain"] = p.explain()
    return doc


def addr(variant: dict, item: str) -> int:
    return int(variant["addresses"][item]["address"], 16)


def verdict(doc: dict, item: str) -> dict:
    return next(v for v in doc["verdicts"] if v["item"] == item)


@pytest.mark.parametrize("prog", ["stack_double", "stack_double_m32"])
def test_stack_double_addresses_are_the_programs_own(prog: str, tmp_path: Path) -> None:
    """Every variant, run to its end: &x read by the debugger == &x the program printed."""
    doc = run_json(tmp_path, "--argv0-lengths", "1-4", "--env-pad", "0-28/4", "--aslr", "2", "--run-to-exit",
                   "--", f"examples/build/{prog}", "3")
    assert len(doc["variants"]) == 4 * 8 + 2, doc["_explain"]
    for v in doc["variants"]:
        m = re.search(r"&x = (0x[0-9a-f]+)", v["output"] or "")
        assert m, (v, doc["_explain"])
        assert addr(v, "main:x") == int(m.group(1), 16), v
        assert v["exit_status"] == 0 and v["error"] is None
        # argc sits one word below argv[]; the kernel leaves the entry stack 16-aligned
        assert addr(v, "sp_entry") % 16 == 0


@pytest.mark.parametrize("prog,word", [("stack_double", 8), ("stack_double_m32", 4)])
def test_stack_double_truth_of_this_platform(prog: str, word: int, tmp_path: Path) -> None:
    """gcc 12 keeps the double array 8-aligned on x86-64 and (by realigning main) on i386 with
    a 4-byte stack boundary: no misalignment in any variant. Its cache-line offset (mod 64)
    does move with the environment size when ASLR is off (PLATFORM.md)."""
    doc = run_json(tmp_path, "--var", "main:x", "--env-pad", "0-64/4", "--run-to-exit", "--", f"examples/build/{prog}", "3")
    x = verdict(doc, "main:x")
    assert x["align"] == 8 and x["verdict"] == "moves" and x["misaligned_in"] == [], doc["_explain"]
    assert 64 in x["moves_modulo"] and len(x["distinct"]["64"]) >= 2
    assert doc["arch"] == ("x86_64" if word == 8 else "i386") and doc["exit"] == 0
    item = next(i for i in doc["items"] if i["id"] == "main:x")
    assert item["type"] == "double[64]" and item["size"] == 512
    # The program's own view agrees: its printed mod 64 values are the tool's.
    printed = {int(re.search(r"mod 64 = (\d+)", v["output"]).group(1)) for v in doc["variants"]}
    assert printed == set(x["distinct"]["64"])
    # sp at main's entry keeps the call ABI (sp + word is 16-aligned) in every variant.
    assert all((addr(v, "sp_main") + word) % 16 == 0 for v in doc["variants"])


def test_default_items_are_mains_8_byte_locals(tmp_path: Path) -> None:
    doc = run_json(tmp_path, "--env-pad", "0", "--", "examples/build/stack_double")
    ids = [i["id"] for i in doc["items"]]
    assert ids == ["sp_entry", "sp_main", "main:x", "argv[0]"], doc["_explain"]
    assert any("never live in memory" in n and " a" in n for n in doc["notes"])


def expected_argv_fields(a: int) -> set[str]:
    """The faulting lines of argv_fields for argv[1] at address a."""
    lines = set()
    if a % 4:
        lines.add("argv_fields.c:37")
    if (a + 4) % 8:
        lines.add("argv_fields.c:38")
    return lines


def test_argv_fields_misaligning_variants_are_named_exactly(tmp_path: Path) -> None:
    doc = run_json(tmp_path, "--env-pad", "1-8", "--argv0-lengths", "3", "--trace", "--run-to-exit",
                   "--", "examples/build/argv_fields", "ABCDEFGHIJKLMNOP", "5", expect=1)
    seen_clean = seen_faulty = False
    for v in doc["variants"]:
        printed = int(re.search(r"argv\[1\] = (0x[0-9a-f]+)", v["output"]).group(1), 16)
        a = addr(v, "argv[1]")
        assert a == printed, (v, doc["_explain"])
        want = expected_argv_fields(a)
        got = {s["location"] for s in v["trace"]["sites"]}
        assert got == want, (v["label"], hex(a), v["trace"], doc["_explain"])
        assert all(s["count"] == 5 for s in v["trace"]["sites"])
        seen_clean |= not want
        seen_faulty |= bool(want)
    assert seen_clean and seen_faulty, "8 consecutive pad lengths put argv[1] at every address mod 8"
    faulty = [v["id"] for v in doc["variants"] if expected_argv_fields(addr(v, "argv[1]"))]
    assert doc["trace"]["variants_with_faults"] == faulty
    assert any("traced variant" in r for r in doc["reasons"])
    # argv[1] lies above argv[0]: argv[0]'s length never moves it, the environment always does.
    assert len(verdict(doc, "argv[1]")["distinct"]["8"]) == 8


def test_argv0_length_moves_sp_but_not_the_strings_above_it(tmp_path: Path) -> None:
    # 17 lengths, not 16: the entry sp is 16-aligned, and 16 consecutive string sizes can all
    # round to one sp (for 1 in 16 checkout paths: the program's path sits on the stack too).
    doc = run_json(tmp_path, "--argv0-lengths", "1-17", "--env-pad", "0", "--", "examples/build/argv_fields", "ABCDEFGHIJKLMNOP")
    assert len({addr(v, "argv[1]") for v in doc["variants"]}) == 1, doc["_explain"]
    assert len({addr(v, "argv[0]") for v in doc["variants"]}) == 17
    assert len({addr(v, "sp_entry") for v in doc["variants"]}) >= 2
    assert [v["argv0_length"] for v in doc["variants"]] == list(range(1, 18))
    assert [len(v["argv0"]) for v in doc["variants"]] == list(range(1, 18))


def test_environment_strings_and_padding_are_exact(tmp_path: Path) -> None:
    env = {"ARGV_FIELDS": "WXYZ-and-more"}
    doc = run_json(tmp_path, "--env", "ARGV_FIELDS", "--env-pad", "0-3", "--run-to-exit", "--trace",
                   "--", "examples/build/argv_fields", "ABCDEFGHIJKLMNOP", "2", env=env, expect=1)
    for v in doc["variants"]:
        # the program prints the address of the value, the tool the NAME=VALUE string's
        printed = int(re.search(r"ARGV_FIELDS value = (0x[0-9a-f]+)", v["output"]).group(1), 16)
        assert addr(v, "env ARGV_FIELDS") + len("ARGV_FIELDS=") == printed, doc["_explain"]
        assert v["env_added"] == ({"UALDBG_PAD": "x" * v["env_pad"]} if v["env_pad"] else {})
        env_line = (printed % 4) != 0
        assert ("argv_fields.c:48" in {s["location"] for s in v["trace"]["sites"]}) == env_line
    assert doc["environment"]["padding"]["name"] == "UALDBG_PAD"


def test_json_document_shape_aslr_and_timing(tmp_path: Path) -> None:
    doc = run_json(tmp_path, "--argv0-lengths", "2,5", "--env-pad", "0-8/8", "--aslr", "3", "--time", "2",
                   "--", "examples/build/stack_double", "1")
    assert doc["schema"] == 1 and doc["tool"] == "ualdbg" and doc["document"] == "stackcheck", doc["_explain"]
    assert doc["debugger"] == "gdb" and doc["aslr_runs"] == 3
    assert [v["label"] for v in doc["variants"]] == [
        "argv0=2 pad=0", "argv0=2 pad=8", "argv0=5 pad=0", "argv0=5 pad=8", "ASLR on #1", "ASLR on #2", "ASLR on #3"]
    aslr = [v for v in doc["variants"] if v["aslr"]]
    assert len(aslr) == 3 and all(not v["aslr"] for v in doc["variants"][:4])
    # Randomization moves the stack by pages and 16-byte steps: three runs never share it.
    assert len({addr(v, "sp_entry") for v in aslr}) == 3
    fixed = doc["variants"][:4]
    assert all(addr(v, "sp_entry") >> 20 == addr(fixed[0], "sp_entry") >> 20 for v in fixed)
    for v in doc["variants"]:
        t = v["time"]
        assert t["runs"] == 2 and t["min_s"] <= t["median_s"] <= t["max_s"] and len(t["times_s"]) == 2
        for a in v["addresses"].values():
            assert set(a) >= {"address", "16", "32", "64", "4096"}
    assert doc["timing"]["spread_pct"] >= 0 and doc["timing"]["exceeded"] is False
    assert {"item", "verdict", "text", "misaligned_in", "moves_modulo"} <= set(doc["verdicts"][0])


def test_max_spread_sets_exit_status(tmp_path: Path) -> None:
    doc = run_json(tmp_path, "--env-pad", "0-8/8", "--time", "2", "--max-spread", "0", "--", "examples/build/stack_double", "1",
                   expect=1)
    assert doc["timing"]["exceeded"] and any("--max-spread" in r for r in doc["reasons"]), doc["_explain"]
    doc = run_json(tmp_path, "--env-pad", "0-8/8", "--time", "2", "--max-spread", "1000000", "--",
                   "examples/build/stack_double", "1", expect=0)
    assert doc["timing"]["exceeded"] is False and doc["exit"] == 0


def test_table_and_verdicts_on_stdout() -> None:
    p = stackcheck("--argv0-lengths", "1-2", "--env-pad", "0-4/4", "--", "examples/build/stack_double", "1")
    assert p.returncode == 0, p.explain()
    assert "across 4 variants" in p.stdout and "main:x (8)" in p.stdout
    assert "always 8-byte aligned, but" in p.stdout
    assert p.stdout.rstrip().endswith("ualdbg stackcheck: ok: no item misaligned for its type in any variant")
    assert p.stderr == ""


def test_json_to_stdout_is_only_json() -> None:
    p = stackcheck("--json", "-", "--env-pad", "0", "--", "examples/build/stack_double")
    assert p.returncode == 0, p.explain()
    assert json.loads(p.stdout)["document"] == "stackcheck"


def test_no_copies_links_or_helpers_are_left_behind(tmp_path: Path) -> None:
    before = set(os.listdir(tempfile.gettempdir()))
    build_before = set(os.listdir(BUILD))
    run_json(tmp_path, "--argv0-lengths", "1-3", "--env-pad", "0", "--time", "1", "--trace", "--", "examples/build/stack_double", "1")
    # stackcheck's own temporary folders (other ualdbg runs on this machine make ualdbg-* too)
    assert {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(OWN_TEMP)} == set()
    assert set(os.listdir(BUILD)) == build_before


@pytest.mark.parametrize("args,message", [
    (["--argv0-lengths", "9-3", "--", "examples/build/stack_double"], "9 is more than 3"),
    (["--argv0-lengths", "0-3", "--", "examples/build/stack_double"], "lengths start at 1"),
    (["--env-pad", "a-b", "--", "examples/build/stack_double"], "not a range"),
    (["--env-pad", "0-8/0", "--", "examples/build/stack_double"], "step must be positive"),
    (["--var", "main:nosuch", "--", "examples/build/stack_double"], "main has no local or parameter 'nosuch'"),
    (["--var", "nofunc:x", "--", "examples/build/stack_double"], "no function 'nofunc'"),
    (["--var", "x", "--", "examples/build/stack_double"], "write FUNC:NAME"),
    (["--env", "UALDBG_NOT_SET_ANYWHERE", "--", "examples/build/stack_double"], "not in the environment"),
    (["--time", "0", "--max-spread", "5", "--", "examples/build/stack_double"], "--max-spread needs --time"),
    ([], "name the program after --"),
    (["--aslr", "-1", "--", "examples/build/stack_double"], "must be zero or more"),
    (["--trace", "--", "examples/build/stack_double_m32"], "the trap engine runs x86-64 programs, not i386 ones"),
    (["--debugger", "dbx", "--", "examples/build/stack_double"], "invalid choice: 'dbx'"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    p = stackcheck(*args)
    assert p.returncode == 2, p.explain()
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.explain()
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("args", "message", "status"), [
    (["--", "examples/build/no_such_program"], "no such file", 127),
    (["--", "no_such_program_on_path"], "not found", 127),
    (["--", "examples/README.md"], "not an ELF", 126),
])
def test_a_program_that_cannot_run_gets_the_shells_status(args: list[str], message: str, status: int) -> None:
    """As timeout(1) and env(1) (issue 29): 127 not found, 126 cannot execute, never 2, which a
    program's own failure could be."""
    p = stackcheck(*args)
    assert p.returncode == status, p.explain()
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.explain()
