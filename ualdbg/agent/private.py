"""Directories no other local user can write into, the only ones ualdbg builds, loads and runs
from (docs/SECURITY.md): this user's (euid), mode 0700, not a symbolic link, and every directory
above them root's or this user's and writable by no one else unless sticky (in /tmp no one else
can rename or replace what is ours). Checked on an open descriptor, never assumed from a name."""
from __future__ import annotations

import atexit
import os
import stat

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def safe_chain(real: str) -> bool:
    """Whether no other user can rename, replace or add to any directory of the absolute,
    resolved path `real`, itself included: each is root's or ours, and writable by no one else
    unless sticky."""
    uid = os.geteuid()
    path = "/"
    for part in [""] + [p for p in real.split("/") if p]:
        path = os.path.join(path, part) if part else "/"
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, uid):
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return False
    return True


def executable_here(real: str) -> bool:
    """Whether code can be mapped from files on this file system (not mounted noexec): an agent
    or a helper built there could not be loaded or run."""
    try:
        return not os.statvfs(real).f_flag & os.ST_NOEXEC
    except OSError:
        return False


def private_dir(path: str, create: bool = True, *, exec_needed: bool = True) -> str | None:
    """The resolved path of directory `path` once checked private (made 0700 if it is ours and
    more open), created if missing and `create`; None where it cannot be: another user's, a
    symbolic link, above a directory others can write, or on a noexec mount when `exec_needed`."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        if create:
            os.makedirs(parent, exist_ok=True)
        real = os.path.join(os.path.realpath(parent), name)
        if not safe_chain(os.path.dirname(real)) or (exec_needed and not executable_here(os.path.dirname(real))):
            return None
        if create:
            try:
                os.mkdir(real, 0o700)
            except FileExistsError:
                pass
        fd = os.open(real, _OPEN_DIR)  # O_NOFOLLOW: a symbolic link planted under our name fails (ELOOP)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None
        if st.st_mode & 0o077:  # ours but open to others (made by an older ualdbg, 0755): closed now
            os.fchmod(fd, 0o700)
        return real
    except OSError:
        return None
    finally:
        os.close(fd)


def trusted_file(path: str) -> bool:
    """A regular file of ours that no one else can write, found by its name in a private
    directory (not a link to somewhere else)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def user_cache() -> str:
    """$XDG_CACHE_HOME/ualdbg (~/.cache/ualdbg): where ualdbg keeps what it builds, once checked
    private (private_dir)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ualdbg")


def temp_parents() -> list[str]:
    """Where a fresh private directory may go: $TMPDIR (tempfile's choice), then the usual ones."""
    import tempfile

    out: list[str] = []
    for d in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(d)
        if real not in out and os.path.isdir(real):
            out.append(real)
    return out


_fresh: str | None = None


def fresh_dir(exec_needed: bool = True) -> str | None:
    """A directory made new for this process (mkdtemp: 0700, ours, a name no one had) under a
    parent no one else can swap it in; removed when ualdbg exits. One per process."""
    import shutil
    import tempfile

    global _fresh
    if _fresh is not None and os.path.isdir(_fresh):
        return _fresh
    for parent in temp_parents():
        if not safe_chain(parent) or (exec_needed and not executable_here(parent)):
            continue
        try:
            _fresh = tempfile.mkdtemp(prefix="ualdbg-build-", dir=parent)
        except OSError:
            continue
        atexit.register(shutil.rmtree, _fresh, True)
        return _fresh
    return None
