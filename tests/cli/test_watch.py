"""Issue 20: `ualdbg watch`, the live fault rate: a rich table on a terminal (q detaches and
prints the summary), one line or one JSON object per interval otherwise."""
from __future__ import annotations

import json
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

from support.cli import run_cli
from support.env import ROOT, scrubbed_env
from support.live import WORKERS, healthy, live_program

IN_FLIGHT = 2 * (WORKERS + 1)


def test_watch_pid_json_lines(test_programs: Path, tmp_path: Path) -> None:
    final = tmp_path / "w.json"
    with live_program(test_programs, tmp_path) as live:
        p = run_cli("watch", "--pid", str(live.pid), "--duration", "3.2", "--json-lines", "--json", str(final),
                    timeout=120)
        end = live.finish()
    assert p.returncode == 0, p.explain()
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) >= 3, p.explain()
    for a, b in zip(lines, lines[1:]):
        assert b["time"] > a["time"] and b["faults_total"] >= a["faults_total"], lines
    first = lines[0]
    assert first["rate"] > 0 and 2 <= first["threads"] <= WORKERS + 3, first
    site = first["sites"][0]
    assert site["function"] == "bump" and Path(site["file"]).name == "live_workers.c" and site["line"] == 38, site
    assert site["peak"] >= site["rate"] > 0
    doc = json.loads(final.read_text())
    assert lines[-1]["faults_total"] == doc["faults_total"], p.explain()
    assert abs(doc["faults_total"] - int(end["armed"])) <= IN_FLIGHT, f"{doc['faults_total']} {end}"
    assert "detached from process" in p.stderr, p.explain()
    assert healthy(end), f"{end}\n{p.explain()}"


def test_watch_program_lines_under_the_agent(test_programs: Path, tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    p = run_cli("watch", "--", str(test_programs / "live_workers"), str(d), str(WORKERS), "200", "2500", timeout=120)
    assert p.returncode == 0, p.explain()
    rows = [line for line in p.stderr.splitlines() if line.startswith("ualdbg watch:")]
    assert len(rows) >= 2 and all("top bump live_workers.c:38" in r for r in rows), p.explain()
    assert "engine agent" in p.stderr and "live: iterations=" in p.stdout, p.explain()  # the program's stdout is its own


def _reap(pid: int, fd: int, seconds: float) -> int:
    """The wait status of ualdbg on its pty; never hang the suite: a stuck watch is killed after
    `seconds`."""
    for _ in range(int(seconds * 10)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return status


def test_watch_on_a_terminal_q_detaches(test_programs: Path, tmp_path: Path) -> None:
    with live_program(test_programs, tmp_path) as live:
        pid, fd = pty.fork()
        if pid == 0:  # the child: ualdbg on a terminal
            os.chdir(ROOT)
            os.execve(sys.executable, [sys.executable, "-m", "ualdbg", "watch", "--pid", str(live.pid)],
                      {**scrubbed_env(), "TERM": "xterm", "COLUMNS": "120", "LINES": "40"})
        screen = b""

        def read_until(marker: bytes, timeout: float) -> bool:
            nonlocal screen
            deadline = time.time() + timeout
            while marker not in screen and time.time() < deadline:
                if select.select([fd], [], [], 0.2)[0]:
                    try:
                        screen += os.read(fd, 65536)
                    except OSError:
                        return False
            return marker in screen

        try:
            assert read_until(b"now/s", 60), screen.decode(errors="replace")
            assert read_until(b"bump", 10), screen.decode(errors="replace")
            os.write(fd, b"q")
            assert read_until(b"no thread has AC set", 60), screen.decode(errors="replace")
        finally:
            status = _reap(pid, fd, 30)
        end = live.finish()
    text = screen.decode(errors="replace")
    assert os.WEXITSTATUS(status) == 0, text
    assert "peak/s" in text and "live_workers.c:38" in text and "faults/s" in text, text
    assert "detached from process" in text and "(q)" in text, text
    assert healthy(end), f"{end}\n{text}"


def test_watch_needs_a_pid_or_a_program() -> None:
    p = run_cli("watch")
    assert p.returncode == 2 and "give --pid PID or -- PROG ARGS" in p.stderr, p.explain()
    p = run_cli("watch", "--pid", "4000000")
    assert p.returncode == 2 and p.stderr.strip() == "ualdbg: no process 4000000", p.explain()


def _watch_on_a_terminal(argv: list[str], key: bytes, after: bytes, timeout: float = 90) -> tuple[bytes, int]:
    """`ualdbg watch ARGV` on a 120x40 pty: `key` typed once `after` is on the screen; the whole
    screen's bytes and ualdbg's wait status."""
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:
        # A terminal's shell starts its jobs with SIGINT at its default; a CI job started in the
        # background of a non-interactive shell has it ignored, which ualdbg (rightly) passes on
        # to the program, and the typed Ctrl-C would then end nothing.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "ualdbg", "watch", *argv], {**scrubbed_env(), "TERM": "xterm"})
    screen, sent = b"", False
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if not sent and after in screen:
                os.write(fd, key)
                sent = True
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                screen += chunk
    finally:
        status = _reap(pid, fd, 10)
    assert sent, screen.decode(errors="replace")
    return screen, status


def test_watch_program_on_a_terminal_q_lets_it_run_on(test_programs: Path, tmp_path: Path) -> None:
    """Issue 31, problem 6: q stops watching and PROG runs on to its end; its output goes above
    the live table, not over it; its exit status passes through; data mapped after the agent's
    last maps snapshot is named from the maps watch read while it ran."""
    doc_path, mapped = tmp_path / "w.json", tmp_path / "late.bin"
    screen, status = _watch_on_a_terminal(
        ["--no-patch", "--interval", "0.2", "--json", str(doc_path), "--", str(test_programs / "watch_late_map"),
         str(mapped), "40"], b"q", b"tick 8")
    text = screen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 3, text  # the program's own status
    stop = screen.find(b"stopped watching (q)")
    assert stop > 0 and b"now/s" in screen[:stop], text
    assert b"tick 39" in screen[stop:] and b"done " in screen[stop:], text  # it ran on, its output still shown
    for line in screen[:stop].split(b"\n"):  # before q: each line of the program's is a line of its own
        if b"tick " in line:
            assert not any(c in line for c in ("│".encode(), "┃".encode())), line
    assert b"Unaligned accesses in" in screen[stop:], text
    doc = json.loads(doc_path.read_text())
    (site,) = doc["sites"]
    assert doc["program"]["exit_status"] == 3 and site["count"] == 1, doc
    assert site["data"]["text"] == f"mapped file {mapped} at file offset 65", site["data"]


def test_watch_program_on_a_terminal_ctrl_c(test_programs: Path, tmp_path: Path) -> None:
    """Ctrl-C reaches PROG as without ualdbg: a program that handles SIGINT ends as it chooses
    (status 4 here) and watch exits with it; one that does not dies of it, and so does watch."""
    prog = str(test_programs / "watch_late_map")
    screen, status = _watch_on_a_terminal(["--", prog, str(tmp_path / "a.bin"), "300", "handle"], b"\x03", b"tick 5")
    assert os.waitstatus_to_exitcode(status) == 4 and b"Unaligned accesses in" in screen, screen.decode(errors="replace")
    screen, status = _watch_on_a_terminal(["--", prog, str(tmp_path / "b.bin"), "300"], b"\x03", b"tick 5")
    assert os.waitstatus_to_exitcode(status) == -2, screen.decode(errors="replace")  # killed by SIGINT, as PROG
    assert b"killed by signal 2" in screen, screen.decode(errors="replace")
