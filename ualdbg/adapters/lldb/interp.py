"""Talking to lldb's command level from Python: one command with its output (or one line when it
fails), and ualdbg's own messages (one line, with the traceback under UALDBG_DEBUG) on a stop's
stream or, inside a callback that has none, on stderr."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import lldb  # type: ignore[import-not-found]


def command(debugger: lldb.SBDebugger, line: str) -> str:
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(line, result)
    if not result.Succeeded():
        raise RuntimeError(f"`{line}` failed: {(result.GetError() or '').strip()}")
    return result.GetOutput() or ""


def warn(stream: Any, message: str) -> None:
    text = f"ualdbg: {message}\n" + (traceback.format_exc() if os.environ.get("UALDBG_DEBUG") else "")
    if stream is not None:
        stream.Print(text)
    else:
        sys.stderr.write(text)
