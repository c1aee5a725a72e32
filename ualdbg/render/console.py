"""The one place a rich Console is built: markup and highlighting off (`[rbp-8]` is not markup,
PLATFORM.md), colour only on a terminal, a fixed width when not a terminal."""
from __future__ import annotations

import io
import os
from collections.abc import Iterable
from typing import IO, Any

from rich.console import Console


def make_console(file: IO[str] | None = None, *, color: bool | None = None, width: int | None = None,
                 terminal: bool = False) -> Console:
    """`terminal`: drive a terminal (cursor moves for a Live display) even without colour (NO_COLOR)."""
    if color is None:
        color = bool(file is not None and file.isatty()) and "NO_COLOR" not in os.environ
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
