"""Issue 20 in real lldb: `process attach` to a multi-threaded program in the middle of its run,
then `ualdbg break`, `ualdbg trace start/stop/show`, `ualdbg off` and `process detach`, checked
against the program's own count of its faulting iterations while AC was set (as in
tests/gdb/test_attach_live.py), and the program's state after the detach."""
from __future__ import annotations

import json
import re
from pathlib import Path

from support.debuggers import run_lldb
from support.live import WORKERS, healthy, live_program
from support.reports import parse_reports

IN_FLIGHT = 2 * (WORKERS + 1)


def _trace_session(programs: Path, tmp_path: Path) -> tuple[str, dict, dict[str, str], set[int]]:
    saved = tmp_path / "t.json"
    with live_program(programs, tmp_path) as live:
        before = live.tasks()
        run = run_lldb([], [
            f"target create {programs / 'live_workers'}", f"process attach -p {live.pid}", "ualdbg trace start --engine trap",
            "breakpoint set -n heartbeat", "continue", "continue", "continue", "ualdbg trace stop",
            f"ualdbg trace save {saved}", "ualdbg trace show --summary --by function", "breakpoint delete -f",
            "ualdbg off", "process detach"], batch=False, timeout=180)
        end = live.finish()
    assert saved.exists(), run.explain()
    return run.explain(), json.loads(saved.read_text()), end, before


def test_attach_trace_start_stop_show_off_detach(test_programs: Path, tmp_path: Path) -> None:
    out, doc, end, before = _trace_session(test_programs, tmp_path)
    assert "ualdbg: off; no thread has AC set" in out and "Process" in out and "detached" in out, out
    armed = int(end["armed"])
    assert armed > 10, out + f"\n{end}"
    assert abs(doc["faults_total"] - armed) <= IN_FLIGHT, out + f"\n{end}"
    assert {s["function"] for s in doc["sites"]} == {"bump"}, doc["sites"]
    assert re.search(rf"^\s*{doc['faults_total']}\s+100\.0%.*\bbump\b", out, re.M), out
    new_tids = {r["tid"] for r in doc["records"]} - before
    assert len(new_tids) >= 3, f"{new_tids} {before}"
    assert healthy(end), out + f"\n{end}"


def test_lldb_attach_keeps_the_programs_sigtrap_handler(test_programs: Path, tmp_path: Path) -> None:
    out, _doc, end, _ = _trace_session(test_programs, tmp_path)
    assert end["handlers"] == "ok", out + f"\n{end}"


def test_attach_break_continue_off_detach(test_programs: Path, tmp_path: Path) -> None:
    with live_program(test_programs, tmp_path) as live:
        run = run_lldb([], [
            f"target create {test_programs / 'live_workers'}", f"process attach -p {live.pid}", "ualdbg break",
            "continue", "continue", "continue", "ualdbg off", "process detach"], batch=False, timeout=180)
        end = live.finish()
    # lldb shows every thread's stop reason at a stop: several threads may be at a fault at once,
    # each reported once (its re-fault on resume is stepped over, not counted again).
    reports = parse_reports(run.stdout)
    assert len(reports) >= 3 and all("bump" in r.where for r in reports), run.explain()
    assert abs(int(end["armed"]) - len(reports)) <= IN_FLIGHT, run.explain() + f"\n{end}"
    assert healthy(end), run.explain() + f"\n{end}"


def test_detach_while_tracing_without_off(test_programs: Path, tmp_path: Path) -> None:
    with live_program(test_programs, tmp_path) as live:
        run = run_lldb([], [
            f"target create {test_programs / 'live_workers'}", f"process attach -p {live.pid}", "ualdbg trace start",
            "breakpoint set -n heartbeat", "continue", "continue", "breakpoint delete -f", "detach"],
            batch=False, timeout=180)
        end = live.finish()
    assert int(end["armed"]) > 10, run.explain() + f"\n{end}"
    assert healthy(end), run.explain() + f"\n{end}"
