"""Issue 29, 7 (the directories): a SIGKILLed ualdbg leaves its run directory behind (the agent's
buffers in /dev/shm, a debugger's result files); the next ualdbg reaps it. Only ours, only those
whose ualdbg is dead, never through a link: a live run's directory, another user's and a link to a
directory of ours stay as they are."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.cli import run_cli
from support.env import BUILD, ROOT, scrubbed_env
from support.users import STRANGER


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def _run_dir_of(pids: list[int]) -> Path | None:
    """The directory a run of these processes writes in: the agent's buffers (PID.GEN.buf), or
    the debugger's result files, named on gdb's command line."""
    for place in {os.path.realpath(d) for d in ("/dev/shm", tempfile.gettempdir())}:
        for entry in os.scandir(place):
            if entry.is_dir(follow_symlinks=False) and entry.name.startswith("ualdbg-"):
                try:
                    names = os.listdir(entry.path)
                except OSError:
                    continue
                if any(name.split(".")[0] == str(p) for name in names for p in pids):
                    return Path(entry.path)
    for p in pids:
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        m = re.search(r"(/[\w./-]*?/ualdbg-[\w-]+)/trace\.json", argv)
        if m:
            return Path(m.group(1))
    return None


@pytest.mark.parametrize("engine", ["agent", "trap"])
def test_a_killed_runs_directory_is_reaped_and_nothing_else(test_programs: Path, tmp_path: Path, engine: str) -> None:
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    live_dir = tmp_path / "live"
    live_dir.mkdir()
    out = tmp_path / "out"
    with open(out, "w") as f:
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--engine", engine, "--",
                                str(test_programs / "live_workers"), str(live_dir), "2", "2000", "0"],
                               stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.DEVNULL, env=scrubbed_env(), cwd=ROOT,
                               start_new_session=True)
    planted: list[Path] = []
    held = -1
    try:
        deadline = time.time() + 60
        while "ready" not in out.read_text() and time.time() < deadline and cli.poll() is None:
            time.sleep(0.05)
        assert "ready" in out.read_text(), out.read_text()
        pids = _descendants(cli.pid)
        left = _run_dir_of([cli.pid, *pids])
        assert left is not None and left.is_dir(), (pids, os.listdir("/dev/shm"))
        for p in [cli.pid, *pids]:  # SIGKILL: ualdbg cannot clean up (its program and debugger go too)
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        cli.wait(timeout=30)
        assert left.is_dir()  # left behind, as a SIGKILL leaves it
        # What must stay: a live run's directory (its lock held, as a running ualdbg holds it),
        # another user's, and a link (another user's) to a directory of ours.
        live_run = Path(tempfile.mkdtemp(prefix="ualdbg-run-", dir=shm))
        held = os.open(live_run, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(held, fcntl.LOCK_EX)
        theirs = Path(tempfile.mkdtemp(prefix="ualdbg-run-", dir=shm))
        os.chown(theirs, STRANGER, STRANGER)
        ours = tmp_path / "ours"
        ours.mkdir()
        (ours / "keep").write_text("kept\n")
        link = shm / f"ualdbg-run-link{os.getpid()}"
        link.symlink_to(ours)
        os.lchown(link, STRANGER, STRANGER)
        planted = [live_run, theirs, link]
        time.sleep(0.1)
        p = run_cli("trace", "--engine", engine, "--", str(BUILD / "memalign"), timeout=300)
        assert p.returncode == 0, p.explain()
        assert not left.exists(), f"{left} was not reaped: {os.listdir(left)}"
        assert live_run.is_dir() and theirs.is_dir() and link.is_symlink(), planted
        assert (ours / "keep").read_text() == "kept\n"
    finally:
        if held >= 0:
            os.close(held)
        for path in planted:
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
