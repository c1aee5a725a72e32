"""`ualdbg break` in real lldb on the compiled examples: stops at the known lines with the right
VA, size and access, exactly the documented number of times; continue, step-inst, step-over and
finish resume normally; nothing else about the program changes."""
from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.debuggers import lldb_break_through, lldb_exit_status, run_lldb
from support.env import BUILD, ROOT, scrubbed_env
from support.expected import expected_by_program

CASES = sorted(expected_by_program().items())


@pytest.mark.parametrize("key,rows", CASES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in CASES])
def test_break_stops_exactly_at_documented_sites(key, rows, tmp_path: Path) -> None:
    prog, args = key
    total = sum(r.count for r in rows)
    run, reports, status = lldb_break_through([str(BUILD / prog), *args], stops=total)
    got = Counter(r.location for r in reports)
    want = Counter({r.location: r.count for r in rows if r.count})
    assert got == want, run.explain()
    for row in rows:
        if not row.count:
            continue
        mine = [r for r in reports if r.location == row.location]
        assert {r.size for r in mine} == {row.size}, run.explain()
        kinds = {r.access for r in mine}
        assert (row.access in kinds) if row.access != "read-write" else kinds <= {"read", "write", "read-write"}, run.explain()
        assert all(r.va is not None and r.va % (r.size or 1) != 0 for r in mine), run.explain()
    assert status == 0, run.explain()


def test_report_va_is_the_address_the_program_uses() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "not_aligned"), "50"], stops=50)
    base = int(re.search(r"not_aligned: p=(0x[0-9a-f]+)", run.stdout).group(1), 16)
    assert len(reports) == 50, run.explain()
    for r in reports:
        assert r.va is not None and base <= r.va < base + 8 * 4096 and (r.va - base) % 8 == 0, run.explain()
        assert r.where.startswith("bump+0x") and r.where.endswith(" in not_aligned"), run.explain()
        assert r.location == "not_aligned.c:38", run.explain()
    # lldb's own stop line agrees: the thread stopped AT the faulting instruction, by SIGBUS.
    assert run.stdout.count("stop reason = signal SIGBUS: illegal alignment") == 50, run.explain()


FLAGS = "script t = lldb.debugger.GetSelectedTarget().GetProcess().GetSelectedThread(); f = t.GetFrameAtIndex(0); print('{tag}', hex(f.GetPC()), hex(f.FindRegister('rflags').GetValueAsUnsigned()))"


def _flags(run_text: str, tag: str) -> tuple[int, int]:
    m = re.search(rf"^{tag} (0x[0-9a-f]+) (0x[0-9a-f]+)$", run_text, re.M)
    assert m, f"no {tag} line"
    return int(m.group(1), 16), int(m.group(2), 16)


def test_step_inst_executes_the_faulting_instruction_once_and_rearms() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "3"], [
        "ualdbg break", "process launch", FLAGS.format(tag="AT-STOP"), "thread step-inst",
        FLAGS.format(tag="AFTER-STEP"), "continue", FLAGS.format(tag="NEXT")], batch=False)
    reports = re.findall(r"PC = (0x[0-9a-f]+)", run.stdout)
    assert len(reports) == 2, run.explain()
    pc, flags = _flags(run.stdout, "AT-STOP")
    assert pc == int(reports[0], 16) and flags & 0x40000, run.explain()  # stopped AT it, still armed
    after, flags = _flags(run.stdout, "AFTER-STEP")
    assert after != pc and flags & 0x40000 and not flags & 0x100, run.explain()
    assert "stop reason = instruction step into" in run.stdout, run.explain()
    nxt, _ = _flags(run.stdout, "NEXT")
    assert nxt == pc, run.explain()  # the loop comes back to the same instruction: the next fault


def test_step_over_and_finish_complete_and_keep_counting() -> None:
    # bump() makes one fault per iteration: `next` from the first fault completes the line and
    # stops on the next one (still armed); `finish` from the second fault is interrupted by the
    # third fault (the loop is still running), and the one after finishes the function.
    run = run_lldb([str(BUILD / "not_aligned"), "3"], [
        "ualdbg break", "process launch", "thread step-over", FLAGS.format(tag="AFTER-NEXT"),
        "continue", "finish", "finish", "ualdbg off", "finish", FLAGS.format(tag="AFTER-FINISH"), "continue"],
        batch=False)
    assert "stop reason = step over" in run.stdout, run.explain()
    _, flags = _flags(run.stdout, "AFTER-NEXT")
    assert flags & 0x40000 and not flags & 0x100, run.explain()
    assert run.stdout.count("Unaligned data access") == 3, run.explain()
    assert "stop reason = step out" in run.stdout, run.explain()
    _, flags = _flags(run.stdout, "AFTER-FINISH")
    assert not flags & 0x40000, run.explain()
    assert "iterations=3 sum=3" in run.stdout and lldb_exit_status(run) == 0, run.explain()


