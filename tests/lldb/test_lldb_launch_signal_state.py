"""The program's own signal state under lldb when ualdbg arms a *launched* multi-threaded program
(the attach side is tests/lldb/test_lldb_attach_live.py): its SIGTRAP and SIGBUS handlers, masks
and pending signals must be as it set them, though glibc blocks every signal around each
pthread_create, where ualdbg's lldb breakpoints are (a trap taken with SIGTRAP blocked makes the
kernel reset the program's SIGTRAP handler). live_workers starts its workers from main, and a
short-lived thread every 20 ms, and ends by itself after its lifetime."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.debuggers import lldb_exit_status, run_lldb
from support.live import FINAL, WORKERS
from support.reports import parse_reports

IN_FLIGHT = 2 * (WORKERS + 1)
KEYS = ("iterations", "armed", "threads", "spawned", "ac_left", "own_sigbus", "handlers", "masks", "pending")


def _final(stdout: str, explain: str) -> dict[str, str]:
    m = FINAL.search(stdout)
    assert m, explain
    return dict(zip(KEYS, m.groups()))


def _state_kept(end: dict[str, str]) -> bool:
    return end["handlers"] == "ok" and end["masks"] == "ok" and end["own_sigbus"] == "0" and end["pending"] == "none"


@pytest.mark.parametrize("engine", ["agent", "trap"])
def test_trace_of_a_launched_program_keeps_its_signal_state(engine: str, test_programs: Path, tmp_path: Path) -> None:
    saved = tmp_path / "t.json"
    # Under the trap engine lldb stops the whole program at every fault of the workers: on a busy
    # machine (the suite's other worker) main's first short-lived thread took longer than 1.5 s
    # of armed time to start. 4 s leaves it room.
    lifetime = "1500" if engine == "agent" else "4000"
    run = run_lldb([str(test_programs / "live_workers"), str(tmp_path), str(WORKERS), "200", lifetime], [
        f"ualdbg trace start --engine {engine}", "process launch", f"ualdbg trace save {saved}"], batch=False, timeout=180)
    out = run.explain()
    assert lldb_exit_status(run) == 0, out
    end = _final(run.stdout, out)
    assert int(end["spawned"]) >= 1, out  # a thread created by the main loop while armed
    assert _state_kept(end), out + f"\n{end}"
    doc = json.loads(saved.read_text())
    # Armed at main before any thread: every iteration the program counts as armed faulted once.
    assert int(end["armed"]) > 10 and abs(doc["faults_total"] - int(end["armed"])) <= IN_FLIGHT, out + f"\n{end}"
    assert doc["engine"] == engine, out
    if engine == "agent":  # its hot site patched after two traps: later faults leave no record
        assert any(s.get("patched") for s in doc["sites"]), out
        return
    # Each worker and each short-lived thread was armed at its start and faulted.
    assert len({r["tid"] for r in doc["records"]}) == WORKERS + int(end["spawned"]), out + f"\n{end}"


def test_break_on_a_launched_program_keeps_its_signal_state(test_programs: Path, tmp_path: Path) -> None:
    run = run_lldb([str(test_programs / "live_workers"), str(tmp_path), str(WORKERS), "200", "800"], [
        "ualdbg break", "process launch", "continue", "continue", "continue", "ualdbg off", "continue"],
        batch=False, timeout=180)
    out = run.explain()
    assert len(parse_reports(run.stdout)) >= 3, out
    assert lldb_exit_status(run) == 0, out
    end = _final(run.stdout, out)
    assert end["ac_left"] == "0" and _state_kept(end), out + f"\n{end}"
