"""The `ualdbg` shell command (also `python -m ualdbg`): trace, check, stackcheck, audit, report.
Exit statuses: `trace` passes the program's through; `check` 0 clean, 1 too many faults,
2 usage or tool error; `stackcheck` 0 clean, 1 misaligned/unaligned/too spread, 2 error;
`audit` 0 no finding (or none hit), 1 findings (hit), 2 error."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from . import __version__
from .commands.argtypes import nonnegative, positive
from .render.console import make_console
from .render.jsondoc import GROUPS, dump, load_document
from .render.sarif import build_sarif
from .render.tables import header, records_table, summary_table
from .runner import RunRequest, ToolError, pass_exit_status, run_traced

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        self.exit(EXIT_ERROR, f"{self.prog}: {message}\n")


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="write the JSON document to FILE (- for stdout)")
    p.add_argument("--all-modules", action="store_true", help="include the dynamic loader and system libraries")
    p.add_argument("--module", action="append", default=[], metavar="NAME", help="also include this module")
    p.add_argument("--at", choices=("main", "start"), default="main", help="arm at main (default) or the first instruction")
    p.add_argument("--buffer", type=positive, default=100_000, help="records kept in the ring (counts stay exact)")
    p.add_argument("--engine", choices=("agent", "trap", "step"), default=None,
                   help="agent (default where it works): in-process, one signal per fault; trap: EFLAGS.AC signal mode under a debugger; "
                        "step: single-step a scope (--in/--range/--everywhere) and check every access against --policy")
    p.add_argument("--in", dest="step_in", action="append", default=[], metavar="FUNC",
                   help="step: single-step every instance of FUNC (repeatable); calls out of it run at full speed")
    p.add_argument("--range", dest="step_range", action="append", default=[], metavar="LO,HI",
                   help="step: single-step the runtime addresses [LO, HI) (repeatable)")
    p.add_argument("--everywhere", action="store_true", help="step: single-step the whole program from --at (slow: ~40k instructions/s)")
    p.add_argument("--policy", choices=("ac", "natural", "cacheline", "page"), default=None,
                   help="step: what counts: ac (x86 #AC, default on x86-64), natural (size-aligned, what a strict-alignment CPU traps; default elsewhere), "
                        "cacheline (splits a 64-byte line), page (splits a 4 KiB page)")
    p.add_argument("--debugger", choices=("gdb", "lldb"), default=None, help="which debugger drives the trap engine (implies --engine trap; default gdb)")
    p.add_argument("--no-follow", action="store_true", help="agent: trace only the program, not the processes it starts")
    p.add_argument("--arch", default=None, metavar="ARCH",
                   help="the program's architecture (default: its ELF header); sparc64, alpha... run under qemu-user and gdb-multiarch")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ualdbg", description="Find unaligned memory accesses in native programs.")
    p.add_argument("--version", action="version", version=f"ualdbg {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    t = sub.add_parser("trace", help="run a program, record every unaligned access, print the summary",
                       description="Run PROG to completion under the agent (or the trap engine) and summarise its unaligned accesses. "
                                   "The program's stdin, stdout, stderr and exit status pass through unchanged.")
    _run_options(t)
    t.add_argument("--by", choices=GROUPS, default="pc", help="group the summary")
    c = sub.add_parser("check", help="CI gate: exit 1 when PROG makes more than N unaligned accesses",
                       description="Run PROG and fail (exit 1) when it makes more than --max-faults unaligned accesses in scope; "
                                   "0 otherwise; 2 on usage or tool errors. The program's exit status goes into the JSON.")
    _run_options(c)
    c.add_argument("--max-faults", type=nonnegative, default=0, metavar="N")
    c.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0 for code scanning")
    from .commands.stackcheck import EPILOG as _SC_EPILOG
    from .commands.stackcheck import add_arguments as _sc_arguments

    sc = sub.add_parser("stackcheck", help="does alignment (and speed) depend on argv and the environment?",
                        description="Run PROG in variants of argv[0] length and environment size (and with ASLR) and report "
                                    "how the stack, its variables and the argv/environment strings move.",
                        epilog=_SC_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sc_arguments(sc)
    sc.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")
    from .commands.audit import DESCRIPTION as _AU_DESCRIPTION
    from .commands.audit import EPILOG as _AU_EPILOG
    from .commands.audit import add_arguments as _au_arguments

    au = sub.add_parser("audit", help="static alignment audit of an ELF (packed members, misaligned variables, COMMON)",
                        description=_AU_DESCRIPTION, epilog=_AU_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _au_arguments(au)
    au.add_argument("elf", help="the executable, shared library or object file")
    r = sub.add_parser("report", help="re-render a saved JSON trace", description="Re-render a JSON trace saved by trace/check/`trace save`.")
    r.add_argument("file")
    r.add_argument("--summary", action="store_true")
    r.add_argument("--by", choices=GROUPS, default="pc")
    r.add_argument("--limit", type=positive, default=None)
    return p


def _program(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise ToolError(f"ualdbg {args.cmd}: name the program after --, e.g. ualdbg {args.cmd} -- ./prog args")
    return prog


def _trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[dict[str, Any], Any]:
    engine = args.engine or ("trap" if args.debugger else "auto")
    stepping = bool(args.step_in or args.step_range or args.everywhere or args.policy)
    if stepping and engine != "step":
        raise ToolError("--in, --range, --everywhere and --policy belong to --engine step")
    if engine == "step" and args.debugger:
        raise ToolError("--engine step runs the native stepper; --debugger chooses the trap engine's debugger")
    req = RunRequest(_program(args, parser), debugger=args.debugger or "gdb", at=args.at, all_modules=args.all_modules,
                     modules=args.module, buffer=args.buffer, engine=engine, follow=not args.no_follow,
                     step_functions=list(args.step_in), step_ranges=list(args.step_range), everywhere=args.everywhere,
                     policy=args.policy, arch=args.arch)
    show_progress = sys.stdout.isatty() and sys.stderr.isatty() and args.json != "-"
    if show_progress:
        from rich.live import Live

        console = make_console(sys.stderr)
        with Live("", console=console, transient=True, refresh_per_second=5) as live:
            def update(total: int, ignored: int, secs: float) -> None:
                rate = total / secs if secs > 0 else 0.0
                live.update(f"ualdbg: {total:,} unaligned accesses ({rate:,.0f}/s), {ignored:,} ignored, {secs:.1f} s")
            result = run_traced(req, update)
    else:
        result = run_traced(req)
    doc = result.doc
    if args.json:
        dump(doc, args.json)
    if args.json != "-":
        out = make_console(sys.stdout)
        out.print(header(doc))
        if doc["sites"]:
            out.print(summary_table(doc, getattr(args, "by", "pc")))
    return doc, result


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        if args.cmd == "trace":
            _doc, result = _trace(args, parser)
            return pass_exit_status(result.exit_status, result.exit_signal)
        if args.cmd == "check":
            doc, _result = _trace(args, parser)
            if args.sarif:
                dump(build_sarif(doc), args.sarif)
            n = doc["faults_total"]
            verdict = EXIT_FOUND if n > args.max_faults else EXIT_CLEAN
            if args.json != "-":
                word = "FAIL" if verdict else "ok"
                print(f"ualdbg check: {word}: {n} unaligned access{'es' if n != 1 else ''} in scope (allowed {args.max_faults})")
            return verdict
        if args.cmd == "stackcheck":
            from .commands.stackcheck import run_cli

            return run_cli(args)
        if args.cmd == "audit":
            from .commands.audit import run_cli as _audit_cli

            return _audit_cli(args)
        if args.cmd == "report":
            doc = load_document(args.file)
            out = make_console(sys.stdout)
            out.print(header(doc))
            if args.summary or args.by != "pc":
                out.print(summary_table(doc, args.by))
            else:
                out.print(records_table(doc, args.limit))
            return EXIT_CLEAN
    except (ToolError, ValueError) as exc:
        print(f"ualdbg: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("ualdbg: interrupted", file=sys.stderr)
        return 130
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
