"""Files ualdbg writes (JSON, SARIF, logs, baselines): whole or not at all (a temporary file
beside the path, O_EXCL|O_NOFOLLOW, fsync'd and renamed over it), and never through a symbolic
link another user planted in a sticky directory such as /tmp (issue 29)."""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import IO


class UnsafePath(PermissionError):
    """The path goes through a symbolic link another user owns in a sticky directory."""


_MAX_LINKS = 40  # as the kernel's own limit on symbolic links in one path lookup


def link_trusted(link: str, st: os.stat_result) -> bool:
    """The kernel's fs.protected_symlinks rule, applied whatever the sysctl says: a symbolic link
    in a sticky, world-writable directory (/tmp) is followed only when its owner is the one
    following it or the directory's owner. Another user's link there is a trap, not a choice."""
    try:
        d = os.stat(os.path.dirname(link) or ".")
    except OSError:
        return False
    sticky_world = bool(d.st_mode & stat.S_ISVTX) and bool(d.st_mode & stat.S_IWOTH)
    return not sticky_world or st.st_uid in (os.geteuid(), d.st_uid)


def resolve(path: str) -> tuple[str, bool]:
    """Where writing `path` goes: (the path to write, whether it is a link left unfollowed). A
    trusted link is followed hop by hop (a user's `out.json -> ../results/out.json` keeps working);
    another user's link in a sticky directory is never followed: as the last component it is
    replaced (the rename replaces the link, not its target), inside the path it is refused."""
    path = os.path.abspath(path)
    parts = [p for p in path.split("/") if p]
    done = "/"
    hops = 0
    while parts:
        name = parts.pop(0)
        here = os.path.join(done, name)
        try:
            st = os.lstat(here)
        except OSError:  # missing from here on: created by the write (its folder was checked)
            return os.path.join(here, *parts), False
        if not stat.S_ISLNK(st.st_mode):
            done = here
            continue
        if not link_trusted(here, st):
            if not parts:
                return here, True
            raise UnsafePath(f"{here} is a symbolic link another user owns in a sticky directory "
                             "(not followed: choose another path)")
        hops += 1
        if hops > _MAX_LINKS:
            raise OSError(40, "Too many levels of symbolic links", path)
        target = os.path.join(done, os.readlink(here))
        if not os.path.lexists(target) and os.path.exists(here):
            return os.path.join(here, *parts), False  # a /proc magic link (fd/1 -> "pipe:[123]"): no path behind it
        parts = [p for p in os.path.normpath(target).split("/") if p] + parts
        done = "/"
    return done, False


def special(path: str) -> bool:
    """An existing character device, FIFO or socket (/dev/null, /dev/stdout, a named pipe): written
    in place, as nothing can be renamed over it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def temp_in(folder: str, name: str) -> tuple[int, str]:
    """A new file beside the output (O_EXCL|O_NOFOLLOW: nothing there is reused or followed),
    mode 0666 less the umask, as open(2) would make the output itself."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(folder, f".{name}.ualdbg-{os.getpid()}-{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def write_atomic(path: str, write: Callable[[IO[str]], object]) -> None:
    """The whole text in a temporary file beside `path`, fsync'd, then renamed over it: a reader
    (or a full disk) never sees half a file at `path`."""
    where, unfollowed = resolve(path)
    if not unfollowed and special(where):
        with open(where, "w") as f:
            write(f)
        return
    folder = os.path.dirname(where)
    fd, tmp = temp_in(folder, os.path.basename(where))
    try:
        with os.fdopen(fd, "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, where)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # the rename itself survives a crash once the directory is synced (best effort)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


