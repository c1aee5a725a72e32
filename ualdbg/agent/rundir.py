"""The directory of one run (the agent's buffers, a debugger's result files): made new and private
and locked by the ualdbg that owns it (flock on an open descriptor, which the kernel lets go of
however ualdbg ends), so that a later ualdbg reaps what a killed one left: only its own user's,
only unlocked ones, never through a link. For root tracing another user's process, a root-owned
run directory with the one subdirectory that user may write buffers in, and a root-owned copy of
the agent that user can load."""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile

from ..lazyclass import dataclass
from .private import executable_here, safe_chain, temp_parents

PREFIX = "ualdbg-run-"
BUFFERS = "buffers"
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class RunDir:
    """One run's directory, locked while this process holds `fd`."""

    top: str  # removed at the end
    buffers: str  # where the agent writes its buffers (its configuration's dir=)
    fd: int

    def close(self) -> None:
        shutil.rmtree(self.top, ignore_errors=True)
        try:
            os.close(self.fd)  # the lock goes with it
        except OSError:
            pass

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parents(exec_needed: bool = False, room: int = 0) -> list[str]:
    """Where run directories go, best first: /dev/shm (memory), then the temporary directories;
    only those no other user can swap our directory in, not mounted noexec when a library is to
    be loaded from there, and with `room` bytes free (an agent's buffer is a sparse file: a page
    it cannot allocate later is a SIGBUS in the program)."""
    out = []
    for d in ["/dev/shm", *temp_parents()]:
        real = os.path.realpath(d)
        if real in out or not os.path.isdir(real) or not os.access(real, os.W_OK | os.X_OK):
            continue
        if safe_chain(real) and (not exec_needed or executable_here(real)) and shutil.disk_usage(real).free >= room:
            out.append(real)
    return out


def _locked_mkdtemp(parent: str) -> tuple[str, int]:
    """mkdtemp under another name, locked, then renamed to its PREFIX name: the reaper never sees
    a directory whose ualdbg does not hold its lock yet."""
    made = tempfile.mkdtemp(prefix="ualdbg-new-", dir=parent)
    fd = os.open(made, _OPEN_DIR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours alone: nobody else has it open yet
        top = os.path.join(parent, PREFIX + os.path.basename(made)[len("ualdbg-new-"):])
        os.rename(made, top)
    except OSError:
        os.close(fd)
        shutil.rmtree(made, ignore_errors=True)
        raise
    return top, fd


def make(*, for_uid: int | None = None, for_gid: int | None = None, room: int = 0) -> RunDir:
    """A new run directory (stale ones reaped first). With `for_uid` (root tracing that user's
    process): the directory is root's, mode 0711, and its `buffers` subdirectory is that user's,
    0700: the only place that user can write, and one it cannot rename or replace (its parent is
    root's)."""
    reap()
    last: OSError | None = None
    for parent in parents(room=room):
        try:
            top, fd = _locked_mkdtemp(parent)
        except OSError as exc:
            last = exc
            continue
        if for_uid is None:
            return RunDir(top, top, fd)
        try:
            os.fchmod(fd, 0o711)
            os.mkdir(BUFFERS, 0o700, dir_fd=fd)
            sub = os.open(BUFFERS, _OPEN_DIR, dir_fd=fd)
            try:
                os.fchown(sub, for_uid, -1 if for_gid is None else for_gid)
            finally:
                os.close(sub)
        except OSError as exc:
            RunDir(top, top, fd).close()
            last = exc
            continue
        return RunDir(top, os.path.join(top, BUFFERS), fd)
    if last is None and room and parents():
        free = ", ".join(f"{p}: {shutil.disk_usage(p).free >> 20} MiB" for p in parents())
        raise OSError(errno.ENOSPC, f"no room: a traced process's buffer may take {room >> 20} MiB, and free is {free}")
    raise OSError(last.errno if last else 0, f"no private place for a run directory ({last.strerror if last else 'none'})")


def public_copy(lib: str) -> str:
    """A copy of the agent `lib` that every user can load and only this one (root) can write:
    <parent>/ualdbg-lib-UID/<hash of its bytes>/<its name>, each directory ours and 0711, the
    file made new (O_EXCL|O_NOFOLLOW), its mode set on its descriptor, then renamed into place.
    One path per build, so that a process traced again loads the copy it has (each new copy
    would take static TLS, which runs out after a few: dlopen then fails)."""
    import hashlib  # (here: only `trace --pid` of another user's process copies it; OpenSSL's start costs 3 ms)

    with open(lib, "rb") as f:
        data = f.read()
    key = hashlib.sha256(data).hexdigest()[:16]
    last: OSError | None = None
    for parent in parents(exec_needed=True):
        try:
            top = _public_dir(parent, f"ualdbg-lib-{os.geteuid()}")
            folder = _public_dir(top, key)
            final = os.path.join(folder, os.path.basename(lib))
            st = os.lstat(final) if os.path.lexists(final) else None
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022 \
                    and st.st_size == len(data):
                return final
            tmp = os.path.join(folder, f".new-{os.getpid()}")
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(out, data)
                os.fchmod(out, 0o755)
            finally:
                os.close(out)
            os.rename(tmp, final)
            return final
        except OSError as exc:
            last = exc
    raise OSError(last.errno if last else 0, f"no place for a copy of the agent other users can load "
                  f"({last.strerror if last else 'none'})")


def _public_dir(parent: str, name: str) -> str:
    """parent/name: a directory of ours, mode 0711 (others may open what is in it by name, not
    list or change it), made if missing; OSError if that name is anything else."""
    path = os.path.join(parent, name)
    try:
        os.mkdir(path, 0o711)
    except FileExistsError:
        pass
    fd = os.open(path, _OPEN_DIR)  # a link planted under the name: ELOOP
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OSError(0, f"{path} is another user's")
        if stat.S_IMODE(st.st_mode) != 0o711:
            os.fchmod(fd, 0o711)
    finally:
        os.close(fd)
    return path


def reap(where: list[str] | None = None) -> list[str]:
    """Remove the run directories a killed ualdbg of this user left (no one holds their lock);
    the paths removed. Entries that are links, not directories or another user's are skipped."""
    uid = os.geteuid()
    removed = []
    for parent in where if where is not None else parents():
        try:
            names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(parent, name)
            try:
                fd = os.open(path, _OPEN_DIR)  # a link planted under the name: ELOOP, skipped
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its ualdbg lives
                if os.path.samestat(st, os.lstat(path)):
                    shutil.rmtree(path, ignore_errors=True)  # symlink-safe: it walks by descriptors
                    removed.append(path)
            except OSError:
                continue
            finally:
                os.close(fd)
    return removed
