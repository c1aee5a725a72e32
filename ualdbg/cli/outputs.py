"""Output files that CI depends on: checked as writable before the program starts, and never
lost afterwards: a write that still fails goes to a fallback file named on stderr."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from ..render.jsondoc import write_text


class OutputError(Exception):
    """An output cannot be written: one line, before anything runs."""


def check_writable(path: str | None, what: str) -> None:
    """Raise OutputError when `path` cannot be created or overwritten (nothing is left behind)."""
    if path is None or path == "-":
        return
    if os.path.isdir(path):
        raise OutputError(f"{what} {path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{what} {path}: no such directory {folder}")
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot write it ({exc.strerror})") from None
    if not existed:
        os.unlink(path)


def write_json(doc: dict[str, Any], path: str, what: str) -> str | None:
    """Write `doc` to `path` (- for stdout), streamed (render/jsondoc.write_text). If that fails
    now, write it to a fallback file and say so on stderr; returns the path written, or None
    when even the fallback failed."""
    if path == "-":
        write_text(doc, sys.stdout)
        sys.stdout.flush()
        return path
    try:
        with open(path, "w") as f:
            write_text(doc, f)
        return path
    except OSError as exc:
        reason = exc.strerror
    for folder in (os.getcwd(), tempfile.gettempdir()):
        try:
            fd, fallback = tempfile.mkstemp(prefix=f"ualdbg-{what.replace(' ', '-')}-", suffix=".json", dir=folder)
            with os.fdopen(fd, "w") as f:
                write_text(doc, f)
            print(f"ualdbg: cannot write {what} {path} ({reason}); it is in {fallback}", file=sys.stderr, flush=True)
            return fallback
        except OSError:
            continue
    print(f"ualdbg: cannot write {what} {path} ({reason}), nor a fallback file", file=sys.stderr, flush=True)
    return None
