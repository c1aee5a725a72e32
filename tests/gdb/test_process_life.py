"""Arming across a process's life in real gdb: at start, across fork and exec, after attach,
and nothing left armed after detach or quit."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from support.debuggers import gdb_break_through, run_gdb, run_gdb_script
from support.env import BUILD
from support.reports import parse_reports


def test_fork_child_runs_unarmed_and_exec_rearms(test_programs: Path, tmp_path: Path) -> None:
    # Parent: main's store (1) + bump before and after fork (2 faults each). The forked child
    # is not traced: it must start with AC clear or its bump would kill it with SIGBUS.
    run, reports, status = gdb_break_through([str(test_programs / "forker")], tmp_path)
    assert len(reports) == 5, run.explain()
    assert "parent: child status 0 signaled 0" in run.stdout, run.explain()
    # exec: 1 + 2 before execve, AC is cleared by exec and re-armed at the new main: 1 + 4.
    run, reports, status = gdb_break_through([str(test_programs / "forker"), "exec"], tmp_path)
    assert len(reports) == 8, run.explain()
    assert "exec'd child ok" in run.stdout and status == 0, run.explain()


def test_at_start_includes_the_loader(tmp_path: Path) -> None:
    # From the first instruction the loader's relocation and libc's start-up are seen too; from
    # main only what runs after it (lazy PLT binding in ld.so, stdio in libc).
    run, reports, _ = gdb_break_through([str(BUILD / "aligned"), "10"], tmp_path, opts="--at start --all-modules")
    run2, reports2, _ = gdb_break_through([str(BUILD / "aligned"), "10"], tmp_path, opts="--all-modules")
    in_loader = sum("ld-linux" in r.where for r in reports)
    assert in_loader > 10 * max(1, sum("ld-linux" in r.where for r in reports2)), run.explain()
    assert len(reports) > len(reports2), run.explain()


def _attach_session(test_programs: Path, tmp_path: Path, commands: list[str]) -> tuple[str, str]:
    go = tmp_path / "go"
    out = tmp_path / "am.out"
    with open(out, "w") as f:
        proc = subprocess.Popen([str(test_programs / "attach_me"), str(go), "4"], stdout=f)
    try:
        deadline = time.time() + 10
        while "pid=" not in out.read_text() and time.time() < deadline:
            time.sleep(0.02)
        cmds = [c.format(pid=proc.pid, go=go) for c in commands]
        run = run_gdb([str(test_programs / "attach_me")], cmds, timeout=60)
        proc.wait(timeout=20)
        assert proc.returncode == 0, run.explain() + f"\nprogram exit {proc.returncode}"
        return run.stdout + run.stderr, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_armed_before_attach(test_programs: Path, tmp_path: Path) -> None:
    gdb_out, prog_out = _attach_session(test_programs, tmp_path, [
        "ualdbg break", "attach {pid}", "shell touch {go}", "continue", "continue", "ualdbg off", "detach"])
    assert "attached: armed 1 thread" in gdb_out, gdb_out
    assert gdb_out.count("Unaligned data access") == 2, gdb_out
    va = int(re.search(r"virtual address = (0x[0-9a-f]+)", gdb_out).group(1), 16)
    assert va == int(re.search(r"p=(0x[0-9a-f]+)", prog_out).group(1), 16)
    assert "done 4" in prog_out


def test_detach_without_off_leaves_the_program_healthy(test_programs: Path, tmp_path: Path) -> None:
    # Stopped at a fault (AC clear, TF set in that thread) and detached: a leftover TF would
    # kill it with SIGTRAP, a leftover AC with SIGBUS at its next unaligned access.
    gdb_out, prog_out = _attach_session(test_programs, tmp_path, [
        "attach {pid}", "ualdbg break", "shell touch {go}", "continue", "detach"])
    assert gdb_out.count("Unaligned data access") == 1, gdb_out
    assert "done 4" in prog_out


def test_quit_without_off_leaves_the_program_healthy(test_programs: Path, tmp_path: Path) -> None:
    gdb_out, prog_out = _attach_session(test_programs, tmp_path, [
        "attach {pid}", "ualdbg break", "shell touch {go}", "continue", "quit"])
    assert "done 4" in prog_out


PROGRAM_TRAPS = """
import gdb
{handle}
gdb.execute("ualdbg break")
gdb.execute("run")
while gdb.selected_inferior().pid:
    gdb.execute("continue")
print("EXIT-STATUS", gdb.convenience_variable("_exitcode"))
"""


def test_the_programs_own_sigtraps_behave_as_in_plain_gdb(test_programs: Path, tmp_path: Path) -> None:
    # gdb backs the PC up onto a program's int3 as if it were its own breakpoint and moves it
    # forward again only for a signal nothing explains; ualdbg's SIGTRAP catchpoint explains
    # every trap, so ualdbg must do gdb's part (this used to loop on the int3 forever).
    prog = [str(test_programs / "traps")]
    native = subprocess.run(prog, capture_output=True, text=True, timeout=30)
    assert native.returncode == 2 and "traps=2 value=101010101010101" in native.stdout
    # gdb's default, `handle SIGTRAP stop print nopass`: both traps stop and neither reaches the
    # program's handler, with or without ualdbg.
    plain = run_gdb(prog, ["run"] + ["continue"] * 3, source=False, timeout=60)
    assert "traps=0 value=101010101010101" in plain.stdout, plain.explain()
    run = run_gdb_script(prog, PROGRAM_TRAPS.format(handle=""), tmp_path, timeout=60)
    assert "traps=0 value=101010101010101" in run.stdout, run.explain()
    assert "EXIT-STATUS 0" in run.stdout, run.explain()
    assert run.stdout.count("(signal SIGTRAP)") == 2, run.explain()
    assert len(parse_reports(run.stdout)) == 1, run.explain()
    # `handle SIGTRAP pass`: the program's handler gets both, as when it runs natively.
    run = run_gdb_script(prog, PROGRAM_TRAPS.format(handle='gdb.execute("handle SIGTRAP nostop noprint pass")'),
                         tmp_path, timeout=60)
    assert native.stdout in run.stdout, run.explain()
    assert "EXIT-STATUS 2" in run.stdout, run.explain()
    assert "(signal SIGTRAP)" not in run.stdout, run.explain()
    assert len(parse_reports(run.stdout)) == 1, run.explain()


def test_a_second_run_is_not_armed_before_main(tmp_path: Path) -> None:
    # The first run ends armed; the second must start unarmed and arm at its own `main`, or a
    # stop before main (here `starti`) arms the loader and libc start-up, out of scope.
    script = """
import gdb
gdb.execute("ualdbg trace start --engine trap")  # its one trace across runs (the agent keeps the last run's)
gdb.execute("run")
gdb.execute("starti")
print("EFLAGS-AT-START", hex(int(gdb.parse_and_eval("$eflags"))))
gdb.execute("continue")
gdb.execute("ualdbg trace save {out}")
"""
    out = tmp_path / "two.json"
    run = run_gdb_script([str(BUILD / "not_aligned"), "7"], script.format(out=out), tmp_path)
    flags = int(re.search(r"^EFLAGS-AT-START (0x[0-9a-f]+)$", run.stdout, re.M).group(1), 16)
    assert not flags & 0x40000, run.explain()
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == 14, run.explain()  # 7 per run, one trace across both
