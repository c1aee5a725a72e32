"""The `github` format (render/formats.py): GitHub Actions' workflow commands, one annotation per
site (`::warning file=src/a.c,line=12,title=...::message`), which the runner reads from a step's
standard output and shows on the pull request's diff. `check` writes them by itself when it runs
under GitHub Actions (GITHUB_ACTIONS=true): docs/CI.md."""
from __future__ import annotations

from typing import IO

from ..core.result import TraceResult
from .findings import findings
from .formats import Context

# SARIF's levels as the runner's commands.
COMMAND = {"error": "error", "warning": "warning", "note": "notice"}


def escape_data(s: str) -> str:
    """A command's message, as the runner unescapes it (actions/toolkit's escapeData)."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """A property's value (file, title): also ':' and ',', which delimit properties."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def lines(result: TraceResult, context: Context) -> list[str]:
    out = []
    for f in findings(result, context):
        if f.new is False:
            continue  # the baseline has it: not a finding on this change
        props = []
        if f.path:
            props += [f"file={escape_property(f.path)}", f"line={f.line}"]
        props.append(f"title={escape_property(f.title)}")
        out.append(f"::{COMMAND[f.level]} {','.join(props)}::{escape_data(f.message)}")
    unseen = [b.text for b in result.blind_spots]
    if result.partial:
        unseen.insert(0, f"interrupted by {result.interrupted_by or 'a signal'}: the trace is partial")
    for text in unseen:
        out.append(f"::warning title={escape_property('ualdbg did not see the whole run')}::{escape_data(text)}")
    return out


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    text = "\n".join(lines(result, context))
    out.write(text + "\n" if text else "")
