"""The step engine's threads in real lldb-19: `--everywhere` steps the threads the program starts
after arming (lldb steps by thread plans, which a new thread does not inherit: the engine adopts it
at the exit breakpoint of the clone3 that made it), `--in FUNC` catches a function that only runs
in such threads by its entry breakpoint, and, lldb having no non-stop mode, a thread outside the
scope is stopped at every step event of the stepped one.

lldb 19 single-steps a function that gcc split into a hot and a cold part (libc's pthread_create
and start_thread, with libc6-dbg's DWARF loaded) at a few steps per second: its unwinder takes
the function's whole span for one function, and re-profiles it at every stop (llvm-project pull
request 111409, in lldb 20). The `--everywhere` runs turn lldb's search for separate debug files
off (docs/STEP.md); gdb and the counts are unaffected. ualdbg says so in one line when it arms
--everywhere in such an lldb."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from stepdbgrun import PROGRAM_ENV, per_site, run_lldb, trace
from support.env import BUILD
from support.expected import by_location, expected_by_program
from support.reports import parse_reports
from support.run import Result

NO_SPLIT_DEBUG = "settings set symbols.enable-external-lookup false"
ROUNDS = "2"
# examples/README.md's table for `threads`: R, 2R and 3R misaligned accesses in three workers.
THREAD_LINES = {"threads.c:41": 2, "threads.c:53": 4, "threads.c:63": 6}


def _trace_lldb(program: list[str], start: str, out: Path, tmp_path: Path) -> tuple[dict[str, Any] | None, Result]:
    """stepdbgrun.trace's lldb commands, with lldb 19's split-function slowdown avoided."""
    save = f"ualdbg trace save {out}"
    run = run_lldb(program, [NO_SPLIT_DEBUG, "settings set target.inherit-env false",
                             f"settings set target.env-vars {PROGRAM_ENV}",
                             "process handle -s false -n false -p true SIGBUS", start,
                             f"process launch -o {tmp_path / 'lldb.out'} -e {tmp_path / 'lldb.err'}", save],
                   crash=[save], timeout=300)
    doc = json.loads(out.read_text()) if out.exists() else None
    return doc, run


def test_the_expected_counts_are_the_readme_rows_scaled() -> None:
    """THREAD_LINES is examples/README.md's `threads` table at ROUNDS rounds (R, 2R, 3R)."""
    [(args, rows)] = [(a, r) for (p, a), r in expected_by_program().items() if p == "threads"]
    assert {r.location: r.count * int(ROUNDS) // int(args[0]) for r in rows if r.count} == THREAD_LINES


def test_everywhere_adopts_threads_created_after_arming_lldb(tmp_path: Path) -> None:
    """Armed at main, before any worker exists: every worker's accesses are counted, the same
    per PC as gdb's step engine (TF inherited across clone) and as lldb's trap engine."""
    cmd = [str(BUILD / "threads"), ROUNDS]
    start = "ualdbg trace start --engine step --everywhere --policy ac"
    step, step_run = _trace_lldb(cmd, start, tmp_path / "step.json", tmp_path)
    assert step is not None, step_run.explain()
    assert dict(by_location(step)) == THREAD_LINES, step_run.explain()
    assert step["step"]["steps"] > 5000 and step["program"]["exit_status"] == 0, step_run.explain()
    gdb_step, gdb_run = trace("gdb", cmd, start, tmp_path / "gdb.json", tmp_path)
    assert gdb_step is not None, gdb_run.explain()
    trap, trap_run = trace("lldb", cmd, "ualdbg trace start", tmp_path / "trap.json", tmp_path)
    assert trap is not None, trap_run.explain()
    assert per_site(step) == per_site(gdb_step) == per_site(trap), (step_run.explain(), gdb_run.explain())
    # Each worker's accesses come from its own thread: three lines, three threads, none of them main.
    tids = {(r["pc"], r["tid"]) for r in step["records"]}
    assert len({pc for pc, _ in tids}) == len({tid for _, tid in tids}) == len(tids) == 3, step_run.explain()
    assert step["program"]["pid"] not in {tid for _, tid in tids}, step_run.explain()


def test_break_everywhere_stops_in_new_threads_lldb(tmp_path: Path) -> None:
    """`ualdbg break --engine step --everywhere`: a stop before each of the workers' misaligned
    accesses (1 + 2 + 3 with one round), each in the thread that makes it, and none in main."""
    commands = [NO_SPLIT_DEBUG, "ualdbg break --engine step --everywhere --policy ac", "process launch"]
    commands += ["continue"] * 9
    run = run_lldb([str(BUILD / "threads"), "1"], commands, batch=False, timeout=300)
    reports = parse_reports(run.stdout)
    assert sorted(r.location for r in reports) == ["threads.c:41", "threads.c:53", "threads.c:53",
                                                   "threads.c:63", "threads.c:63", "threads.c:63"], run.explain()
    by_line: dict[str, set[int | None]] = {}
    for r in reports:
        by_line.setdefault(r.location, set()).add(r.tid)
    assert all(len(t) == 1 for t in by_line.values()) and len(set().union(*by_line.values())) == 3, run.explain()
    assert re.search(r"exited with status = 0", run.stdout), run.explain()
    assert "Traceback" not in run.stdout + run.stderr, run.explain()


def test_in_func_that_runs_only_in_new_threads_lldb(tmp_path: Path) -> None:
    """`--in worker_b`: the function runs only in a thread started after arming; its entry
    breakpoint starts the stepping there. Same counts as gdb."""
    cmd = [str(BUILD / "threads"), ROUNDS]
    start = "ualdbg trace start --engine step --in worker_b --policy ac"
    docs = {}
    for debugger in ("lldb", "gdb"):
        doc, run = trace(debugger, cmd, start, tmp_path / f"{debugger}.json", tmp_path)
        assert doc is not None, run.explain()
        assert dict(by_location(doc)) == {"threads.c:53": 4}, run.explain()
        assert doc["step"]["entries"] == 1 and doc["step"]["steps"] > 0, run.explain()
        docs[debugger] = doc
    assert per_site(docs["lldb"]) == per_site(docs["gdb"])
    assert docs["lldb"]["step"]["steps"] == docs["gdb"]["step"]["steps"]


def test_thread_outside_the_scope_stops_at_every_step_lldb(test_programs: Path, tmp_path: Path) -> None:
    """lldb has no non-stop mode: while `walk` is stepped in main, the spinning thread is stopped
    once per step (its voluntary context switches, read by the program from /proc)."""
    n = 200
    doc, run = trace("lldb", [str(test_programs / "nonstop_busy"), str(n)],
                     "ualdbg trace start --engine step --in walk --policy natural", tmp_path / "t.json", tmp_path)
    assert doc is not None and doc["faults_total"] == n, run.explain()
    out = (tmp_path / "lldb.out").read_text()
    m = re.search(r"^nonstop_busy: spin voluntary_ctxt_switches during walk: (\d+)$", out, re.M)
    assert m, run.explain() + out
    steps = doc["step"]["steps"]
    assert steps > 10 * n, run.explain()
    assert steps <= int(m.group(1)) <= steps + 50, (steps, m.group(1))
    assert "nonstop_busy: spin AC=0 TF=0" in out, out


def _has_separate_debug_file(path: str) -> bool:
    """Whether a build-id debug file (libc6-dbg's) exists for this ELF file."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection

    with open(path, "rb") as f:
        for section in ELFFile(f).iter_sections():
            if isinstance(section, NoteSection):
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        bid = str(note["n_desc"])
                        return Path(f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug").is_file()
    return False


def test_everywhere_says_once_when_lldb_19_meets_split_functions(tmp_path: Path) -> None:
    """The line comes when libc (or the loader) has a separate debug file lldb loads, and not
    when lldb is told not to look for one."""
    cmd = [str(BUILD / "not_aligned"), "3"]
    start = "ualdbg trace start --engine step --everywhere --policy ac"
    import subprocess

    from support.debuggers import lldb_path

    version = subprocess.run([lldb_path(), "--version"], capture_output=True, text=True).stdout
    major = int(re.search(r"lldb version (\d+)", version).group(1))  # type: ignore[union-attr]
    hint = re.compile(rf"^ualdbg: lldb {major} single-steps a function split into hot and cold parts .*"
                      r"`settings set symbols\.enable-external-lookup false`", re.M)
    libs = [p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2") if Path(p).exists()]
    expected = major < 20 and any(_has_separate_debug_file(p) for p in libs)
    doc, run = trace("lldb", cmd, start, tmp_path / "t.json", tmp_path)
    assert doc is not None and dict(by_location(doc)) == {"not_aligned.c:38": 3}, run.explain()
    assert len(hint.findall(run.stdout)) == (1 if expected else 0), run.explain()
    doc, run = _trace_lldb(cmd, start, tmp_path / "u.json", tmp_path)
    assert doc is not None and dict(by_location(doc)) == {"not_aligned.c:38": 3}, run.explain()
    assert not hint.search(run.stdout), run.explain()
