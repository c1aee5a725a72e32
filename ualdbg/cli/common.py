"""What the shell's sub-commands share: the parser that builds a sub-command's options when it is
chosen, argument types, the program named after --, the output files checked before a run and
written after it (every --format), and the report's sink (stderr or --log-file)."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ..commands.registry import examples_text
from ..core.errors import EXIT_ERROR, ToolError
from ..core.result import TraceResult
from ..render.formats import Context
from .outputs import Named, OutputError, Report, check_distinct, check_writable, same_file, standard_stream, write_trace

JSON_HELP = ("write the JSON document to FILE, or to descriptor N with fd:N (e.g. --json fd:3 3>&1 >&2 | jq: "
             "the program's stdout stays its own); - (stdout) is refused where the program writes to it too")
_STREAMS = ("stdin", "stdout", "stderr")


class ShellParser(argparse.ArgumentParser):
    # A sub-command whose options come from a module imported only when the command is chosen
    # or its help shown: every start builds every sub-command's parser (issue 34).
    fill: Callable[[argparse.ArgumentParser], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # the top parser's sub-commands, by name

    def error(self, message: str) -> Any:
        self.exit(EXIT_ERROR, f"{self.prog}: {message}\n")

    def _filled(self) -> None:
        if self.fill is not None:
            fill, self.fill = self.fill, None
            fill(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def examples(*lines: str) -> str:
    """A sub-command's epilog: the invocations a user types (registry.examples_text's format)."""
    return examples_text(lines)


def program_of(args: argparse.Namespace) -> list[str]:
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise ToolError(f"ualdbg {args.cmd}: name the program after --, e.g. ualdbg {args.cmd} -- ./prog args")
    return prog


def outputs(args: argparse.Namespace) -> list[Named]:
    """Every file this command writes, to check before the program runs."""
    out = [Named("--json", args.json), Named("--sarif", getattr(args, "sarif", None) or ""),
           *format_outputs(args), Named("--log-file", args.log_file or "")]
    if getattr(args, "update_baseline", False):
        out.append(Named("--baseline", args.baseline))
    return [n for n in out if n.path]


def format_outputs(args: argparse.Namespace) -> list[Named]:
    """The files --format NAME:PATH writes (stdout is no file)."""
    return [Named(f"--format {fmt.name}", path) for fmt, path in getattr(args, "format", None) or [] if path != "-"]


def write_formats(args: argparse.Namespace, result: TraceResult, context: Context | None = None) -> None:
    """Each --format NAME[:PATH] the command was given, in the order given."""
    for fmt, path in args.format:
        write_trace(result, path, fmt, f"the {fmt.name} output", context)


def json_apart(args: argparse.Namespace) -> None:
    """A JSON document that would share a standard stream with the program (`--json -` and the
    program's stdout: issue 31) is refused before anything runs: the program's output cannot be
    told from it. An attached process whose stdout is another file leaves ualdbg's stdout clean."""
    n = standard_stream(args.json or "")
    if n is None:
        return
    if n == 1 and args.pid is not None and not same_file(f"/proc/{args.pid}/fd/1", 1):
        return
    raise ToolError(f"ualdbg {args.cmd}: --json {args.json} would mix the JSON document with the program's own "
                    f"{_STREAMS[n]}; give it a descriptor of its own: --json fd:3 3>FILE (or 3>&1 >&2 to pipe it on)")


def reads(args: argparse.Namespace) -> list[Named]:
    """The files the run reads or runs, which no output may overwrite: a baseline being read, the
    program, and the files its command line names (a script, its input)."""
    import shutil

    found = []
    if getattr(args, "baseline", None) and not getattr(args, "update_baseline", False):
        found.append(Named("the baseline being read", args.baseline))
    rest = list(getattr(args, "program", None) or [])
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if rest:
        first = rest[0] if "/" in rest[0] else (shutil.which(rest[0]) or rest[0])
        found.append(Named("the program", first))
        found.extend(Named("a file the program's command line names", a) for a in rest[1:] if os.path.isfile(a))
    return found


def check_outputs(writes: list[Named], reads: list[Named]) -> None:
    """Nothing runs unless every output can be written, and no two land on one file (issues 17, 29)."""
    try:
        check_distinct(writes, reads)
        for n in writes:
            check_writable(n.path, _WHAT.get(n.option, n.option))
    except OutputError as exc:
        raise ToolError(str(exc)) from None


_WHAT = {"--json": "the JSON output", "--sarif": "the SARIF output", "--log-file": "the log file",
         "--baseline": "the baseline"}


def sink(args: argparse.Namespace) -> Report:
    """Where ualdbg's own report goes: stderr or --log-file (written whole at the end), never the
    program's stdout. One per command."""
    rep = getattr(args, "report_sink", None)
    if rep is None:
        rep = args.report_sink = Report(args.log_file)
    return rep
