"""`ualdbg trace start|stop|show|clear|save` and the settings in real gdb."""
from __future__ import annotations

import json
import re
from pathlib import Path

from support.debuggers import run_gdb, run_gdb_script
from support.env import BUILD


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d%", line)]


def test_summary_per_pc_and_by_line(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "threads"), "10"], ["ualdbg trace start", "run", "ualdbg trace show --summary",
                                                   "echo ==BY-FUNCTION==\\n", "ualdbg trace show --by function"])
    summary, by_function = run.stdout.split("==BY-FUNCTION==")
    got = sorted((int(r[0]), next(x for x in r if x.startswith("threads.c:"))) for r in rows(summary))
    assert got == [(10, "threads.c:41"), (20, "threads.c:53"), (30, "threads.c:63")], run.explain()
    assert "60 in scope" in summary and "ignored elsewhere" in summary, run.explain()
    assert re.search(r"\d[\d,]*/s", summary), run.explain()  # the rate, as MONITOR ALIGN showed it
    assert sorted(int(r[0]) for r in rows(by_function)) == [10, 20, 30], run.explain()
    assert {"worker_a", "worker_b", "worker_c"} <= set(by_function.split()), run.explain()


def test_records_limit_thread_and_wrapped_ring(tmp_path: Path) -> None:
    save = tmp_path / "t.json"
    run = run_gdb([str(BUILD / "threads"), "10"], [
        "set ualdbg buffer 25", "ualdbg trace start --engine trap", "run", f"ualdbg trace save {save}",
        "echo ==LIMIT==\\n", "ualdbg trace show --limit 4"])
    doc = json.loads(save.read_text())
    assert doc["faults_total"] == 60 and len(doc["records"]) == 25 and doc["records_dropped"] == 35, run.explain()
    counts = {f"{Path(s['file']).name}:{s['line']}": s["count"] for s in doc["sites"]}
    assert counts == {"threads.c:41": 10, "threads.c:53": 20, "threads.c:63": 30}, run.explain()
    limited = [line for line in run.stdout.split("==LIMIT==")[1].splitlines() if re.match(r"^\s*\d+\s+\d+\.\d{6}", line)]
    assert len(limited) == 4 and limited[-1].split()[0] == "60", run.explain()
    script = f'''
import gdb, json
gdb.execute("ualdbg trace start --engine trap")
gdb.execute("run")
gdb.execute("ualdbg trace save {tmp_path / 'u.json'}")
tid = json.load(open("{tmp_path / 'u.json'}"))["records"][-1]["tid"]
print("TID", tid)
gdb.execute(f"ualdbg trace show --thread {{tid}}")
'''
    run = run_gdb_script([str(BUILD / "threads"), "10"], script, tmp_path)
    tid = int(re.search(r"^TID (\d+)$", run.stdout, re.M).group(1))
    shown = [line.split() for line in run.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d{6}", line)]
    assert shown and all(r[4] == str(tid) for r in shown) and len(shown) in (10, 20, 30), run.explain()


def test_break_records_into_the_shared_buffer_and_stop_clear(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "not_aligned"), "10"], [
        "ualdbg break", "run", "continue", "ualdbg trace show", "ualdbg trace clear", "echo ==CLEARED==\\n",
        "ualdbg trace show --summary", "ualdbg off", "ualdbg status", "continue"])
    before, after = run.stdout.split("==CLEARED==")
    assert len([line for line in before.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d{6}", line)]) == 2, run.explain()
    assert "0 in scope" in after and "ualdbg 0.1.0 in gdb: off" in after, run.explain()
    assert "exited normally" in after, run.explain()


def test_bad_command_input_is_one_line(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "aligned")], ["ualdbg trace start --buffer 0", "ualdbg trace show --by colour",
                                             "ualdbg config nosuch 1", "set ualdbg buffer -1"])
    assert "Traceback" not in run.stdout + run.stderr, run.explain()
    errs = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errs) == 4, run.explain()
    assert "must be positive" in errs[0] and "invalid choice" in errs[1] and "no setting" in errs[2], run.explain()


def test_module_adds_a_system_library_to_the_scope(tmp_path: Path) -> None:
    docs = {}
    # The trap engine traps every fault, in scope or not (the agent leaves out-of-scope sites be).
    for name, opts in (("default", " --engine trap"), ("libc", " --engine trap --module libc.so.6")):
        save = tmp_path / f"{name}.json"
        run = run_gdb([str(BUILD / "threads"), "10"], [f"ualdbg trace start{opts}", "run", f"ualdbg trace save {save}"])
        docs[name] = json.loads(save.read_text())
        assert docs[name]["program"]["exit_status"] == 0, run.explain()
    default, libc = docs["default"], docs["libc"]
    # libc's own unaligned accesses (thread start-up and stdio) are ignored by default and in
    # scope with --module; the program's sites are the same either way, and nothing is lost.
    assert {s["module"] for s in default["sites"]} == {"threads"} and default["faults_ignored"] > 0
    libc_sites = [s for s in libc["sites"] if s["module"] == "libc.so.6"]
    assert libc_sites and all(s["function"] for s in libc_sites), libc
    own = [(s["pc"], s["count"]) for s in libc["sites"] if s["module"] == "threads"]
    assert sorted(c for _, c in own) == [10, 20, 30]
    assert libc["faults_total"] == 60 + sum(s["count"] for s in libc_sites)
    assert libc["faults_total"] + libc["faults_ignored"] == default["faults_total"] + default["faults_ignored"]
