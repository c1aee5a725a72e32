"""A multi-threaded program (tests/fixtures/programs/live_workers.c) running on its own, to
attach to in the middle of its run; its final line says what it counted and whether its state
(AC, signal handlers, masks, pending signals) is as it was. Also live_forker.c, which forks when
told to (a child made while attached)."""
from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FINAL = re.compile(r"^live: iterations=(\d+) armed=(\d+) threads=(\d+) spawned=(\d+) ac_left=(\d+) own_sigbus=(\d+) "
                   r"handlers=(\S+) masks=(\S+) pending=(\S+)$", re.M)
WORKERS = 3


@dataclass
class Running:
    """A test program started on its own: its process, its folder (its stop file) and its output."""

    proc: subprocess.Popen[bytes]
    dir: Path
    out: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


class Live(Running):
    def tasks(self) -> set[int]:
        return {int(t) for t in os.listdir(f"/proc/{self.pid}/task")}

    def finish(self, timeout: float = 30) -> dict[str, str]:
        """Ask the program to end (after the detach), wait for it, parse its final line."""
        (self.dir / "stop").touch()
        self.proc.wait(timeout=timeout)
        text = self.out.read_text()
        m = FINAL.search(text)
        assert m, f"no final line from the program (exit {self.proc.returncode}):\n{text}"
        keys = ("iterations", "armed", "threads", "spawned", "ac_left", "own_sigbus", "handlers", "masks", "pending")
        got = dict(zip(keys, m.groups()))
        got["exit"] = str(self.proc.returncode)
        return got


def healthy(end: dict[str, str]) -> bool:
    """Exit 0, no thread with AC after the detach, its SIGBUS handler never run, its handlers,
    masks and pending signals as they were."""
    return (end["exit"] == "0" and end["ac_left"] == "0" and end["own_sigbus"] == "0" and end["handlers"] == "ok"
            and end["masks"] == "ok" and end["pending"] == "none")


@contextmanager
def live_program(programs: Path, tmp_path: Path, *, delay_us: int = 200, lifetime_ms: int = 0,
                 prefix: tuple[str, ...] = (), long_access: bool = False) -> Iterator[Live]:
    """live_workers started (through `prefix`, a command that execs its arguments) and running;
    `long_access`: its misaligned access is the 7-byte incq the agent can patch with threads."""
    d = tmp_path / "live"
    d.mkdir()
    out = d / "out"
    with open(out, "w") as f:
        proc = subprocess.Popen([*prefix, str(programs / "live_workers"), str(d), str(WORKERS), str(delay_us), str(lifetime_ms),
                                 *(["long"] if long_access else [])],
                                stdout=f, stdin=subprocess.DEVNULL)
    live = Live(proc, d, out)
    try:
        deadline = time.time() + 10
        while "ready" not in out.read_text() and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # in the middle of its run: every thread has done many iterations
        yield live
    finally:
        if proc.poll() is None:
            (d / "stop").touch()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


FORKER = re.compile(r"^live_forker: who=(\w+) pid=(\d+) armed=(\d+) ac_left=(\d) own_sigbus=(\d+) handlers=(\w+)", re.M)


class Forker(Running):
    def fork(self) -> None:
        (self.dir / "go").touch()

    def finish(self, timeout: float = 30) -> dict[str, tuple[str, ...]]:
        """Ask both to end, wait for the parent (exit 0, its child's 0): per `who` (parent, child),
        its pid, armed iterations, ac_left, own_sigbus and handlers."""
        (self.dir / "stop").touch()
        assert self.proc.wait(timeout=timeout) == 0
        text = self.out.read_text()
        got = {m[0]: m[1:] for m in FORKER.findall(text)}
        assert set(got) == {"parent", "child"} and "child_status=0" in text, text
        return got


@contextmanager
def live_forker(programs: Path, tmp_path: Path) -> Iterator[Forker]:
    """live_forker started and ready: one thread making one misaligned access per 200 us; it forks
    a child doing the same at fork()."""
    d = tmp_path / "forker"
    d.mkdir()
    out = d / "out"
    with open(out, "w") as f:
        proc = subprocess.Popen([str(programs / "live_forker"), str(d)], stdout=f, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while "ready" not in out.read_text() and time.time() < deadline:
            time.sleep(0.01)
        yield Forker(proc, d, out)
    finally:
        (d / "stop").touch()
        if proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
