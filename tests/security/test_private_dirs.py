"""Issue 29, 1, 2 and 7, piece by piece (no program run): what ualdbg takes for a private
directory, the buffer files it reads as root, the copy of the agent root makes for another user,
and the reaper. Each case is something another local user could plant."""
from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from support.users import NOBODY, require_root

from ualdbg.agent import buffer as ab
from ualdbg.agent import rundir
from ualdbg.agent.private import private_dir, safe_chain


@pytest.fixture
def root_only() -> None:
    require_root()  # plants another user's files


def _world(tmp_path: Path, mode: int) -> Path:
    """A folder every user can write in (like /tmp: mode 1777, or 0777 without the sticky bit)."""
    d = tmp_path / f"shared-{mode:o}"
    d.mkdir()
    d.chmod(mode)
    return d


def test_a_private_directory_is_made_0700_and_ours(tmp_path: Path) -> None:
    made = private_dir(str(_world(tmp_path, 0o1777) / "cache"))
    assert made is not None and stat.S_IMODE(os.stat(made).st_mode) == 0o700 and os.stat(made).st_uid == os.geteuid()
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)  # an older ualdbg's cache: ours, but readable by all: closed, kept
    assert private_dir(str(loose)) == str(loose) and stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_a_link_or_an_open_parent_is_not_private(tmp_path: Path) -> None:
    sticky = _world(tmp_path, 0o1777)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (sticky / "cache").symlink_to(tmp_path / "elsewhere")
    assert private_dir(str(sticky / "cache")) is None  # a link planted under our name
    open_dir = _world(tmp_path, 0o777)  # no sticky bit: anyone may rename what is in it
    assert not safe_chain(str(open_dir)) and private_dir(str(open_dir / "cache")) is None


def test_another_users_directory_is_not_private(root_only: None, tmp_path: Path) -> None:
    theirs = _world(tmp_path, 0o1777) / f"ualdbg-{NOBODY}"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    assert private_dir(str(theirs)) is None
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o700 and theirs.stat().st_uid == NOBODY  # not touched


def _a_buffer(directory: Path) -> Path:
    """A file that would pass for a buffer by its name and its magic."""
    path = directory / "100.0.buf"
    path.write_bytes(ab.MAGIC + bytes(ab.HEADER_SIZE))
    return path


def test_the_buffer_reader_never_reads_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    target = _a_buffer(tmp_path)
    d = tmp_path / "run"
    d.mkdir()
    (d / "7.0.buf").symlink_to(target)
    os.mkfifo(d / "8.0.buf")
    result: list[str] = []

    def read() -> None:
        for _pid, _gen, path in ab.buffer_files(str(d)):
            try:
                ab.AgentBuffer(path)
                result.append(f"read {path}")
            except ab.BufferError as exc:
                result.append(str(exc))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "blocked opening a FIFO"
    assert len(result) == 2 and not any(r.startswith("read") for r in result), result


def test_the_buffer_reader_skips_a_file_its_directorys_owner_did_not_make(root_only: None, tmp_path: Path) -> None:
    # Root reads the buffers of another user's process in a directory that user owns: a hard
    # link to one of root's files is not theirs, and not read.
    d = tmp_path / "buffers"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    mine = _a_buffer(tmp_path)
    os.link(mine, d / "9.0.buf")
    with pytest.raises(ab.BufferError, match="not a buffer the agent made"):
        ab.AgentBuffer(str(d / "9.0.buf"))
    theirs = _a_buffer(d)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(ab.BufferError, match="version"):  # theirs: read (and found too short a header)
        ab.AgentBuffer(str(theirs))


def test_root_never_writes_into_a_directory_another_user_made_first(root_only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shm = _world(tmp_path, 0o1777)
    monkeypatch.setattr(rundir, "parents", lambda exec_needed=False, room=0: [str(shm)])
    lib = tmp_path / "ualdbg_agent.so"
    lib.write_bytes(b"\x7fELF not really")
    squatted = shm / f"ualdbg-lib-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    os.chown(squatted, NOBODY, NOBODY)
    with pytest.raises(OSError):
        rundir.public_copy(str(lib))
    assert os.listdir(squatted) == []
    squatted.rmdir()
    squatted.symlink_to(tmp_path)
    with pytest.raises(OSError):
        rundir.public_copy(str(lib))
    squatted.unlink()
    copy = rundir.public_copy(str(lib))  # and where no one was first: root's, 0711 down to a 0755 file
    assert Path(copy).read_bytes() == lib.read_bytes() and stat.S_IMODE(os.stat(copy).st_mode) == 0o755
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o711 and os.stat(p).st_uid == 0 for p in (squatted, Path(copy).parent))
    assert rundir.public_copy(str(lib)) == copy  # one path per build: a process traced again reuses it
    run = rundir.make(for_uid=NOBODY, for_gid=NOBODY)
    try:
        top = os.stat(run.top)
        sub = os.stat(run.buffers)
        assert (top.st_uid, stat.S_IMODE(top.st_mode)) == (0, 0o711) and (sub.st_uid, stat.S_IMODE(sub.st_mode)) == (NOBODY, 0o700)
    finally:
        run.close()
    assert not os.path.exists(run.top)


def test_the_reaper_takes_only_dead_runs_of_ours(tmp_path: Path) -> None:
    shm = _world(tmp_path, 0o1777)
    dead = Path(tempfile.mkdtemp(prefix=rundir.PREFIX, dir=shm))
    (dead / "1.0.buf").write_bytes(b"x")
    live = rundir.make()  # in /dev/shm or tmp: only its lock matters here
    alive = Path(tempfile.mkdtemp(prefix=rundir.PREFIX, dir=shm))
    held = os.open(alive, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    other = Path(tempfile.mkdtemp(prefix="ualdbg-agent-", dir=shm))  # not ours to judge: no lock protocol
    try:
        assert rundir.reap([str(shm)]) == [str(dead)]
        assert alive.is_dir() and other.is_dir() and Path(live.top).is_dir()
    finally:
        os.close(held)
        live.close()

