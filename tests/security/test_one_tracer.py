"""Issue 29, 6: one tracer per process. Two `ualdbg trace --pid` started together on one process
once raced: the second fell back to gdb, the first one's detach then failed (status 2, its JSON
lost) and the agent stayed armed. Now, round after round, exactly one wins and its JSON is whole;
the other says so in one line with status 2 and never touches gdb; and after each round the
program ends with no thread armed, its own SIGBUS handler never run and its handlers as they were
(support.live: AC read in every thread, sigaction read back)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import run_cli
from support.env import ROOT, scrubbed_env
from support.live import WORKERS, healthy, live_program

ROUNDS = 10


def _start(pid: int, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(pid), "--duration", "60",
                             "--json", str(out), *extra], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=scrubbed_env(), cwd=ROOT)


@pytest.mark.parametrize("second", ["agent", "trap"])
def test_two_concurrent_pid_traces_one_wins(test_programs: Path, tmp_path: Path, second: str) -> None:
    rounds = ROUNDS if second == "agent" else ROUNDS // 2
    for r in range(rounds):
        outs = [tmp_path / f"r{r}-a.json", tmp_path / f"r{r}-b.json"]
        (tmp_path / f"r{r}").mkdir()
        with live_program(test_programs, tmp_path / f"r{r}") as live:
            procs = [_start(live.pid, outs[0]), _start(live.pid, outs[1], *(["--engine", "trap"] if second == "trap" else []))]
            # Both windows are long, so that they overlap however slowly gdb starts on a loaded machine
            # (with 1 s windows the agent's could end before gdb attached, and both won in turn). The
            # loser ends at once; then the winner gets Ctrl-C's SIGINT, which ends a --pid trace.
            deadline = time.time() + 120
            while all(p.poll() is None for p in procs) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            done = []
            for p in procs:
                try:
                    stdout, stderr = p.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    stdout, stderr = p.communicate()
                done.append((p.returncode, stderr))
            end = live.finish()
        said = "\n".join(f"--- {i}: status {rc}\n{err}" for i, (rc, err) in enumerate(done))
        winners = [i for i, (rc, _err) in enumerate(done) if rc == 0]
        assert len(winners) == 1, f"round {r}: {said}"
        loser = 1 - winners[0]
        lines = [line for line in done[loser][1].splitlines() if line.strip()]
        assert done[loser][0] == 2 and len(lines) == 1 and "is already traced by" in lines[0], f"round {r}: {said}"
        assert "gdb instead" not in said and not outs[loser].exists(), f"round {r}: {said}"
        doc = json.loads(outs[winners[0]].read_text())
        assert doc["attached"]["detached"] and doc["faults_total"] > 0, f"round {r}: {doc['attached']}\n{said}"
        # The winner's count is the program's own count of its armed iterations: nobody else armed it.
        assert abs(doc["faults_total"] - int(end["armed"])) <= 2 * (WORKERS + 1), f"round {r}: {doc['faults_total']} {end}"
        assert healthy(end), f"round {r}: {end}\n{said}"


def test_a_process_ualdbg_started_is_not_traced_twice(test_programs: Path, tmp_path: Path) -> None:
    # `ualdbg trace -- PROG` preloaded the agent: a `--pid` on PROG (either engine) finds it armed.
    live, out, doc = tmp_path / "live", tmp_path / "out", tmp_path / "t.json"
    live.mkdir()
    with open(out, "w") as f:
        first = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--json", str(doc), "--",
                                  str(test_programs / "live_workers"), str(live), str(WORKERS), "500", "0"],
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=scrubbed_env(), cwd=ROOT)
    try:
        deadline = time.time() + 60
        while "ready" not in out.read_text() and time.time() < deadline:
            time.sleep(0.05)
        m = re.search(r"live: pid=(\d+) ready", out.read_text())
        assert m, out.read_text()
        for engine in ("agent", "trap"):
            p = run_cli("trace", "--pid", m.group(1), "--engine", engine, "--duration", "0.5", timeout=120)
            lines = [line for line in p.stderr.splitlines() if line.strip()]
            assert p.returncode == 2 and len(lines) == 1, p.explain()
            assert f"is already traced by ualdbg (process {first.pid}, which started it)" in lines[0], p.explain()
    finally:
        (live / "stop").touch()
        first.wait(timeout=60)
    assert first.returncode == 0, out.read_text()
    final = re.search(r"live: iterations=\d+ armed=(\d+)", out.read_text())
    assert final and json.loads(doc.read_text())["faults_total"] == int(final.group(1)), out.read_text()  # exact, alone
