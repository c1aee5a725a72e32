"""The `json` format (render/formats.py): a trace as its versioned JSON document
(core/document.py), written as text; and `dump`, which writes the JSON of ualdbg's other
documents (stackcheck's, the audit's) whole, to a file or stdout."""
from __future__ import annotations

import json
import sys
from typing import IO, Any

from ..core.document import build_document, write_document
from ..core.result import TraceResult
from .formats import Context


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    """The trace's document, records one per line (core/document.py, write_document)."""
    write_document(build_document(result), out)


def dump(obj: dict[str, Any], path: str) -> None:
    """An object as indented JSON at `path` (- for stdout), written whole or not at all."""
    if path == "-":
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")
        sys.stdout.flush()
        return
    from ..core.files import write_atomic

    write_atomic(path, lambda f: f.write(json.dumps(obj, indent=2) + "\n"))  # never through a planted link
