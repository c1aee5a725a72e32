"""`--engine step` in real gdb and real lldb-19 on compiled programs: break stops BEFORE the
offending instruction with the signal-mode report plus the policy; trace records exact per-PC
counts; with policy `ac` the step and trap engines agree on every example within the scope;
calls out of the scope cost no steps; bad input gets one clear line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from stepdbgrun import DEBUGGERS, per_site, run_lldb, scope_options, trace
from support.debuggers import run_gdb, run_gdb_script
from support.env import BUILD
from support.expected import by_location, expected_by_program
from support.reports import parse_reports

EXAMPLES = sorted(expected_by_program().items())
# The cross-check needs a program run, not the README's counts: a smaller sieve keeps it short.
ARGS = {"aligned": ("200",)}


def _cmd(prog: str, args: tuple[str, ...]) -> list[str]:
    return [str(BUILD / prog), *ARGS.get(prog, args)]


@pytest.mark.parametrize("debugger", DEBUGGERS)
@pytest.mark.parametrize("key,rows", EXAMPLES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in EXAMPLES])
def test_step_ac_equals_trap_within_the_scope(debugger: str, key, rows, tmp_path: Path) -> None:
    """The cross-check of issue 6: same per-PC counts from both engines, scope = the functions
    the trap engine found faults in (main for a program without any)."""
    prog, args = key
    cmd = _cmd(prog, args)
    trap_doc, trap_run = trace(debugger, cmd, "ualdbg trace start", tmp_path / "trap.json", tmp_path)
    assert trap_doc is not None, trap_run.explain()
    opts = scope_options(BUILD / prog, trap_doc)
    step_doc, step_run = trace(debugger, cmd, f"ualdbg trace start --engine step --policy ac {opts}",
                               tmp_path / "step.json", tmp_path)
    assert step_doc is not None, step_run.explain()
    assert step_doc["engine"] == "step" and step_doc["step"]["policy"] == "ac", step_run.explain()
    assert step_doc["step"]["steps"] > 0 and step_doc["step"]["entries"] > 0, step_run.explain()
    assert per_site(step_doc) == per_site(trap_doc), (f"{debugger}: step engine ({opts}) disagrees with the trap engine\n"
                                                      f"{trap_run.explain()}\n{step_run.explain()}")
    if prog not in ARGS:  # and both match the README's table
        want = {r.location: r.count for r in rows if r.count}
        assert dict(by_location(step_doc)) == want, step_run.explain()
    assert step_doc["program"]["exit_status"] == trap_doc["program"]["exit_status"] == 0, step_run.explain()


def _break_gdb(prog: list[str], opts: str, tmp_path: Path) -> tuple[str, str]:
    script = f'''
import gdb
gdb.execute("ualdbg break --engine step {opts}")
gdb.execute("run")
while gdb.selected_inferior().pid:
    print("STOPPED-AT", hex(int(gdb.parse_and_eval("$pc"))))
    gdb.execute("continue")
code = gdb.convenience_variable("_exitcode")
print("EXIT-STATUS", None if code is None else int(code))
'''
    run = run_gdb_script(prog, script, tmp_path)
    return run.stdout, run.explain()


def _break_lldb(prog: list[str], opts: str, stops: int) -> tuple[str, str]:
    commands = [f"ualdbg break --engine step {opts}", "process launch"]
    for _ in range(stops + 2):
        commands += ["p/x $pc", "continue"]
    run = run_lldb(prog, commands, batch=False)
    return run.stdout, run.explain()


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_break_stops_before_the_access_with_report_and_policy(debugger: str, tmp_path: Path) -> None:
    prog = [str(BUILD / "not_aligned"), "4"]
    if debugger == "gdb":
        out, log = _break_gdb(prog, "--in bump --policy natural", tmp_path)
        pcs = [int(m, 16) for m in re.findall(r"^STOPPED-AT (0x[0-9a-f]+)$", out, re.M)]
        assert re.search(r"^EXIT-STATUS 0$", out, re.M), log
    else:
        out, log = _break_lldb(prog, "--in bump --policy natural", 4)
        pcs = [int(m, 16) for m in re.findall(r"^\(unsigned long\) (0x[0-9a-f]+)$", out, re.M)]
        assert re.search(r"exited with status = 0", out), log
    reports = parse_reports(out)
    assert len(reports) == 4, log
    for rep, pc in zip(reports, pcs):
        # Stopped BEFORE the instruction: the PC the user sees is the reported one, and the
        # data address is not yet written (the report is the decoder's, from live registers).
        assert rep.pc == pc and rep.location == "not_aligned.c:38", log
        assert rep.size == 8 and rep.access == "read-write" and rep.va is not None and rep.va % 8 == 1, log
    assert out.count("  policy: natural (not aligned to its size), checked before it executes") == 4, log
    assert "instruction: add qword ptr [rdi + rdx*8], 1" in out, log
    assert "not_aligned: iterations=4 sum=4" in out or debugger == "lldb", log


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_cacheline_policy_reports_exactly_the_line_splits(debugger: str, tmp_path: Path) -> None:
    """Natural: every access (8-byte at 1 mod 8); cacheline: exactly those whose 8 bytes
    straddle a 64-byte boundary, as the natural trace's own VAs say."""
    cmd = [str(BUILD / "not_aligned"), "300"]
    nat, nat_run = trace(debugger, cmd, "ualdbg trace start --engine step --in bump --policy natural", tmp_path / "n.json", tmp_path)
    line, line_run = trace(debugger, cmd, "ualdbg trace start --engine step --in bump --policy cacheline", tmp_path / "c.json", tmp_path)
    assert nat is not None and line is not None, nat_run.explain() + line_run.explain()
    assert nat["faults_total"] == 300 and len(nat["records"]) == 300, nat_run.explain()
    splits = [r for r in nat["records"] if int(r["va"], 16) // 64 != (int(r["va"], 16) + r["size"] - 1) // 64]
    assert 0 < len(splits) < 300, nat_run.explain()
    assert line["faults_total"] == len(splits), line_run.explain()
    assert [r["va"] for r in line["records"]] == [r["va"] for r in splits], line_run.explain()
    assert line["step"]["policy"] == "cacheline" and line["step"]["steps"] == nat["step"]["steps"], line_run.explain()


def _steps(debugger: str, n: int, test_programs: Path, tmp_path: Path) -> dict:
    doc, run = trace(debugger, [str(test_programs / "step_calls"), str(n)],
                     "ualdbg trace start --engine step --in work --in twice", tmp_path / f"s{n}.json", tmp_path)
    assert doc is not None, run.explain()
    assert doc["faults_total"] == n and doc["program"]["exit_status"] == 0, run.explain()
    return doc["step"]


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_calls_out_of_scope_cost_no_steps(debugger: str, test_programs: Path, tmp_path: Path) -> None:
    """Each iteration calls printf (thousands of instructions) and the in-scope `twice`: the
    steps grow by the same small number per iteration, and each printf is one call run at full
    speed."""
    s10, s20, s30 = (_steps(debugger, n, test_programs, tmp_path) for n in (10, 20, 30))
    per_iteration = (s20["steps"] - s10["steps"]) // 10
    assert s30["steps"] - s20["steps"] == s20["steps"] - s10["steps"] == 10 * per_iteration, (s10, s20, s30)
    assert 0 < per_iteration < 40, (s10, s20, s30)  # work's loop body and twice, not printf
    assert (s10["calls_run"], s20["calls_run"], s30["calls_run"]) == (10, 20, 30), (s10, s20, s30)
    assert s10["entries"] == 1, s10


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_status_shows_scope_policy_and_steps(debugger: str, tmp_path: Path) -> None:
    cmd = [str(BUILD / "memalign"), "10", "2"]
    doc, run = trace(debugger, cmd, "ualdbg trace start --engine step --in total --in fill --policy natural",
                     tmp_path / "t.json", tmp_path, after=["ualdbg status", "ualdbg trace show --summary"])
    assert doc is not None, run.explain()
    assert "engine: step; scope: total,fill (" in run.stdout and "policy natural" in run.stdout, run.explain()
    m = re.search(r"steps: (\d+) steps, (\d+) entries, (\d+) calls run at full speed, (\d+) violations", run.stdout)
    assert m and int(m.group(1)) == doc["step"]["steps"] and int(m.group(4)) == doc["faults_total"], run.explain()
    assert "engine step via" in run.stdout, run.explain()


BAD = [
    ("--in no_such_function", "no function named no_such_function in not_aligned"),
    ("--range 0x2000,0x1000", "empty range (HI must be above LO)"),
    ("--range 0x1000", "write two addresses"),
    ("--in bump --everywhere", "give one scope"),
    ("", "--engine step needs a scope"),
    ("--until-return", "--until-return needs a stopped program"),
]


@pytest.mark.parametrize("debugger", DEBUGGERS)
@pytest.mark.parametrize("opts,message", BAD, ids=[b[0] or "no-scope" for b in BAD])
def test_bad_input_is_one_clear_line(debugger: str, opts: str, message: str) -> None:
    prog = [str(BUILD / "not_aligned"), "3"]
    command = f"ualdbg break --engine step {opts}".strip()
    if debugger == "gdb":
        run = run_gdb(prog, [command, "ualdbg status"])
        errors = [line for line in run.stderr.splitlines() if line.strip()]
    else:
        # lldb stops its -o commands at the first error: the status comes from a script.
        run = run_lldb(prog, ["script lldb.debugger.HandleCommand('" + command + "'); lldb.debugger.HandleCommand('ualdbg status')"])
        errors = [line for line in run.stdout.splitlines() + run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], run.explain()
    assert "Traceback" not in run.stdout + run.stderr, run.explain()
    assert ": off" in run.stdout, run.explain()  # nothing stayed armed


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_options_need_the_step_engine(debugger: str) -> None:
    prog = [str(BUILD / "not_aligned"), "3"]
    run = (run_gdb if debugger == "gdb" else run_lldb)(prog, ["ualdbg trace start --in bump"])
    assert "need --engine step" in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr, run.explain()


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_scope_never_entered_says_so(debugger: str, test_programs: Path, tmp_path: Path) -> None:
    doc, run = trace(debugger, [str(test_programs / "step_calls"), "3"], "ualdbg trace start --engine step --in never_called",
                     tmp_path / "t.json", tmp_path, after=["ualdbg status"])
    text = run.stdout + run.stderr
    assert len(re.findall(r"the step scope never_called \(0x[0-9a-f]+-0x[0-9a-f]+\) was never entered", text)) == 1, run.explain()
    assert doc is not None and doc["step"]["steps"] == 0 and doc["faults_total"] == 0, run.explain()


def test_until_return_steps_the_current_function_gdb(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "not_aligned"), "50"], [
        "break bump", "run", "ualdbg trace start --engine step --until-return --policy natural", "continue",
        f"ualdbg trace save {tmp_path / 't.json'}", "ualdbg status"])
    import json

    doc = json.loads((tmp_path / "t.json").read_text())
    assert dict(by_location(doc)) == {"not_aligned.c:38": 50}, run.explain()
    assert "bump returned after" in run.stdout, run.explain()