def test_continue_reaches_the_next_fault() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "5"], ["ualdbg break", "process launch", "continue", "continue"],
                   batch=False)
    pcs = re.findall(r"PC = (0x[0-9a-f]+)", run.stdout)
    vas = re.findall(r"virtual address = (0x[0-9a-f]+)", run.stdout)
    assert len(pcs) == 3 and len(set(pcs)) == 1, run.explain()
    assert len(vas) == 3, run.explain()


def test_off_leaves_no_thread_with_ac_and_restores_signal_settings() -> None:
    show = ("script p = lldb.debugger.GetSelectedTarget().GetProcess(); "
            "[print('FLAGS', t.GetThreadID(), hex(t.GetFrameAtIndex(0).FindRegister('rflags').GetValueAsUnsigned())) for t in p]")
    run = run_lldb([str(BUILD / "threads"), "10"], [
        "process handle -s false -p true -n true SIGBUS",  # the user's own choice, kept by off
        "ualdbg break", "process launch", "continue", show, "ualdbg off", show, "process handle -t SIGBUS",
        "continue", "process handle SIGBUS"], batch=False)
    after_off = run.stdout.split("ualdbg: off")[1]
    flags = [int(v, 16) for v in re.findall(r"^FLAGS \d+ (0x[0-9a-f]+)$", after_off, re.M)]
    assert flags, run.explain()
    assert all(f & 0x40000 == 0 and f & 0x100 == 0 for f in flags), run.explain()
    # The user's setting is back for the target at once, and for this process once the thread
    # stopped at a fault has stepped over it (its SIGBUS must not reach the program).
    settings = re.findall(r"^SIGBUS\s+(\S+)\s+(\S+)\s+(\S+)\s*$", after_off, re.M)
    assert settings == [("true", "false", "true")] * 2, run.explain()
    # Two stops; threads that fault at the same moment are reported at the same stop.
    assert run.stdout.count("Unaligned data access") >= 2, run.explain()
    assert lldb_exit_status(run) == 0, run.explain()


def test_threads_example_stops_in_every_thread() -> None:
    run, reports, status = lldb_break_through([str(BUILD / "threads"), "10"], stops=60)
    tids_per_line: dict[str, set[int | None]] = {}
    for r in reports:
        tids_per_line.setdefault(r.location, set()).add(r.tid)
    assert {k: len(v) for k, v in tids_per_line.items()} == {"threads.c:41": 1, "threads.c:53": 1, "threads.c:63": 1}, run.explain()
    tids = [next(iter(t)) for t in tids_per_line.values()]
    assert len(set(tids)) == 3 and None not in tids, run.explain()
    assert Counter(r.location for r in reports) == {"threads.c:41": 10, "threads.c:53": 20, "threads.c:63": 30}, run.explain()
    assert status == 0, run.explain()


@pytest.mark.parametrize("prog,args", [("not_aligned", ["200"]), ("threads", ["10"]), ("rep_string", ["5"]),
                                       ("memalign", ["100", "5"])])
def test_program_output_and_status_unchanged(prog: str, args: list[str], tmp_path: Path) -> None:
    direct = subprocess.run([str(BUILD / prog), *args], capture_output=True, text=True, env=scrubbed_env())
    out, err = tmp_path / "out", tmp_path / "err"
    run = run_lldb([str(BUILD / prog), *args], ["ualdbg trace start", f"process launch -o {out} -e {err}",
                                                "ualdbg trace show --summary"])
    scrub = lambda s: re.sub(r"0x[0-9a-f]+", "ADDR", s)  # noqa: E731 - heap addresses move with ASLR
    assert scrub(out.read_text()) == scrub(direct.stdout), run.explain()
    assert err.read_text() == direct.stderr, run.explain()
    assert lldb_exit_status(run) == direct.returncode, run.explain()
    assert "exit status" in run.stdout and "in scope" in run.stdout, run.explain()


def test_programs_own_sigbus_handler_still_runs_while_armed() -> None:
    # The user lets SIGBUS through silently: the real bus error goes straight to the handler.
    run, reports, status = lldb_break_through([str(BUILD / "sigbus_handler"), "3"], stops=3,
                                         before=["process handle -s false -n false -p true SIGBUS"])
    assert len(reports) == 3, run.explain()
    assert "handler ran: si_code=2" in run.stdout, run.explain()
    assert status == 0, run.explain()


def test_programs_own_sigbus_handler_with_lldb_default_handling() -> None:
    """With lldb's default (stop, pass, notify), the real bus error stops as it would without
    ualdbg, and `continue` delivers it to the program's handler."""
    run, reports, status = lldb_break_through([str(BUILD / "sigbus_handler"), "3"], stops=4)
    assert len(reports) == 3, run.explain()
    assert "signal SIGBUS: illegal address" in run.stdout or "SIGBUS" in run.stdout.split("Unaligned")[-1], run.explain()
    assert "handler ran: si_code=2" in run.stdout, run.explain()
    assert status == 0, run.explain()


