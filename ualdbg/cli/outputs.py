"""Output files that CI depends on: checked before the program starts (writable, and no two on one
file, nor on the program or a file the run reads), written whole or not at all (a temporary file
in the same directory, fsync'd and renamed over the path), never through a symbolic link another
user planted, and never lost: a write that still fails goes to a fallback file named on stderr."""
from __future__ import annotations

import io
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any

from ..core.errors import UaldbgError
from ..core.files import UnsafePath, resolve, special, temp_in, write_atomic
from ..lazyclass import dataclass

if TYPE_CHECKING:
    from ..core.result import TraceResult
    from ..render.formats import Context, Format


class OutputError(UaldbgError):
    """An output cannot be written, or collides with another file of the run: one line, before
    anything runs."""


def descriptor(path: str) -> int | None:
    """`fd:N` or `/dev/fd/N`: an output written to descriptor N, which ualdbg's caller opened for
    it (valgrind's --xml-fd: a stream of its own beside the program's stdout); None otherwise."""
    for prefix in ("fd:", "/dev/fd/"):
        if path.startswith(prefix) and path[len(prefix):].isdigit():
            return int(path[len(prefix):])
    return None


def standard_stream(path: str) -> int | None:
    """The standard descriptor (0, 1, 2) an output names: `-` is stdout; None for a file or
    another descriptor."""
    n = 1 if path in ("-", "/dev/stdout") else 2 if path == "/dev/stderr" else descriptor(path)
    return n if n is not None and n <= 2 else None