def test_until_return_steps_the_current_function_lldb(tmp_path: Path) -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "50"], [
        "breakpoint set -n bump", "process launch", "ualdbg trace start --engine step --until-return --policy natural",
        "continue", f"ualdbg trace save {tmp_path / 't.json'}", "ualdbg status"], batch=False)
    import json

    doc = json.loads((tmp_path / "t.json").read_text())
    assert dict(by_location(doc)) == {"not_aligned.c:38": 50}, run.explain()
    assert "bump returned after" in run.stdout, run.explain()


def test_everywhere_follows_new_threads_gdb(tmp_path: Path) -> None:
    """--everywhere steps main and, through clone(CLONE_THREAD), every thread it starts: the
    threads example's counts (R, 2R, 3R per worker) with no scope named."""
    doc, run = trace("gdb", [str(BUILD / "threads"), "2"], "ualdbg trace start --engine step --everywhere --policy ac",
                     tmp_path / "t.json", tmp_path)
    assert doc is not None, run.explain()
    assert dict(by_location(doc)) == {"threads.c:41": 2, "threads.c:53": 4, "threads.c:63": 6}, run.explain()
    assert doc["step"]["steps"] > 1000 and doc["faults_ignored"] > 0, run.explain()  # libc too, out of scope


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_one_engine_at_a_time(debugger: str) -> None:
    prog = [str(BUILD / "not_aligned"), "3"]
    first, second = "ualdbg trace start --engine step --in bump", "ualdbg break"
    if debugger == "gdb":
        run = run_gdb(prog, [first, second, "ualdbg break --engine trap", "ualdbg off", "ualdbg break --engine step --in bump",
                             "ualdbg status"])
    else:
        run = run_lldb(prog, ["script " + "; ".join(f"lldb.debugger.HandleCommand('{c}')" for c in (
            first, second, "ualdbg off", "ualdbg break --engine step --in bump", "ualdbg status"))])
    text = run.stdout + run.stderr
    assert "ualdbg break: the step engine is armed; add --engine step, or `ualdbg off` first" in text, run.explain()
    assert "in " + debugger + ": breaking" in text and "engine: step; scope: bump" in text, run.explain()
    assert "Traceback" not in text, run.explain()


def test_armed_before_attach_gdb(test_programs: Path, tmp_path: Path) -> None:
    """`trace start --engine step` before `attach PID`: the scope is resolved in the attached
    process, and the program's 4 calls of `bump` (a misaligned 8-byte load and store each) are
    counted."""
    import subprocess
    import time

    go, out, save = tmp_path / "go", tmp_path / "am.out", tmp_path / "t.json"
    with open(out, "w") as f:
        proc = subprocess.Popen([str(test_programs / "attach_me"), str(go), "4"], stdout=f)
    try:
        deadline = time.time() + 10
        while "pid=" not in out.read_text() and time.time() < deadline:
            time.sleep(0.02)
        run = run_gdb([str(test_programs / "attach_me")], [
            "ualdbg trace start --engine step --in bump --policy natural", f"attach {proc.pid}", f"shell touch {go}",
            "continue", f"ualdbg trace save {save}"], timeout=60)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "attach_me: done 4" in out.read_text(), run.explain()
    assert "attached: step engine armed: bump (" in run.stdout, run.explain()
    import json

    doc = json.loads(save.read_text())
    assert doc["faults_total"] == 8 and doc["step"]["entries"] == 4 and doc["step"]["steps"] == 16, run.explain()