def test_rep_string_counts_one_fault_per_misaligned_element() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "rep_string"), "7"], stops=7)
    assert len(reports) == 7, run.explain()
    assert len({r.pc for r in reports}) == 1, run.explain()
    vas = [r.va for r in reports]
    assert vas == sorted(vas) and all(b - a == 8 for a, b in zip(vas, vas[1:])), run.explain()


def test_all_modules_widens_the_scope() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "aligned"), "10"], "--all-modules", stops=60)
    assert reports and any(" in libc" in r.where or " in ld-linux" in r.where for r in reports), run.explain()
    run, none, status = lldb_break_through([str(BUILD / "aligned"), "10"], stops=0)
    assert none == [] and status == 0, run.explain()


def test_stripped_binary_falls_back_to_module_offset() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "not_aligned_stripped"), "20"], stops=20)
    assert len(reports) == 20, run.explain()
    assert {r.where for r in reports} == {"not_aligned_stripped+0x119c"}, run.explain()
    assert all(r.file is None for r in reports)


def test_no_dwarf_binary_uses_the_symbol_table() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "not_aligned_nodwarf"), "20"], stops=20)
    assert len(reports) == 20, run.explain()
    assert {r.where for r in reports} == {"bump+0x23 in not_aligned_nodwarf"}, run.explain()


def test_arming_while_stopped_arms_now() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "3"], [
        "breakpoint set -n bump", "process launch", "ualdbg break", FLAGS.format(tag="FLAGS"),
        "breakpoint delete -f 1", "continue"], batch=False)
    assert "armed now" in run.stdout, run.explain()
    assert _flags(run.stdout, "FLAGS")[1] & 0x40000, run.explain()
    assert "Unaligned data access" in run.stdout, run.explain()


def test_our_breakpoints_stay_out_of_the_users_way() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "3"], [
        "ualdbg break", "breakpoint list", "process launch", "breakpoint delete -f", "ualdbg status", "continue"],
        batch=False)
    listed = run.stdout.split("(lldb) breakpoint list")[1].split("(lldb)")[0]
    assert not re.search(r"^\d+:", listed, re.M), run.explain()
    assert run.stdout.count("Unaligned data access") == 2, run.explain()  # `breakpoint delete` left ours


def test_program_sees_the_users_environment(tmp_path: Path) -> None:
    # /usr/bin/env itself makes one unaligned store: stop there (a crash to lldb --batch, which
    # then runs the -k commands), then let it finish.
    for extra, lines in ((None, None), ({"LINES": "7"}, "7")):
        out = tmp_path / f"env{lines}.out"
        run = run_lldb(["/usr/bin/env"], ["ualdbg break", f"process launch -o {out}"], crash=["ualdbg off", "continue"],
                       env=extra)
        text = out.read_text()
        assert "Unaligned data access" in run.stdout and re.search(r"^PATH=", text, re.M), run.explain()
        assert not re.search(r"^COLUMNS=", text, re.M), run.explain()
        found = re.search(r"^LINES=(.*)$", text, re.M)
        assert (found.group(1) if found else None) == lines, run.explain() + text


def test_help_comes_from_the_same_declaration_as_gdbs() -> None:
    from support.debuggers import run_gdb

    lldb_run = run_lldb([], ["ualdbg break --help", "help ualdbg", "help ualdbg trace show"])
    gdb_run = run_gdb([str(BUILD / "aligned")], ["ualdbg break --help"])
    usage = lambda text: text[text.index("usage: ualdbg break"):text.index("examples:")]  # noqa: E731
    assert usage(lldb_run.stdout) == usage(gdb_run.stdout), lldb_run.explain() + gdb_run.explain()
    for verb in ("break", "off", "status", "config", "trace"):
        assert re.search(rf"^\s+{verb}\s+--", lldb_run.stdout, re.M), lldb_run.explain()
    assert "--summary" in lldb_run.stdout and "--by {pc,line,function,module}" in lldb_run.stdout, lldb_run.explain()


def test_bad_option_is_one_error_line() -> None:
    run = run_lldb([str(BUILD / "aligned")], ["ualdbg break --bogus"])
    errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "unrecognized arguments: --bogus" in errors[0], run.explain()
    assert "Traceback" not in run.stdout + run.stderr, run.explain()


def test_config_sets_and_shows() -> None:
    run = run_lldb([], ["ualdbg config buffer 25", "ualdbg config", "ualdbg config source off", "ualdbg config source"])
    assert "buffer = 25" in run.stdout and "source = off" in run.stdout, run.explain()
    run = run_lldb([], ["ualdbg config buffer zero"])
    assert "error: buffer takes a whole number, not 'zero'" in run.stdout + run.stderr, run.explain()


def test_no_global_convenience_variables_in_the_adapter() -> None:
    # Commands read the execution context lldb passes them (STYLE.md); lldb.frame & co. are the
    # selected thread's, not the one a callback or stop hook is about.
    src = "\n".join(p.read_text() for p in (ROOT / "ualdbg" / "adapters" / "lldb").glob("*.py"))
    assert not re.search(r"(?<!`)\blldb\.(frame|thread|process|target|debugger)\b", src)
