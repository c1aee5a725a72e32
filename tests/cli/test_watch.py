"""Issue 20: `ualdbg watch`, the live fault rate: a rich table on a terminal (q detaches and
prints the summary), one line or one JSON object per interval otherwise."""
from __future__ import annotations

import json
import os
import pty
import select
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
            for _ in range(300):  # never hang the suite: a stuck watch is killed after 30 s
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, 9)
                _, status = os.waitpid(pid, 0)
            os.close(fd)
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
