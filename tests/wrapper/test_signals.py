"""Issue 29 (items 3, 4, 7): ualdbg handles signals as a wrapper does, in every engine. The grace
deadline after a SIGTERM holds whatever the program does (a CI timeout must end); a signal
inherited ignored (nohup, a script's background job) stays ignored in the program; a Ctrl-C
typed at a real terminal reaches the program once; and nothing ualdbg started outlives it when
it is SIGKILLed (an attached process is detached with no AC left, and an injected agent disarms
itself)."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.env import require_tool, scrubbed_env
from support.live import healthy, live_forker, live_program
from wrapperrun import (
    ENGINES,
    build_wrapped,
    env_with,
    ignoring,
    in_session,
    live_in_session,
    need,
    on_terminal,
    popen,
    program_for,
    ualdbg_argv,
)

GRACE = 10.0  # docs/CI.md: SIGKILL this long after the signal the program ignores


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_wrapped(tmp_path_factory.mktemp("wrapped"))


def _read_until_up(proc: subprocess.Popen[bytes], timeout: float = 240) -> bytes:
    """The program's first line, "up" (the debuggers take a while to start it)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the program never started"
    return proc.stdout.readline()


# --- the grace deadline -------------------------------------------------------------------------

@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_grace_deadline_holds_for_a_program_that_ignores_sigterm(engine: str, wrapped: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    """As timeout(1) ends its command: SIGTERM to ualdbg, then to its whole process group. The
    program ignores it; SIGKILL follows after the grace period, not at once (the two copies are
    one event) and not never (a wait restarted after each signal never looked at the clock)."""
    need(engine)
    out = tmp_path / "t.json"
    prog = program_for(engine, *wrapped)
    with in_session(ualdbg_argv("trace", *ENGINES[engine], "--json", str(out), "--", str(prog), "ignterm"),
                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert _read_until_up(proc) == b"up\n"
        time.sleep(0.3)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=GRACE + 60)
        took = time.monotonic() - sent
        assert GRACE - 0.5 <= took <= GRACE + 20, f"ended {took:.1f} s after the SIGTERM\n{err.decode()}"
        assert out.exists(), f"no trace written (status {proc.returncode})\n{err.decode()}"
        doc = json.loads(out.read_text())
        assert doc["program"]["exit_signal"] == signal.SIGKILL and doc["partial"] is True, doc["program"]
        assert doc["interrupted_by"] == "SIGTERM", doc.get("interrupted_by")
        assert proc.returncode in (128 + signal.SIGKILL, -signal.SIGKILL), err.decode()
        assert live_in_session(proc.pid) == []


@pytest.mark.parametrize("engine", ["trap-gdb", "static-gdb", "trap-lldb"])
def test_a_program_killed_at_a_debugger_stop_still_leaves_its_trace(engine: str, wrapped: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """The grace period's SIGKILL lands while the debugger is at one of the program's fault stops
    (it faults one access after the other): gdb then finds the process gone ("Couldn't get
    registers: No such process"), not an exit. What was recorded is still written, partial, and
    the program's end is that SIGKILL (it was status 125 and no trace, on a busy machine)."""
    need(engine)
    out = tmp_path / "t.json"
    prog = program_for(engine, *wrapped)
    with in_session(ualdbg_argv("trace", *ENGINES[engine], "--json", str(out), "--", str(prog), "ignterm", "busy"),
                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert _read_until_up(proc) == b"up\n"
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=GRACE + 60)
        assert out.exists(), f"no trace written (status {proc.returncode})\n{err.decode()}"
        doc = json.loads(out.read_text())
        assert doc["program"]["exit_signal"] == signal.SIGKILL and doc["partial"] is True, doc["program"]
        assert doc["faults_total"] > 0, doc["faults_total"]
        assert proc.returncode in (128 + signal.SIGKILL, -signal.SIGKILL), err.decode()


@pytest.mark.parametrize("engine", ["agent", "trap-gdb"])
def test_the_kill_at_the_deadline_takes_the_programs_own_processes(engine: str, tmp_path: Path) -> None:
    """SIGTERM to ualdbg alone (kill PID), the program a shell that ignores it and runs a command
    that ignores it too: at the deadline ualdbg kills the shell and the command it started, which
    would otherwise outlive ualdbg, orphaned (a test suite's programs under `check -- make
    check`). Before, only the shell was killed."""
    need(engine)
    out = tmp_path / "t.json"
    script = "trap '' TERM; sleep 300 & echo up; wait"
    with in_session(ualdbg_argv("trace", *ENGINES[engine], "--json", str(out), "--", "/bin/sh", "-c", script),
                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert _read_until_up(proc) == b"up\n"
        time.sleep(0.3)
        assert any(" sleep " in p for p in live_in_session(proc.pid)), live_in_session(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=GRACE + 60)
        assert out.exists(), f"no trace written (status {proc.returncode})\n{err.decode()}"
        assert json.loads(out.read_text())["interrupted_by"] == "SIGTERM", err.decode()
        assert live_in_session(proc.pid) == [], err.decode()


@pytest.mark.parametrize("how", [["timeout", "3"], ["timeout", "--foreground", "3"]])
def test_timeout_ends_ualdbg_within_the_grace_period(how: list[str], wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    """`timeout 3 ualdbg trace -- PROG` with PROG ignoring SIGTERM ends 3 s + the grace period
    later, whether timeout signals the process group too or (--foreground) ualdbg alone."""
    with in_session([*how, *ualdbg_argv("trace", "--json", str(tmp_path / "t.json"), "--", str(wrapped[0]), "ignterm")],
                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        started = time.monotonic()
        _, err = proc.communicate(timeout=3 + GRACE + 60)
        took = time.monotonic() - started
        assert 3 + GRACE - 0.5 <= took <= 3 + GRACE + 20, f"took {took:.1f} s\n{err.decode()}"
        assert proc.returncode == 124, err.decode()  # timeout's own: its command outlived the time
        assert live_in_session(proc.pid) == []


# --- nothing outlives ualdbg --------------------------------------------------------------------

@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sigkill_of_ualdbg_leaves_nothing_running(engine: str, wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    """No program, gdb, lldb or stepper of ualdbg's keeps running (traced, with AC set) after
    ualdbg itself is SIGKILLed: the parent-death signal on all it starts."""
    need(engine)
    prog = program_for(engine, *wrapped)
    with in_session(ualdbg_argv("trace", *ENGINES[engine], "--", str(prog), "sleep", "120"), cwd=tmp_path,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert _read_until_up(proc) == b"up\n"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while live_in_session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live_in_session(proc.pid) == [], "left running after ualdbg was SIGKILLed"


def _tracer(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        found = re.search(r"^TracerPid:\s+(\d+)", f.read(), re.M)
    assert found
    return int(found.group(1))


def test_sigkill_of_ualdbg_detaches_gdb_from_an_attached_process(test_programs: Path, tmp_path: Path) -> None:
    """`--pid` under gdb's trap engine (also the fallback for static programs and seccomp): the
    process is not ours to kill; when ualdbg dies gdb disarms every thread and detaches, and the
    process goes on untraced with no AC set."""
    need("trap-gdb")
    with live_program(test_programs, tmp_path) as live:
        cli = popen(ualdbg_argv("trace", "--engine", "trap", "--pid", str(live.pid)), cwd=tmp_path,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert cli.stderr is not None
        line = cli.stderr.readline()
        assert f"attached to process {live.pid}" in line, line
        time.sleep(1.0)  # faults traced, with AC set in every thread
        assert _tracer(live.pid) != 0
        _kill_and_wait_untraced(cli, live.pid, "ualdbg")
        end = live.finish()
    assert end["ac_left"] == "0" and healthy(end), end


def _kill_and_wait_untraced(tracer: subprocess.Popen[Any], pid: int, who: str) -> None:
    """SIGKILL `tracer`; `pid` is untraced within 20 s (the kernel detaches it)."""
    os.kill(tracer.pid, signal.SIGKILL)
    tracer.wait()
    deadline = time.monotonic() + 20
    while _tracer(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tracer(pid) == 0, f"still traced after {who} was SIGKILLed"


def _state(pid: int) -> str:
    """The process's and its threads' states (/proc), for a failure's message."""
    states = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                found = re.search(r"^State:\s+(.*)$", f.read(), re.M)
        except FileNotFoundError:  # the thread ended since the listing (the agent's watchdog does)
            continue
        states.append(f"{tid}: {found.group(1) if found else '?'}")
    return ", ".join(states)


def _threads_with_ac(pid: int) -> list[int]:
    """The threads of `pid` whose EFLAGS has AC set, read under a brief ptrace stop."""
    from ualdbg.cli.inject import AC, Process

    proc = Process(pid)
    try:
        proc.stop_all()
        return sorted(tid for tid, stopped in proc.threads.items() if stopped and proc.regs(tid).eflags & AC)
    finally:
        proc.detach_all()
        proc.close()


def test_sigkill_of_ualdbg_disarms_the_agent_it_injected(test_programs: Path, tmp_path: Path) -> None:
    """`--pid` with the agent: nothing outside the process is left to disarm it when ualdbg is
    SIGKILLed (the OOM killer, a CI timeout), so the agent sees its ualdbg gone at a fault and
    disarms itself. Within a second no thread has AC set, the agent says it is an orphan (no
    tracer: a later --pid removes it and traces), a SIGBUS sent to the process reaches the
    program's own handler, and the program ends normally with its state as it was."""
    from ualdbg.agent.presence import loaded_agents

    with live_program(test_programs, tmp_path) as live:
        cli = popen(ualdbg_argv("trace", "--pid", str(live.pid)), cwd=tmp_path,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert cli.stderr is not None
        line = cli.stderr.readline()
        assert f"attached to process {live.pid} (agent injected)" in line, line
        time.sleep(0.5)  # counting, AC set in every thread
        assert _threads_with_ac(live.pid), "the agent armed no thread"
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
        cli.stderr.close()
        time.sleep(1.0)
        assert _threads_with_ac(live.pid) == [], "AC still set a second after ualdbg was SIGKILLed"
        agents = loaded_agents(live.pid)
        assert [(a.owner, a.orphan) for a in agents] == [(0, cli.pid)], agents
        os.kill(live.pid, signal.SIGBUS)  # not an alignment fault: the program's own handler's
        time.sleep(0.2)
        # A later --pid removes the disarmed agent in one line and traces the process afresh.
        out = tmp_path / "again.json"
        again = subprocess.run(ualdbg_argv("trace", "--pid", str(live.pid), "--duration", "1", "--json", str(out)),
                               cwd=tmp_path, env=env_with(), stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=120)
        end = live.finish()
    assert again.returncode == 0, again.stderr
    assert (f"removed the agent a killed ualdbg (process {cli.pid}) left in process {live.pid}, "
            "which had disarmed itself") in again.stderr, again.stderr
    doc = json.loads(out.read_text())
    assert doc["attached"]["engine"] == "agent" and doc["faults_total"] > 100, doc["attached"]
    assert end["own_sigbus"] == "1", end  # the one sent; no alignment fault ever reached it
    assert healthy({**end, "own_sigbus": "0"}), end


@pytest.mark.parametrize("debugger", ["gdb", "lldb"])
def test_sigkill_of_the_debugger_disarms_the_agent_it_injected(debugger: str, test_programs: Path,
                                                                tmp_path: Path) -> None:
    """`ualdbg trace start` in gdb or lldb attached to a running process injects the agent; if the
    debugger is then SIGKILLed, nothing outside is left to release it: the agent watches the
    debugger (watch=1, as `--pid` watches ualdbg) and disarms itself. The kernel detaches the
    process, no thread keeps AC, and the program ends as it would have."""
    from support.debuggers import GDB_ENTRY, LLDB_ENTRY, lldb_path

    need("trap-gdb" if debugger == "gdb" else "trap-lldb")
    with live_program(test_programs, tmp_path) as live:
        if debugger == "gdb":
            argv = [require_tool("gdb"), "-q", "-nx", "-batch", "-x", str(GDB_ENTRY), "-p", str(live.pid),
                    "-ex", "ualdbg trace start", "-ex", "continue"]
        else:
            argv = [lldb_path(), "--no-lldbinit", "-o", f"command script import {LLDB_ENTRY}", "-p", str(live.pid),
                    "-o", "ualdbg trace start", "-o", "continue"]
        with open(tmp_path / "debugger.out", "w") as out:
            dbg = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=scrubbed_env(), cwd=tmp_path)
        deadline = time.monotonic() + 60
        while "through the in-process agent" not in (tmp_path / "debugger.out").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = (tmp_path / "debugger.out").read_text()
        assert "through the in-process agent (injected now" in log, log
        time.sleep(0.5)  # counting, AC set in every thread
        _kill_and_wait_untraced(dbg, live.pid, "the debugger")
        # The agent's watchdog wakes as the debugger dies; a thread stopped by the debugger's
        # server then (lldb-server outlives lldb for a moment) is disarmed at its next fault.
        # A SIGSTOP the dead debugger had sent (to stop the threads at a stop of its own) may be
        # left pending when the kernel detaches the process, which then stops as a job: what gdb
        # and lldb alone do, and a shell's `fg` ends. Continued here, as the shell would.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "T (stopped)" in _state(live.pid):
                os.kill(live.pid, signal.SIGCONT)
            # (It runs until told to stop: an end now is a death, said with what killed it and
            # what the debugger wrote, rather than as /proc/PID/mem missing.)
            assert live.proc.poll() is None, (f"the program ended (status {live.proc.returncode}) after the debugger "
                                              f"was SIGKILLed\n{live.out.read_text()}\n{(tmp_path / 'debugger.out').read_text()}")
            if not (left := _threads_with_ac(live.pid)):
                break
            time.sleep(0.2)
        assert left == [], f"AC still set 10 s after the debugger was SIGKILLed ({_state(live.pid)})"
        end = live.finish()
    assert end["ac_left"] == "0" and healthy(end), end


def test_sigkill_of_ualdbg_disarms_the_agent_in_a_child_forked_while_attached(test_programs: Path,
                                                                              tmp_path: Path) -> None:
    """A child the process forked while attached carries the agent, armed, but not its watchdog
    thread: its own alignment faults look at the pidfd of its ualdbg (every 50 ms at most), and
    the first after the SIGKILL disarms it (--no-patch: every one of its faults traps)."""
    with live_forker(test_programs, tmp_path) as prog:
        cli = popen(ualdbg_argv("trace", "--pid", str(prog.pid), "--no-patch"), cwd=tmp_path,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert cli.stderr is not None
        line = cli.stderr.readline()
        assert f"attached to process {prog.pid} (agent injected)" in line, line
        time.sleep(0.3)
        prog.fork()  # now, while attached
        time.sleep(0.5)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
        cli.stderr.close()
        time.sleep(1.0)
        got = prog.finish()  # both report whether AC is still set
    assert {who: v[2:] for who, v in got.items()} == {"parent": ("0", "0", "ok"), "child": ("0", "0", "ok")}, got


# --- dispositions the program inherits ------------------------------------------------------------

INHERITED = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1")
BLOCKED = ("SIGUSR2", "SIGWINCH")


def _status_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("SigIgn:", "SigBlk:"))]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_signals_inherited_ignored_stay_ignored_in_the_program(engine: str, wrapped: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    """Started with HUP, INT, QUIT, TERM and USR1 ignored and USR2 and WINCH blocked, the program
    sees the SigIgn and SigBlk a direct run sees (not 0: ualdbg's own handlers, or an exec through
    gdb, replaced them)."""
    need(engine)
    prog = program_for(engine, *wrapped)
    # SIGRTMAX as a caller's own ignored signal (a CI runner had signal 32 ignored).
    setup = ignoring(*INHERITED, "SIGRTMAX", blocked=BLOCKED)
    direct = subprocess.run([str(prog), "show"], preexec_fn=setup, capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path, check=True)
    want = _status_lines(direct.stdout)
    # What this test set is in the direct run's masks; what the caller (a CI runner) already
    # ignored or blocked is there too, and must pass through ualdbg as well.
    masks = {line.split(":")[0]: int(line.split()[1], 16) for line in want}
    assert masks["SigIgn"] & 0x8000000000004207 == 0x8000000000004207 and masks["SigBlk"] & 0x08000800 == 0x08000800, direct.stdout
    traced = subprocess.run(ualdbg_argv("trace", *ENGINES[engine], "--", str(prog), "show"),
                            preexec_fn=setup, capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, cwd=tmp_path, env=env_with())
    assert traced.returncode == 0, traced.stderr
    assert _status_lines(traced.stdout) == want, traced.stdout


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_nohup_keeps_the_program_alive_through_a_hangup(engine: str, wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    """`nohup ualdbg trace -- PROG`: the terminal's hang-up (SIGHUP to the whole process group)
    leaves ualdbg and the program running, as it leaves `nohup PROG`; the program ends on its own."""
    need(engine)
    prog = program_for(engine, *wrapped)
    flag = tmp_path / "go-on"
    with in_session(["nohup", *ualdbg_argv("trace", *ENGINES[engine], "--", str(prog), "wait", str(flag))],
                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert _read_until_up(proc) == b"up\n"
        os.killpg(proc.pid, signal.SIGHUP)
        time.sleep(0.5)
        flag.touch()
        out, err = proc.communicate(timeout=120)
        assert out == b"done\n", err.decode()
        assert proc.returncode == 0, err.decode()


# --- a real terminal -----------------------------------------------------------------------------

@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_ctrl_c_typed_at_a_terminal_reaches_the_program_once(engine: str, wrapped: tuple[Path, Path],
                                                             tmp_path: Path) -> None:
    """In a pseudo-terminal, as a user types it: Ctrl-C reaches the program exactly once (not
    swallowed by gdb, not sent twice by ualdbg), its handler runs and its status passes through."""
    need(engine)
    prog = program_for(engine, *wrapped)
    shown, status = on_terminal(ualdbg_argv("trace", *ENGINES[engine], "--", str(prog), "sigint"), cwd=tmp_path,
                                env=env_with(), key=b"\x03")
    assert status is not None, shown
    assert "sigint 1\r\n" in shown, shown
    assert status == 42, shown
