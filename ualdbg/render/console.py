"""The one place a rich Console is built: markup and highlighting off (`[rbp-8]` is not markup,
PLATFORM.md), colour only on a terminal, a fixed width when not a terminal, a closed pipe
downstream left to the caller (rich's own reaction is to exit with status 1), and text from
inputs (a crafted DWARF name, a JSON trace) shown escaped: `shown` for each value, and the console
escapes what still reaches it, so no escape sequence of an input's ever drives the terminal."""
from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

# C0 and C1 controls and DEL (ESC starts a terminal's sequences), the bidirectional overrides
# that reorder what a reader sees ("Trojan Source"), and lone surrogates (bytes that were not
# UTF-8, kept by surrogateescape: they cannot even be encoded for a UTF-8 terminal).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_KEEP_NL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:  # surrogateescape's byte
        return f"\\x{n - 0xDC00:02x}"
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def shown(text: Any, *, newlines: bool = False) -> str:
    """`text` as a person may safely see it: control characters, bidirectional overrides and
    undecodable bytes written as escapes (\\x1b, \\n, \\u202e, \\xff); `newlines` keeps line breaks
    and tabs (the layout of a report or a source line, not an input's)."""
    s = text if isinstance(text, str) else str(text)
    return (_UNSAFE_KEEP_NL if newlines else _UNSAFE).sub(_escape, s)


_CONSOLE_CLASS: Any = None


def _console_class() -> Any:
    """rich's Console with ualdbg's escaping and broken-pipe rule, made at the first use of rich
    (a run with nothing to tabulate never imports it: issue 34)."""
    global _CONSOLE_CLASS
    if _CONSOLE_CLASS is not None:
        return _CONSOLE_CLASS
    from rich.console import Console
    from rich.segment import Segment

    class _Console(Console):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            # The last line of defence: every text segment escaped (rich's own control segments, the
            # cursor moves of a Live display, are not text and pass); the renderers escape each
            # value themselves (`shown`) so that tables measure what is printed.
            return super()._render_buffer(
                Segment(shown(seg.text, newlines=True), seg.style, seg.control)
                if seg.control is None and _UNSAFE_KEEP_NL.search(seg.text) else seg for seg in buffer)

        def on_broken_pipe(self) -> None:
            # rich exits with status 1 here; `ualdbg report t.json | head -1` is not a failure: the
            # front end decides (shell.py ends by SIGPIPE, 141, as `git log | head -1` does).
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    _CONSOLE_CLASS = _Console
    return _Console


def make_console(file: IO[str] | None = None, *, color: bool | None = None, width: int | None = None,
                 terminal: bool = False, deferred: bool = False) -> Console:
    """`terminal`: drive a terminal (cursor moves for a Live display) even without colour (NO_COLOR).
    `deferred`: for a report that may be plain lines: off a terminal, rich is imported only for
    what it would print differently (_Deferred)."""
    if color is None:
        color = bool(file is not None and file.isatty()) and "NO_COLOR" not in os.environ

    def make() -> Console:
        return cast("Console", _console_class()(
            file=file,
            markup=False,
            highlight=False,
            emoji=False,
            color_system="standard" if color else None,
            force_terminal=color or terminal,
            width=width or (None if color or terminal else 120),
            soft_wrap=False,
        ))

    if deferred and not (color or terminal):
        return cast("Console", _Deferred(file, width or 120, make))  # prints as a Console would
    return make()


def to_text(items: Iterable[Any], *, color: bool = False, width: int | None = None) -> str:
    """Render strings and rich renderables to one string (for a debugger's output stream)."""
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width)
    for item in items:
        if isinstance(item, str):
            console.out(item, highlight=False)
        else:
            console.print(item)
    return buf.getvalue()


class _Deferred:
    """A Console made when first needed. A string that rich would print unchanged (lines of
    printable ASCII, none wider than the console) is written straight to the file: a run with
    nothing to tabulate prints its summary without importing rich (issue 34)."""

    def __init__(self, file: IO[str] | None, width: int, make: Callable[[], Console]) -> None:
        self._file, self._width, self._make = file, width, make
        self._real: Console | None = None

    def _console(self) -> Console:
        if self._real is None:
            self._real = self._make()
        return self._real

    def print(self, *objects: Any, **kwargs: Any) -> None:
        # soft_wrap=True (a verdict line kept whole for grep) only lifts the width limit
        if self._real is None and set(kwargs) <= {"soft_wrap"} and len(objects) == 1 and isinstance(objects[0], str) \
                and _verbatim(objects[0], None if kwargs.get("soft_wrap") else self._width):
            out = self._file if self._file is not None else sys.stdout
            out.write(objects[0] + "\n")
            out.flush()
            return
        self._console().print(*objects, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console(), name)


def _verbatim(text: str, width: int | None) -> bool:
    """Whether rich would print `text` as it is: no wrapping (no line wider than `width`, if
    given), no tab or control character."""
    return all((width is None or len(line) <= width) and line.isascii() and line.isprintable() for line in text.split("\n"))
