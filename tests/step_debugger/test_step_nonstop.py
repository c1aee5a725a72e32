"""gdb's thread modes and ualdbg, in real gdb on real programs.

`nonstop_busy N` (tests/fixtures/programs) walks a step scope (`walk`: N misaligned 8-byte reads)
in its main thread while a second thread spins outside it without a system call, and prints how
many times that thread was stopped (its voluntary context switches) during the walk, then
whether it ended with EFLAGS.AC or TF set. Under `set non-stop on` only the thread with an
event stops; gdb 13 also runs a native process non-stop underneath its default all-stop mode
(`maint show target-non-stop`: auto, currently on); on a target that is not non-stop (`maint
set target-non-stop off`, as a remote stub without non-stop support) every step event of the
walking thread stops the spinning one too, and ualdbg says so once."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.debuggers import run_gdb
from support.env import BUILD
from support.expected import by_location, expected_by_program
from support.reports import parse_reports
from support.run import Result

N = 200
HINT = ("ualdbg: all-stop mode: threads outside the step scope stop at each step event; "
        "`set non-stop on` before `run` keeps them running")
SWITCHES = re.compile(r"^nonstop_busy: spin voluntary_ctxt_switches during walk: (\d+)$", re.M)
SPIN_FLAGS = re.compile(r"^nonstop_busy: spin AC=(\d) TF=(\d)$", re.M)
WALK_LINE = "nonstop_busy.c:22"


def _switches(run: Result) -> int:
    m = SWITCHES.search(run.stdout)
    assert m, run.explain()
    return int(m.group(1))


def _spin_flags(run: Result) -> tuple[int, int]:
    m = SPIN_FLAGS.search(run.stdout)
    assert m, run.explain()
    return int(m.group(1)), int(m.group(2))


MODES = {
    "non-stop": (["set non-stop on"], False),
    "all-stop-gdb13-default": ([], False),
    "all-stop-target": (["maint set target-non-stop off"], True),
}


@pytest.mark.parametrize("mode", MODES)
def test_step_trace_counts_and_the_thread_outside_the_scope(mode: str, test_programs: Path, tmp_path: Path) -> None:
    setup, slowed = MODES[mode]
    out = tmp_path / "t.json"
    run = run_gdb([str(test_programs / "nonstop_busy"), str(N)], [
        *setup, "ualdbg trace start --engine step --in walk --policy natural", "run", f"ualdbg trace save {out}"],
        timeout=240)
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == N and dict(by_location(doc)) == {WALK_LINE: N}, run.explain()
    steps = doc["step"]["steps"]
    assert steps > 10 * N and doc["step"]["entries"] == 1, run.explain()  # thousands of steps
    assert doc["program"]["exit_status"] == 0 and f"nonstop_busy: n={N} sum=" in run.stdout, run.explain()
    switches = _switches(run)
    if slowed:
        # Stopped (at least) once per step event of the walking thread, and told once why.
        assert switches >= steps, run.explain()
        assert run.stdout.count(HINT) == 1, run.explain()
    else:
        assert switches < 50, run.explain()
        assert HINT not in run.stdout, run.explain()
    assert _spin_flags(run) == (0, 0), run.explain()


def test_step_break_in_non_stop_stops_only_the_stepped_thread(test_programs: Path, tmp_path: Path) -> None:
    run = run_gdb([str(test_programs / "nonstop_busy"), "3"], [
        "set non-stop on", "ualdbg break --engine step --in walk --policy natural", "run", "info threads",
        "continue", "continue", "continue"])
    reports = parse_reports(run.stdout)
    assert [r.location for r in reports] == [WALK_LINE] * 3, run.explain()
    assert [r.va % 8 for r in reports if r.va is not None] == [1, 1, 1], run.explain()
    assert re.search(r"^\s+2\s+Thread .*\(running\)$", run.stdout, re.M), run.explain()  # spin ran on
    assert _switches(run) < 50 and _spin_flags(run) == (0, 0), run.explain()
    assert "exited normally" in run.stdout, run.explain()


def test_trap_break_in_non_stop_then_off_clears_the_running_thread(test_programs: Path, tmp_path: Path) -> None:
    """The spinning thread inherits AC and keeps running while the main thread is stopped at a
    fault: `off` must clear it there too (it reports its own flags at the end)."""
    run = run_gdb([str(test_programs / "nonstop_busy"), "5"], [
        "set non-stop on", "ualdbg break", "run", "info threads", "continue", "ualdbg status", "ualdbg off",
        "ualdbg status", "continue", "info breakpoints"])
    reports = parse_reports(run.stdout)
    assert [r.location for r in reports] == [WALK_LINE] * 2, run.explain()
    assert re.search(r"^\s+2\s+Thread .*\(running\)$", run.stdout, re.M), run.explain()
    assert "running (non-stop): registers unreadable" in run.stdout, run.explain()  # status reads no running thread
    assert "ualdbg: off; no thread has AC set" in run.stdout, run.explain()
    assert _spin_flags(run) == (0, 0), run.explain()
    assert "exited normally" in run.stdout and "received signal" not in run.stdout, run.explain()
    assert "Traceback" not in run.stdout + run.stderr and "ualdbg:" not in run.stderr, run.explain()


@pytest.mark.parametrize("engine", ["trap", "step"])
def test_detach_in_non_stop_leaves_no_flag_in_running_threads(engine: str, test_programs: Path, tmp_path: Path) -> None:
    """Detached at the first stop, the program finishes alone: a thread left with AC set would
    die at its next misaligned access (the walk goes on for 40 of them), one with TF at once."""
    arm = "ualdbg break" if engine == "trap" else "ualdbg break --engine step --in walk --policy natural"
    run = run_gdb([str(test_programs / "nonstop_busy"), "40"], ["set non-stop on", arm, "run", "detach"])
    assert len(parse_reports(run.stdout)) == 1 and "detached" in run.stdout, run.explain()
    assert "nonstop_busy: n=40 sum=" in run.stdout and _spin_flags(run) == (0, 0), run.explain()


@pytest.mark.parametrize("start", ["ualdbg trace start",
                                   "ualdbg trace start --engine step --in worker_a --in worker_b --in worker_c"])
def test_trace_of_threads_in_non_stop_is_exact(start: str, tmp_path: Path) -> None:
    """The trap engine (the default), and the step engine with three threads stepping at once."""
    rows = expected_by_program()[("threads", ("10",))]
    out = tmp_path / "t.json"
    run = run_gdb([str(BUILD / "threads"), "10"], ["set non-stop on", start, "run", f"ualdbg trace save {out}"])
    doc = json.loads(out.read_text())
    assert dict(by_location(doc)) == {r.location: r.count for r in rows if r.count}, run.explain()
    assert doc["program"]["exit_status"] == 0 and run.stdout.count("threads: thread ") == 3, run.explain()


def test_arming_now_in_non_stop_reaches_the_running_thread(test_programs: Path, tmp_path: Path) -> None:
    """`trace start` typed while the main thread is stopped at `walk` and the other one runs:
    both are armed at once (the running one ends with AC set, as it would in all-stop)."""
    out = tmp_path / "t.json"
    run = run_gdb([str(test_programs / "nonstop_busy"), "7"], [
        "set non-stop on", "break walk", "run", "ualdbg trace start", "info threads", "continue",
        f"ualdbg trace save {out}"])
    assert "armed now: 2 thread(s) with EFLAGS.AC" in run.stdout, run.explain()
    assert re.search(r"^\s+2\s+Thread .*\(running\)$", run.stdout, re.M), run.explain()
    doc = json.loads(out.read_text())
    assert dict(by_location(doc)) == {WALK_LINE: 7}, run.explain()
    assert _spin_flags(run) == (1, 0) and "exited normally" in run.stdout, run.explain()