def same_file(path: str, fd: int) -> bool:
    """Whether `path` (a /proc/PID/fd link) is the file open on our descriptor `fd`; True when
    either cannot be looked at (the caller then assumes the worst)."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return True
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _check_descriptor(n: int, path: str, what: str) -> None:
    import fcntl

    try:
        mode = fcntl.fcntl(n, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise OutputError(f"{what} {path}: descriptor {n} is not open (open it for ualdbg: {n}>FILE)") from None
    if mode == os.O_RDONLY:
        raise OutputError(f"{what} {path}: descriptor {n} is open for reading only")


def check_writable(path: str | None, what: str) -> None:
    """Raise OutputError when `path` cannot be written as write_output writes it (nothing is left
    behind): its folder must take a new file, and an existing file must be one ualdbg may replace;
    a descriptor (`fd:N`) must be open for writing."""
    if path is None or path == "-":
        return
    n = descriptor(path)
    if n is not None:
        _check_descriptor(n, path, what)
        return
    if os.path.isdir(path):
        raise OutputError(f"{what} {path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{what} {path}: no such directory {folder}")
    try:
        where, unfollowed = resolve(path)
    except OSError as exc:
        raise OutputError(f"{what} {path}: {exc.strerror or exc}") from None
    if not unfollowed and special(where):
        if not os.access(where, os.W_OK):
            raise OutputError(f"{what} {path}: cannot write it (Permission denied)")
        return
    folder = os.path.dirname(where)
    try:
        fd, tmp = temp_in(folder, os.path.basename(where))
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot write it ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)
    try:
        st = os.lstat(where)
    except OSError:
        return
    d = os.stat(folder)
    me = os.geteuid()
    if me != 0 and d.st_mode & stat.S_ISVTX and st.st_uid != me and d.st_uid != me:
        raise OutputError(f"{what} {path}: another user's file in a sticky directory (ualdbg cannot replace it)")
    if not unfollowed and me != 0 and not os.access(where, os.W_OK):
        raise OutputError(f"{what} {path}: cannot write it (Permission denied)")


@dataclass(frozen=True)
class Named:
    """A file of the run: what the user named it for (`--json`, `the program`) and its path."""

    option: str
    path: str


def _identity(path: str) -> tuple[Any, ...] | None:
    """One file whatever its name: (device, inode) when it exists, else its resolved path; None
    for a device or pipe (/dev/null twice loses nothing)."""
    if path == "-":
        return ("stdout",)
    n = descriptor(path)
    try:
        st = os.stat(path) if n is None else os.fstat(n)
    except OSError:
        if n is not None:
            return ("fd", n)
        return ("path", os.path.realpath(path))
    if n == 1:
        return ("stdout",)
    if n is not None and not stat.S_ISCHR(st.st_mode):  # two outputs on one pipe would be one stream
        return ("inode", st.st_dev, st.st_ino)
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return None
    return ("inode", st.st_dev, st.st_ino)


def check_distinct(writes: Iterable[Named], reads: Iterable[Named] = ()) -> None:
    """Raise OutputError when two outputs are one file (the last writer would win), or an output
    is the program, a file on its command line or a file the run reads (it would be overwritten):
    compared by realpath and st_dev/st_ino, so links and `./x` vs `x` do not hide it."""
    seen: dict[tuple[Any, ...], Named] = {}
    for w in writes:
        key = _identity(w.path)
        if key is None:
            continue
        if key in seen:
            first = seen[key]
            same = "stdout" if w.path == "-" else w.path
            raise OutputError(f"{first.option} and {w.option} name the same file ({same}): each would overwrite the other")
        seen[key] = w
    for r in reads:
        if r.path == "-" or not os.path.exists(r.path):
            continue
        key = _identity(r.path)
        if key is not None and key in seen:
            w = seen[key]
            raise OutputError(f"{w.option} {w.path} is {r.option} ({r.path}): ualdbg would overwrite it; "
                              "write the output elsewhere")


def say(line: str) -> None:
    """One line of ualdbg's own on stderr (nowhere when stderr is closed)."""
    from ..render.console import shown

    try:
        print(shown(line), file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def write_output(path: str, what: str, write: Callable[[IO[str]], object], suffix: str = ".json") -> str | None:
    """Write to `path` (- for stdout, fd:N for descriptor N) with `write`, atomically. If that
    fails now, write a fallback file (the current directory, else the temporary one) and say so on
    stderr; returns the path written, or None when even the fallback failed."""
    if path == "-":
        write(sys.stdout)
        sys.stdout.flush()
        return path
    n = descriptor(path)
    try:
        if n is None:
            write_atomic(path, write)
        else:  # the caller's stream: written in order, left open (a pipe's reader sees the end at ualdbg's)
            with os.fdopen(os.dup(n), "w") as f:
                write(f)
        return path
    except UnsafePath as exc:
        reason = str(exc)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    for folder in (os.getcwd(), tempfile.gettempdir()):
        fd = -1
        try:
            fd, fallback = tempfile.mkstemp(prefix=f"ualdbg-{what.replace(' ', '-')}-", suffix=suffix, dir=folder)
            with os.fdopen(fd, "w") as f:
                fd = -1
                write(f)
                f.flush()
                os.fsync(f.fileno())
            say(f"ualdbg: cannot write {what} {path} ({reason}); it is in {fallback}")
            return fallback
        except OSError:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(fallback)
            except (OSError, UnboundLocalError):
                pass
            continue
    say(f"ualdbg: cannot write {what} {path} ({reason}), nor a fallback file")
    return None


def write_trace(result: TraceResult, path: str, fmt: Format, what: str, context: Context | None = None) -> str | None:
    """The trace in one of render/formats.py's formats, through write_output."""
    return write_output(path, what, lambda f: fmt.write(result, f, context), suffix=fmt.suffix)


def write_json(obj: dict[str, Any], path: str, what: str) -> str | None:
    """An object of ualdbg's own as indented JSON (a baseline), through write_output."""
    return write_output(path, what, lambda f: f.write(json.dumps(obj, indent=2) + "\n"))


class Report:
    """Where ualdbg's own report goes: stderr as it is printed, or the `--log-file`, written once,
    whole, at the end (close). A log that cannot be written goes to a fallback file that stderr
    names; `close` returns False then, so the caller repeats its verdict on stderr."""

    def __init__(self, log_file: str | None) -> None:
        from ..render.console import make_console

        self.log_file = log_file
        self._buf = io.StringIO() if log_file else None
        self.console = make_console(self._buf if self._buf is not None else sys.stderr, deferred=True)
        self._fresh = self._buf is not None

    def _fresh_line(self) -> None:
        """On a terminal, begin at the start of a clean line whatever the program left: ualdbg
        cannot see the program's output (it goes to the terminal directly), so it does what zsh's
        PROMPT_SP does: a terminal's width of spaces wraps to the next line only if the cursor
        was not at its start, `\r` goes to the start of the line it is on, and erase-to-end
        clears the spaces (and a line that `\r` progress left, whose text was transient)."""
        self._fresh = True
        try:
            if not sys.stderr.isatty():
                return
            cols = os.get_terminal_size(sys.stderr.fileno()).columns or int(os.environ.get("COLUMNS") or 80)
            sys.stderr.write(" " * cols + "\r\x1b[K")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def print(self, *items: Any) -> None:
        """Tables as rich lays them out; a line of text as one line (a verdict or a note cut at
        the console's width could not be found with grep)."""
        if not self._fresh:
            self._fresh_line()
        try:
            self.console.print(*items, soft_wrap=all(isinstance(i, str) for i in items))
        except (OSError, ValueError):  # stderr closed or gone: the report is nobody's to read
            pass

    def close(self) -> bool:
        """Write the log file (if any); False when it did not reach its path."""
        if self._buf is None or self.log_file is None:
            return True
        text = self._buf.getvalue()
        self._buf = None
        written = write_output(self.log_file, "the log file", lambda f: f.write(text), suffix=".log")
        return written == self.log_file
