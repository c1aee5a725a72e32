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
from .commands.options import SHELL_ENGINES, add_buffer_arg, add_engine_arg, add_scope_args, add_step_args
from .commands.registry import examples_text
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
    """trace's and check's options; those a debugger command has too come from commands/options."""
    p.add_argument("--json", metavar="FILE", help="write the JSON document to FILE (- for stdout)")
    add_scope_args(p)
    add_buffer_arg(p, 100_000)
    add_engine_arg(p, SHELL_ENGINES, None)
    add_step_args(p, until_return=False)
    p.add_argument("--debugger", choices=("gdb", "lldb"), default=None, help="which debugger drives the trap engine (implies --engine trap; default gdb)")
    p.add_argument("--no-follow", action="store_true", help="agent: trace only the program, not the processes it starts")
    p.add_argument("--arch", default=None, metavar="ARCH",
                   help="the program's architecture (default: its ELF header); sparc64, alpha... run under qemu-user and gdb-multiarch")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")


def _examples(*lines: str) -> dict[str, Any]:
    """A subcommand's epilog: the invocations a user types (registry.examples_text's format)."""
    return {"epilog": examples_text(lines), "formatter_class": argparse.RawDescriptionHelpFormatter}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ualdbg", description="Find unaligned memory accesses in native programs.",
                **_examples("ualdbg trace -- ./prog args                     run prog, print its unaligned accesses per site",
                            "ualdbg check --json r.json --sarif r.sarif -- ./prog   the CI gate",
                            "ualdbg gdb -- ./prog args                       gdb with ualdbg loaded: `ualdbg break`, `run`",
                            "ualdbg COMMAND --help                           every command has examples"))
    p.add_argument("--version", action="version", version=f"ualdbg {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    t = sub.add_parser("trace", help="run a program, record every unaligned access, print the summary",
                       description="Run PROG to completion under the agent (or the trap engine) and summarise its unaligned accesses. "
                                   "The program's stdin, stdout, stderr and exit status pass through unchanged.",
                       **_examples("ualdbg trace -- ./prog args",
                                   "ualdbg trace --by line --json t.json -- ./prog     counts per source line, and the JSON",
                                   "ualdbg trace --all-modules -- ./prog               include ld.so and system libraries",
                                   "ualdbg trace --engine step --in parse --policy natural -- ./prog   what a strict CPU would trap"))
    _run_options(t)
    t.add_argument("--by", choices=GROUPS, default="pc", help="group the summary")
    c = sub.add_parser("check", help="CI gate: exit 1 when PROG makes more than N unaligned accesses",
                       description="Run PROG and fail (exit 1) when it makes more than --max-faults unaligned accesses in scope; "
                                   "0 otherwise; 2 on usage or tool errors. The program's exit status goes into the JSON.",
                       **_examples("ualdbg check -- ./prog args",
                                   "ualdbg check --max-faults 10 --json r.json --sarif r.sarif -- ./prog",
                                   "ualdbg check --engine trap --debugger lldb -- ./prog"))
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
    r = sub.add_parser("report", help="re-render a saved JSON trace", description="Re-render a JSON trace saved by trace/check/`trace save`.",
                       **_examples("ualdbg report t.json                 the records",
                                   "ualdbg report t.json --summary       counts per PC, hottest first",
                                   "ualdbg report t.json --by line       counts per source line"))
    r.add_argument("file")
    r.add_argument("--summary", action="store_true")
    r.add_argument("--by", choices=GROUPS, default="pc")
    r.add_argument("--limit", type=positive, default=None)
    _launcher_parsers(sub)
    return p


def _launcher_parsers(sub: Any) -> None:
    """`ualdbg gdb|lldb|gdbinit|lldbinit` (ualdbg/loaders/launch.py). `gdb` and `lldb` are parsed
    by hand in main(): their options are the debugger's, which argparse must not read."""
    sub.add_parser("gdb", help="start gdb with ualdbg loaded", add_help=False,
                   description="Start gdb with ualdbg loaded: ualdbg gdb [GDB ARGS] [-- PROG ARGS]. "
                               "Then type `ualdbg break` and `run`.",
                   **_examples("ualdbg gdb -- ./prog args",
                               "ualdbg gdb -p 1234                              attach to a running process",
                               "ualdbg gdb -batch -ex 'ualdbg break' -ex run -- ./prog"))
    sub.add_parser("lldb", help="start lldb with ualdbg loaded", add_help=False,
                   description="Start lldb (lldb-19) with ualdbg loaded: ualdbg lldb [LLDB ARGS] [-- PROG ARGS]. "
                               "Then type `ualdbg break` and `run`.",
                   **_examples("ualdbg lldb -- ./prog args",
                               "ualdbg lldb -p 1234                             attach to a running process",
                               "ualdbg lldb -o 'ualdbg break' -o run -- ./prog"))
    sub.add_parser("gdbinit", help="print the lines that load ualdbg in every gdb session",
                   description="Print the lines to add to ~/.gdbinit so that every gdb session has ualdbg.",
                   **_examples("ualdbg gdbinit >> ~/.gdbinit"))
    sub.add_parser("lldbinit", help="print the lines that load ualdbg in every lldb session",
                   description="Print the lines to add to ~/.lldbinit so that every lldb session has ualdbg.",
                   **_examples("ualdbg lldbinit >> ~/.lldbinit"))


def _launch(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from .loaders.launch import LaunchError, launch

    kind, rest = argv[0], argv[1:]
    if rest[:1] in (["-h"], ["--help"]):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[kind].print_help()
        return EXIT_CLEAN
    try:
        return launch(kind, rest)
    except LaunchError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR


def _program(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise ToolError(f"ualdbg {args.cmd}: name the program after --, e.g. ualdbg {args.cmd} -- ./prog args")
    return prog


def _trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[dict[str, Any], Any]:
    engine = args.engine or ("trap" if args.debugger else "auto")
    stepping = bool(args.in_ or args.range or args.everywhere or args.policy)
    if stepping and engine != "step":
        raise ToolError("--in, --range, --everywhere and --policy belong to --engine step")
    if engine == "step" and args.debugger:
        raise ToolError("--engine step runs the native stepper; --debugger chooses the trap engine's debugger")
    req = RunRequest(_program(args, parser), debugger=args.debugger or "gdb", at=args.at or "main", all_modules=bool(args.all_modules),
                     modules=args.module, buffer=args.buffer, engine=engine, follow=not args.no_follow,
                     step_functions=list(args.in_), step_ranges=list(args.range), everywhere=args.everywhere,
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["gdb"], ["lldb"]):
        return _launch(argv, parser)
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
        if args.cmd in ("gdbinit", "lldbinit"):
            from .loaders.launch import init_lines

            print("\n".join(init_lines(args.cmd[:-4])))
            return EXIT_CLEAN
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
