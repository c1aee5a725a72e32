"""The output formats of a trace, registered once: each has a name, a file suffix, whether it can
go to stdout, and a module of render/ whose `write(result, out, context)` writes a TraceResult
(imported when the format is written, not before). Every front end reaches them here: the
shell's --json FILE, --sarif FILE and --format NAME[:PATH] (cli/), gdb's and lldb's `ualdbg trace
save FILE [--format NAME]` (commands/tracing.py), which infers the format from the suffix.
Adding a format is one module, one entry in FORMATS, and its tests (docs/ARCHITECTURE.md)."""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Protocol

from ..core.errors import UaldbgError
from ..lazyclass import dataclass

if TYPE_CHECKING:
    from ..core.result import Site, TraceResult


@dataclass(frozen=True)
class Context:
    """What a writer may need beside the trace: ualdbg's own exit status when it is known
    (`check`'s verdict, which SARIF's invocation carries), the sites a baseline does not have
    (None: no baseline was given), and the root that source paths are made relative to."""

    exit_code: int | None = None
    new_sites: Sequence[Site] | None = None
    srcroot: str | None = None


class Writer(Protocol):
    def __call__(self, result: TraceResult, out: IO[str], context: Context) -> None: ...


@dataclass(frozen=True)
class Format:
    name: str  # what --format and `trace save --format` take
    suffix: str  # the file suffix `trace save FILE` infers it from
    module: str  # ualdbg.render.MODULE has write(result, out, context)
    stdout: bool  # whether it can go to stdout (-)
    help: str  # one line for --help

    def write(self, result: TraceResult, out: IO[str], context: Context | None = None) -> None:
        writer: Writer = importlib.import_module(f"ualdbg.render.{self.module}").write
        writer(result, out, context or Context())


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("json", ".json", "jsondoc", True, "the versioned JSON document (`ualdbg report` reads it back)"),
    Format("sarif", ".sarif", "sarif", True, "SARIF 2.1.0, for code scanning"),
    Format("text", ".txt", "textreport", True, "the report ualdbg prints (header, sites, data and advice, notes)"),
    Format("junit", ".junit.xml", "junit", True, "JUnit XML: a test case per site, failing when it is new"),
    Format("gitlab", ".codequality.json", "codequality", True, "GitLab Code Quality (artifacts:reports:codequality)"),
    Format("github", ".github.txt", "ghannotations", True, "GitHub Actions annotations (workflow commands, for stdout)"),
)}
DEFAULT = "json"


class FormatError(UaldbgError, ValueError):
    """A format that is not known, or cannot go where it was asked to: one line."""


def names() -> str:
    return ", ".join(FORMATS)


def format_named(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise FormatError(f"unknown format {name!r} (formats: {names()})") from None


def format_for(path: str) -> Format:
    """The format a file name says by its suffix (`run.sarif`), the JSON document otherwise."""
    by_length = sorted(FORMATS.values(), key=lambda f: -len(f.suffix))  # r.codequality.json: not json
    return next((f for f in by_length if path.endswith(f.suffix)), FORMATS[DEFAULT])


def parse_spec(spec: str) -> tuple[Format, str]:
    """`NAME[:PATH]` (--format): the format and where it goes; no PATH is stdout."""
    name, _, path = spec.partition(":")
    fmt = format_named(name)
    path = path or "-"
    if path == "-" and not fmt.stdout:
        raise FormatError(f"the {fmt.name} format cannot go to stdout: give a file, --format {fmt.name}:PATH")
    return fmt, path


def save(result: TraceResult, path: str, fmt: Format, context: Context | None = None) -> None:
    """Write the trace in `fmt` at `path` (- for stdout), whole or not at all and never through
    a link another user planted (core/files.py). OSError when it cannot be written."""
    if path == "-":
        import sys

        fmt.write(result, sys.stdout, context)
        sys.stdout.flush()
        return
    from ..core.files import write_atomic

    write_atomic(path, lambda f: fmt.write(result, f, context))
