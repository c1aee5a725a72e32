"""Issue 29, 2: root's `trace --pid` on another user's process writes nothing into a directory
that user controls. It once copied the agent into a directory it had handed to that user, and
copyfile and chmod 0755 followed a link the user planted there: a root-only file was overwritten
and made 0755. Here nobody runs the program and, at the same time, a planter (as nobody) puts a
link to a root-only file at every name root would write or read in each run directory that
appears, while root traces the program several times: the file is never touched, every trace is
whole, and the program ends as it would have."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from support.build import build_program
from support.cli import run_cli
from support.env import TESTS
from support.live import WORKERS, healthy
from support.users import NOBODY, as_user, shared_install

SECRET = b"root's own file: 0600, never to be written by ualdbg\n"


def _wait_for(path: Path, text: str, timeout: float = 10) -> None:
    deadline = time.time() + timeout
    while text not in (path.read_text() if path.exists() else "") and time.time() < deadline:
        time.sleep(0.01)


def test_root_pid_writes_nothing_through_a_link_the_user_plants(test_programs: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    build_program(tmp_path / "planter", TESTS / "security" / "programs" / "planter.c")
    with shared_install() as shared:
        program, planter = shared.public(test_programs / "live_workers"), shared.public(tmp_path / "planter")
        live = shared.dir / "live"
        live.mkdir()
        live.chmod(0o777)
        out = live / "out"
        with open(out, "w") as f:
            prog = subprocess.Popen([*as_user(), str(program), str(live), str(WORKERS), "200", "0"], stdout=f,
                                    stdin=subprocess.DEVNULL)
        planted: list[str] = []
        results = []
        try:
            _wait_for(out, "ready")
            assert os.stat(f"/proc/{prog.pid}").st_uid == NOBODY
            for attempt in range(6):
                spy = subprocess.Popen([*as_user(), str(planter), str(victim), str(prog.pid), "20000", "/dev/shm",
                                        tempfile.gettempdir()], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
                try:
                    assert spy.stdout is not None and spy.stdout.readline().strip() == "watching"
                    doc = tmp_path / f"t{attempt}.json"
                    p = run_cli("trace", "--pid", str(prog.pid), "--duration", "0.5", "--json", str(doc), timeout=120)
                finally:
                    spy.kill()
                    planted += spy.communicate(timeout=30)[0].splitlines()
                st = victim.stat()
                results.append((p, json.loads(doc.read_text()) if doc.exists() else None))
                if victim.read_bytes() != SECRET or stat.S_IMODE(st.st_mode) != 0o600:
                    break
        finally:
            (live / "stop").touch()
            prog.wait(timeout=30)
        from support.live import FINAL

        m = FINAL.search(out.read_text())
    st = victim.stat()
    assert victim.read_bytes() == SECRET and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, \
        f"root wrote through a planted link: mode {oct(st.st_mode)}; planted: {planted}"
    # The only names the user could take are its own buffers' (refused by the agent's O_EXCL and
    # by root's reader): never the agent's copy, which root writes.
    assert not [line for line in planted if line.endswith("/ualdbg_agent.so")], planted
    for p, doc in results:
        assert p.returncode == 0, p.explain()
        assert doc is not None and doc["attached"]["engine"] == "agent" and doc["faults_total"] > 0, p.explain()
    assert m, out.read_text()
    keys = ("iterations", "armed", "threads", "spawned", "ac_left", "own_sigbus", "handlers", "masks", "pending")
    end = dict(zip(keys, m.groups()), exit=str(prog.returncode))
    assert healthy(end), end
