"""`ualdbg audit [ELF]`: the static alignment audit (ualdbg/tools/audit.py) of the loaded program or a
file, matched against the session's trace (or a saved one) to show which findings a run hit."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..render.jsondoc import dump
from .registry import Host, LaunchSource, Output, Parser, Runner, UsageError, command

if TYPE_CHECKING:  # the audit (pyelftools, rich) is imported when one runs: the shell builds every
    from ..core.result import TraceResult  # command's parser at each start (issue 34)
    from ..tools.audit import AuditResult

EPILOG = """From DWARF alone, without running the program:
  - struct and union members at offsets that are not a multiple of their type's alignment
    (packed layouts), with struct, member, offset, required alignment and declaration line;
  - variables at fixed addresses (globals, statics) not aligned for their type;
  - COMMON blocks with every member's offset, flagging members at an offset that is not a
    multiple of 8 (an 8-byte view of them, REAL*8 over REAL*4, is misaligned).
Without DWARF it lists the symbol table's data objects and says what is missing.

With --trace FILE (a JSON document of `ualdbg trace --json`, `check --json` or `trace save`), each
finding gets the number of unaligned accesses the run made to it; in a debugger the session's own
trace is used when no file is given.

Exit status (shell): 0 no finding (with --trace: no finding was hit), 1 findings (hit), 2 errors.

examples:
  ualdbg audit ./prog
  ualdbg audit --json audit.json ./prog
  ualdbg trace --json run.json -- ./prog args && ualdbg audit --trace run.json ./prog
  (gdb) ualdbg audit
"""
DESCRIPTION = "Static alignment audit of an ELF from its DWARF: packed members, misaligned variables, COMMON layouts."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", default=None, help="write the audit as JSON to FILE (- for stdout)")
    p.add_argument("--trace", metavar="FILE", default=None, help="a trace JSON: count which findings the run hit")


def run_audit(path: str, trace_file: str | None, trace: TraceResult | None = None) -> AuditResult:
    """The audit of `path`, matched against a trace file or trace. Raises AuditError or ValueError."""
    from ..core.document import read_document
    from ..tools.audit import audit, match_trace

    result = audit(path)
    if trace_file is not None:
        trace = read_document(trace_file)
    if trace is not None:
        match_trace(result, trace)
    return result


@command("audit", description=DESCRIPTION, epilog=EPILOG)
def _audit(p: Parser) -> Runner:
    add_arguments(p)
    p.add_argument("elf", nargs="?", default=None, help="the ELF file (default: the loaded program)")

    def run(host: Host, args: argparse.Namespace) -> Output:
        from ..render.audit import render
        from ..tools.audit import AuditError

        path = args.elf or _loaded_program(host)
        if path is None:
            raise UsageError("ualdbg audit: no program loaded; name the ELF file: ualdbg audit PATH")
        live = None
        if args.trace is None and (host.session.buffer.total or host.session.agent.armings):
            live = host.session.result()
        try:
            result = run_audit(path, args.trace, live)
        except (AuditError, ValueError) as exc:
            raise UsageError(f"ualdbg audit: {exc}") from None
        doc = result.to_json()
        if args.json:
            try:
                dump(doc, args.json)
            except OSError as exc:
                raise UsageError(f"ualdbg audit: cannot write {args.json}: {exc.strerror}") from None
        return render(doc)

    return run


def _loaded_program(host: Host) -> str | None:
    if isinstance(host, LaunchSource):
        try:
            path = host.launch_info()[0]
            if path:
                return path
        except Exception:  # no program loaded: the session may still know one
            pass
    return host.session.program.path


def run_cli(args: argparse.Namespace) -> int:
    """`ualdbg audit [--json F] [--trace F] ELF` from the shell; returns the exit status."""
    import sys

    from ..engines.runner import ToolError
    from ..render.audit import render
    from ..render.console import make_console
    from ..tools.audit import AuditError, exit_status

    try:
        result = run_audit(args.elf, args.trace)
    except (AuditError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    doc = result.to_json()
    if args.json:
        try:
            dump(doc, args.json)
        except OSError as exc:
            raise ToolError(f"cannot write {args.json}: {exc.strerror}") from None
    if args.json != "-":
        out = make_console(sys.stdout)
        for item in render(doc):
            if isinstance(item, str):
                out.out(item, highlight=False)
            else:
                out.print(item)
    return exit_status(result)
