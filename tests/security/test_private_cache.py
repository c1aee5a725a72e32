"""Issue 29, 1: another local user's code never runs as you. With HOME unset (a service account,
nobody, a CI runner) ualdbg once fell back to a fixed $TMPDIR/ualdbg-UID and loaded whatever was
there: a directory, or a link to one, that another user made first holding their own
`ualdbg_agent.so`. Run as nobody, as such a user would, with HOME unset: the planted library never
runs, and the trace is made all the same (with an agent built in a private directory)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.build import build_program
from support.env import BUILD, require_tool
from support.users import NOBODY, as_user, shared_install

ATTACKER = 65533  # another local user: no passwd entry needed, only a uid of its own

PLANTED = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void)
{
    FILE *f = fopen(MARK, "a");
    if (f) { fprintf(f, "planted code ran as uid %d\n", (int)getuid()); fclose(f); }
}
"""


def _chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, uid, uid)


@pytest.mark.parametrize("how", ["directory", "symlink"])
def test_a_cache_another_user_planted_is_never_loaded(tmp_path: Path, how: str) -> None:
    require_tool("setpriv")
    from ualdbg.agent.build import LIB_NAME, compiler, source_hash

    with shared_install() as shared:
        tmpdir = shared.dir / "tmp"  # the TMPDIR every user shares: world-writable and sticky, as /tmp
        tmpdir.mkdir()
        tmpdir.chmod(0o1777)
        mark = tmpdir / "planted-code-ran"
        # What the attacker plants where ualdbg as nobody, HOME unset, used to look: their own
        # library under the agent's exact cache name (the key is the same on the same machine).
        theirs = tmpdir / (f"ualdbg-{NOBODY}" if how == "directory" else "attacker-cache")
        lib = theirs / f"agent-{source_hash(compiler())}" / LIB_NAME
        lib.parent.mkdir(parents=True)
        (tmp_path / "planted.c").write_text(PLANTED)
        build_program(lib, tmp_path / "planted.c", flags=("-shared", "-fPIC", f'-DMARK="{mark}"'))
        _chown_tree(theirs, ATTACKER)
        if how == "symlink":
            link = tmpdir / f"ualdbg-{NOBODY}"
            link.symlink_to(theirs)
            os.lchown(link, ATTACKER, ATTACKER)
        program = shared.public(BUILD / "memalign")
        out = tmpdir / "t.json"
        env = {k: v for k, v in shared.env.items() if k not in ("HOME", "XDG_CACHE_HOME")}
        env["TMPDIR"] = str(tmpdir)
        p = subprocess.run([*as_user(), *shared.ualdbg("trace", "--engine", "agent", "--json", str(out), "--", str(program))],
                           capture_output=True, text=True, timeout=300, env=env, cwd=shared.dir, stdin=subprocess.DEVNULL)
        ran = mark.read_text() if mark.exists() else ""
        planted_after = lib.exists()
        doc = json.loads(out.read_text()) if out.exists() else None
        leftovers = sorted(n for n in os.listdir(tmpdir) if n.startswith("ualdbg-build-"))
    assert ran == "", f"the planted library ran in the traced program:\n{ran}\n{p.stderr}"
    assert p.returncode == 0, f"status {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert doc is not None and doc["engine"] == "agent" and doc["faults_total"] > 0, (p.stderr, doc and doc["faults_total"])
    assert planted_after  # left where it was: another user's files are not ours to remove
    assert leftovers == []  # the private build directory went with the run


def test_a_cached_file_others_could_write_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    # A cached library that others can write, or that is not ours, is built anew, not loaded.
    from ualdbg.agent.build import cached_build

    src = tmp_path / "hello.c"
    src.write_text("int hello(void) { return 42; }\n")

    def build() -> Path:
        return cached_build("a test library", "hello", "libhello.so", [src], flags=("-shared", "-fPIC"), dest_dir=tmp_path)

    first = build()
    with open(first, "ab") as f:
        f.write(b"TAMPERED")
    assert build().read_bytes().endswith(b"TAMPERED")  # ours, 0755: reused as it is
    first.chmod(0o777)  # anyone could have written it
    again = build()
    assert again == first and not again.read_bytes().endswith(b"TAMPERED") and not again.stat().st_mode & 0o022
    if os.geteuid() == 0:
        with open(again, "ab") as f:
            f.write(b"TAMPERED")
        os.chown(again, NOBODY, NOBODY)  # another user's
        rebuilt = build()
        assert not rebuilt.read_bytes().endswith(b"TAMPERED") and rebuilt.stat().st_uid == 0
