"""The one place a rich Console is built: markup and highlighting off (`[rbp-8]` is not markup,
PLATFORM.md), colour only on a terminal, a fixed width when not a terminal."""
from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console


def make_console(file: IO[str] | None = None, *, color: bool | None = None, width: int | None = None,
                 terminal: bool = False, deferred: bool = False) -> Console:
    """`terminal`: drive a terminal (cursor moves for a Live display) even without colour (NO_COLOR).
    `deferred`: for a report that may be plain lines: off a terminal, rich is imported only for
    what it would print differently (_Deferred)."""
    if color is None:
        color = bool(file is not None and file.isatty()) and "NO_COLOR" not in os.environ

    def make() -> Console:
        from rich.console import Console

        return Console(
            file=file,
            markup=False,
            highlight=False,
            emoji=False,
            color_system="standard" if color else None,
            force_terminal=color or terminal,
            width=width or (None if color or terminal else 120),
            soft_wrap=False,
        )

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
        if self._real is None and not kwargs and len(objects) == 1 and isinstance(objects[0], str) \
                and _verbatim(objects[0], self._width):
            out = self._file if self._file is not None else sys.stdout
            out.write(objects[0] + "\n")
            out.flush()
            return
        self._console().print(*objects, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console(), name)


def _verbatim(text: str, width: int) -> bool:
    """Whether rich would print `text` as it is: no wrapping, no tab or control character."""
    return all(len(line) <= width and (line.isascii() and line.isprintable()) for line in text.split("\n"))
