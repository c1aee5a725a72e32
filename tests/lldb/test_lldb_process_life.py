"""Arming across a process's life in real lldb: new threads, fork, exec, `--at start`, after
`process attach`, and nothing left armed when lldb quits."""
from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.debuggers import lldb_break_through, lldb_exit_status, run_lldb
from support.env import BUILD


def test_fork_child_runs_unarmed_and_exec_rearms(test_programs: Path) -> None:
    # Parent: main's store (1) + bump before and after fork (2 faults each). The forked child
    # is not traced: it must start with AC clear or its bump would kill it with SIGBUS.
    run, reports, status = lldb_break_through([str(test_programs / "forker")], stops=5)
    assert len(reports) == 5, run.explain()
    assert "parent: child status 0 signaled 0" in run.stdout and status == 0, run.explain()
    # exec: 1 + 2 before execve, AC is cleared by exec and re-armed at the new main: 1 + 4.
    run, reports, status = lldb_break_through([str(test_programs / "forker"), "exec"], stops=9)
    assert len(reports) == 8, run.explain()
    assert "stop reason = exec" in run.stdout, run.explain()  # lldb's own stop, kept
    assert "exec'd child ok" in run.stdout and status == 0, run.explain()


def test_new_threads_start_unarmed_then_armed_at_their_start() -> None:
    # A new pthread starts with SIGBUS blocked and libc stores misaligned at once: armed too
    # early it would die (or the kernel would reset the program's SIGBUS handler). Every
    # worker's faults are still all seen, so each thread was armed once its mask was restored.
    run = run_lldb([str(BUILD / "threads"), "10"], ["ualdbg trace start --all-modules", "process launch",
                                                  "ualdbg trace show --by function"])
    for fn, n in (("worker_a", 10), ("worker_b", 20), ("worker_c", 30)):
        assert re.search(rf"^\s*{n}\s+\S+%.*\b{fn}\b", run.stdout, re.M), run.explain()
    assert lldb_exit_status(run) == 0, run.explain()


def test_at_start_includes_the_loader() -> None:
    run, reports, _ = lldb_break_through([str(BUILD / "aligned"), "10"], "--at start --all-modules", stops=800)
    run2, reports2, _ = lldb_break_through([str(BUILD / "aligned"), "10"], "--all-modules", stops=200)
    in_loader = sum("ld-linux" in r.where for r in reports)
    assert in_loader > 10 * max(1, sum("ld-linux" in r.where for r in reports2)), run.explain()
    assert len(reports) > len(reports2), run.explain()


@contextmanager
def attach_me(test_programs: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    go = tmp_path / "go"
    out = tmp_path / "am.out"
    with open(out, "w") as f:
        proc = subprocess.Popen([str(test_programs / "attach_me"), str(go), "4"], stdout=f)
    try:
        deadline = time.time() + 10
        while "pid=" not in out.read_text() and time.time() < deadline:
            time.sleep(0.02)
        yield proc, go, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _attach_session(test_programs: Path, tmp_path: Path, commands: list[str]) -> tuple[str, str]:
    with attach_me(test_programs, tmp_path) as (proc, go, out):
        cmds = [c.format(pid=proc.pid, go=go) for c in commands]
        run = run_lldb([], [f"target create {test_programs / 'attach_me'}", *cmds], batch=False, timeout=60)
        proc.wait(timeout=20)
        assert proc.returncode == 0, run.explain() + f"\nprogram exit {proc.returncode}"
        return run.stdout + run.stderr, out.read_text()


def test_armed_before_attach(test_programs: Path, tmp_path: Path) -> None:
    out, prog_out = _attach_session(test_programs, tmp_path, [
        "ualdbg break", "process attach -p {pid}", "platform shell touch {go}", "continue", "continue",
        "ualdbg off", "process detach"])
    assert "ualdbg: attached: armed 1 thread(s)" in out, out
    assert out.count("Unaligned data access") == 2, out
    va = int(re.search(r"virtual address = (0x[0-9a-f]+)", out).group(1), 16)
    assert va == int(re.search(r"p=(0x[0-9a-f]+)", prog_out).group(1), 16)
    assert "done 4" in prog_out


def test_armed_after_attach(test_programs: Path, tmp_path: Path) -> None:
    out, prog_out = _attach_session(test_programs, tmp_path, [
        "process attach -p {pid}", "ualdbg break", "platform shell touch {go}", "continue", "ualdbg off", "continue"])
    assert "armed now: 1 thread(s)" in out, out
    assert out.count("Unaligned data access") == 1, out
    assert "done 4" in prog_out


def test_quit_without_off_leaves_the_program_healthy(test_programs: Path, tmp_path: Path) -> None:
    # Stopped at a fault (AC still set: lldb re-runs the instruction on resume) and lldb quits,
    # which detaches: a leftover AC would kill the program with SIGBUS at its next access.
    out, prog_out = _attach_session(test_programs, tmp_path, [
        "process attach -p {pid}", "ualdbg break", "platform shell touch {go}", "continue", "quit"])
    assert out.count("Unaligned data access") == 1, out
    assert "done 4" in prog_out


def test_off_then_detach_leaves_the_program_healthy(test_programs: Path, tmp_path: Path) -> None:
    out, prog_out = _attach_session(test_programs, tmp_path, [
        "process attach -p {pid}", "ualdbg break", "platform shell touch {go}", "continue", "ualdbg off",
        "process detach"])
    assert "done 4" in prog_out, out


def test_detach_without_off_leaves_the_program_healthy(test_programs: Path, tmp_path: Path) -> None:
    # Stopped at a fault with AC set in every thread; `process detach` and its alias `detach`
    # must clear it first (lldb's command override callback), or the program dies of SIGBUS.
    for n, detach in enumerate(("process detach", "detach")):
        (tmp_path / str(n)).mkdir()
        out, prog_out = _attach_session(test_programs, tmp_path / str(n), [
            "process attach -p {pid}", "ualdbg break", "platform shell touch {go}", "continue", detach])
        assert out.count("Unaligned data access") == 1, out
        assert "done 4" in prog_out, out
