"""The `ualdbg` shell command (also `python -m ualdbg`): trace, check, stackcheck, audit, report.
Exit statuses: `trace` passes the program's through; `check`: the program's own when it fails,
else 0 clean, 1 (--error-exitcode) too many faults or new sites, 3 incomplete (--allow-incomplete); `stackcheck` 0 clean, 1
misaligned/unaligned/too spread; `audit` 0 no finding (or none hit), 1 findings (hit). Where a
program is run (trace, check, stackcheck, watch -- PROG), ualdbg's own failures are the wrappers'
125/126/127 (ci/gate.py); 2 is a usage error or bad input, and every error in report and audit."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..ci import baseline
from ..ci.costfilter import FAIL_ON, filtered, noun
from ..ci.costfilter import HELP as FAIL_ON_HELP
from ..ci.gate import CONTRACT, EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, EXIT_TOOL, STATUSES, Verdict, decide
from ..ci.merge import merge
from ..commands.argtypes import nonnegative, positive
from ..commands.options import SHELL_ENGINES, add_buffer_arg, add_engine_arg, add_patch_args, add_scope_args, add_step_args
from ..commands.registry import examples_text
from ..engines.runner import ProgramUntraced, RunRequest, ToolError, pass_exit_status, run_traced
from ..isa.costclass import costs_for
from ..render.console import make_console
from ..render.jsondoc import GROUPS, load_document
from ..render.sarif import build_sarif
from ..render.tables import blind_lines, header, patch_note, records_table, summary_table
from .outputs import Named, OutputError, Report, check_distinct, check_writable, same_file, say, standard_stream, write_json

REPORT_LIMIT = 1000  # records `report` shows unless told: a table of 1,000 takes under a second

TRACE_STATUSES = f"""exit status:
  the program's own  its exit status, or 128+N when signal N killed it (with --pid: 0)
{STATUSES}"""


class _Parser(argparse.ArgumentParser):
    # A sub-command whose options come from a module imported only when the command is chosen
    # or its help shown: every start builds every sub-command's parser (issue 34).
    fill: Callable[[argparse.ArgumentParser], None] | None = None

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


JSON_HELP = ("write the JSON document to FILE, or to descriptor N with fd:N (e.g. --json fd:3 3>&1 >&2 | jq: "
             "the program's stdout stays its own); - (stdout) is refused where the program writes to it too")


def _run_options(p: argparse.ArgumentParser) -> None:
    """trace's and check's options; those a debugger command has too come from commands/options."""
    p.add_argument("--json", metavar="FILE", help=JSON_HELP)
    add_scope_args(p)
    add_buffer_arg(p, 100_000)
    add_engine_arg(p, SHELL_ENGINES, None)
    add_step_args(p, until_return=False)
    p.add_argument("--debugger", choices=("gdb", "lldb"), default=None, help="which debugger drives the trap engine (implies --engine trap; default gdb)")
    p.add_argument("--no-follow", action="store_true", help="agent: trace only the program, not the processes it starts")
    add_patch_args(p, _count)
    p.add_argument("--arch", default=None, metavar="ARCH",
                   help="the program's architecture (default: its ELF header); sparc64, alpha... run under qemu-user and gdb-multiarch")
    p.add_argument("--log-file", metavar="FILE", default=None,
                   help="write ualdbg's report there instead of stderr (the program's stdout and stderr stay its own)")
    p.add_argument("--pid", type=positive, default=None, metavar="PID",
                   help="trace this running process instead of starting one (every thread, those it starts too), "
                        "until Ctrl-C, --duration or its exit; the agent is injected into it (--engine trap: gdb); it "
                        "goes on unchanged after the detach")
    p.add_argument("--duration", type=_seconds, default=None, metavar="S", help="with --pid: detach after S seconds")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS (a native program, or a #! script: "
                   "the agent then traces the programs it runs)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


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
                       epilog=TRACE_STATUSES + "\n\n" + examples_text([
                           "ualdbg trace -- ./prog args",
                           "ualdbg trace --by line --json t.json -- ./prog     counts per source line, and the JSON",
                           "ualdbg trace --all-modules -- ./prog               include ld.so and system libraries",
                           "ualdbg trace --engine step --in parse --policy natural -- ./prog   what a strict CPU would trap",
                           "ualdbg trace --pid 1234                            a running process, until Ctrl-C; it goes on after",
                           "ualdbg trace --pid 1234 --duration 10 --json t.json   ten seconds of it"]),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _run_options(t)
    t.add_argument("--by", choices=GROUPS, default="pc", help="the summary per pc (default), source line, function or "
                   "module")
    c = sub.add_parser("check", help="CI gate: fail when PROG fails or makes more than N unaligned accesses",
                       description="Run PROG and fail when it fails, or when it makes more than --max-faults unaligned "
                                   "accesses in scope (with --baseline: at sites the baseline does not have). "
                                   "Outputs are checked as writable before PROG starts.",
                       epilog=CONTRACT + "\n\n" + examples_text([
                           "ualdbg check -- ./prog args",
                           "ualdbg check --max-faults 10 --json r.json --sarif r.sarif -- ./prog",
                           "ualdbg check --update-baseline --baseline ualdbg-baseline.json -- make test   accept today's sites",
                           "ualdbg check --baseline ualdbg-baseline.json -- make test                     fail on new ones only",
                           "ualdbg check --engine trap --debugger lldb -- ./prog",
                           "ualdbg check --pid 1234 --duration 30 --sarif r.sarif   a running service, for 30 seconds"]),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _run_options(c)
    c.add_argument("--max-faults", type=nonnegative, default=0, metavar="N", help="unaligned accesses allowed (default 0)")
    c.add_argument("--error-exitcode", type=nonnegative, default=EXIT_FOUND, metavar="N",
                   help="the status when the accesses exceed the limit or the baseline (default 1)")
    c.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0 for code scanning")
    c.add_argument("--baseline", metavar="FILE", help="fail only on sites not in FILE (keyed by module, inline chain "
                   "and the text of each line: edits elsewhere keep them; docs/CI.md)")
    c.add_argument("--allow-incomplete", action="store_true",
                   help="pass a run part of which ualdbg could not see (SIGBUS blocked or taken over by the program, a "
                        "process the agent could not enter) instead of failing with status 3; the report, the JSON's "
                        "blind_spots and SARIF still say what was not seen")
    c.add_argument("--update-baseline", action="store_true", help="write this run's sites to --baseline FILE and pass "
                   "(unless the program fails)")
    c.add_argument("--fail-on", choices=FAIL_ON, default="any", help=FAIL_ON_HELP + "; --max-faults and --baseline "
                   "count these only")
    w = sub.add_parser("watch", help="live fault rate of a running process or a program (MONITOR ALIGN)",
                       description="Show the unaligned-access rate while a process runs: total faults/s, the top sites "
                                   "with their current and peak rate, count, function and line, its threads, the "
                                   "elapsed time; refreshed every --interval seconds on a terminal (q or Ctrl-C stops "
                                   "and prints the summary), one line per interval otherwise (--json-lines: one JSON "
                                   "object). --pid injects the agent (else attaches with gdb) and detaches at the end: the process goes on. "
                                   "-- PROG runs PROG under the agent: on a terminal its output (a pty, so it still "
                                   "writes to a terminal) is printed above the live table; q stops watching and PROG "
                                   "runs on, its output straight to the terminal, the summary and its exit status "
                                   "when it ends; Ctrl-C reaches PROG as without ualdbg, and watch exits as PROG did.",
                       **_examples("ualdbg watch --pid 1234                         attach, watch, q detaches",
                                   "ualdbg watch --pid 1234 --duration 60 --json-lines > rate.jsonl",
                                   "ualdbg watch -- ./server --port 8080           run it under the agent and watch",
                                   "ualdbg watch --top 5 --interval 2 -- ./bench"))
    w.add_argument("--pid", type=positive, default=None, metavar="PID", help="watch this running process (the agent injected into it, else gdb)")
    w.add_argument("--duration", type=_seconds, default=None, metavar="S", help="stop after S seconds")
    w.add_argument("--interval", type=_seconds, default=1.0, metavar="S", help="seconds between refreshes (default 1)")
    w.add_argument("--top", type=positive, default=10, metavar="N", help="sites shown (default 10)")
    w.add_argument("--json-lines", action="store_true", help="one JSON object per interval (no table)")
    w.add_argument("--json", metavar="FILE", help="write the final JSON document to FILE (fd:N: to descriptor N, "
                   "as for trace)")
    w.add_argument("--no-patch", action="store_true", help="-- PROG: the agent never patches: one trap and one "
                   "record per fault")
    add_scope_args(w)
    add_buffer_arg(w, 100_000)
    w.add_argument("--log-file", metavar="FILE", default=None, help="write the report there instead of stderr")
    w.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")
    sc = sub.add_parser("stackcheck", help="does alignment (and speed) depend on argv and the environment?",
                        description="Run PROG in variants of argv[0] length and environment size (and with ASLR) and report "
                                    "how the stack, its variables and the argv/environment strings move.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)

    def _stackcheck_options(sc: argparse.ArgumentParser) -> None:
        from ..commands.stackcheck import EPILOG as _SC_EPILOG
        from ..commands.stackcheck import add_arguments as _sc_arguments

        sc.epilog = _SC_EPILOG
        _sc_arguments(sc)
        sc.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")
    sc.fill = _stackcheck_options  # type: ignore[attr-defined]  # a _Parser (parser_class)

    au = sub.add_parser("audit", help="static alignment audit of an ELF (packed members, misaligned variables, COMMON)",
                        formatter_class=argparse.RawDescriptionHelpFormatter)

    def _audit_options(au: argparse.ArgumentParser) -> None:
        from ..commands.audit import DESCRIPTION as _AU_DESCRIPTION
        from ..commands.audit import EPILOG as _AU_EPILOG
        from ..commands.audit import add_arguments as _au_arguments

        au.description, au.epilog = _AU_DESCRIPTION, _AU_EPILOG
        _au_arguments(au)
        au.add_argument("elf", help="the executable, shared library or object file")
    au.fill = _audit_options  # type: ignore[attr-defined]
    r = sub.add_parser("report", help="re-render a saved JSON trace, or merge several",
                       description="Re-render a JSON trace saved by trace/check/`trace save`; with --merge, sum several "
                                   "(the processes of a test suite, many CI jobs) into one.",
                       **_examples("ualdbg report t.json                 the records",
                                   "ualdbg report t.json --summary       counts per PC, hottest first",
                                   "ualdbg report t.json --by line       counts per source line",
                                   "ualdbg report --merge a.json b.json --json all.json --sarif all.sarif"))
    r.add_argument("file", nargs="*", help="the JSON trace (several with --merge)")
    r.add_argument("--merge", action="store_true", help="sum the documents: per-site counts added, each run's figures kept")
    r.add_argument("--json", metavar="FILE", default=None, help="write the (merged) document to FILE (- for stdout, fd:N for descriptor N)")
    r.add_argument("--sarif", metavar="FILE", default=None, help="write SARIF 2.1.0 for the (merged) document")
    r.add_argument("--summary", action="store_true", help="counts per exception PC, hottest first, with the data "
                   "and the fix advice per site, instead of the records")
    r.add_argument("--by", choices=GROUPS, default="pc", help="the summary per pc (default), source line, function or "
                   "module")
    r.add_argument("--fail-on", choices=FAIL_ON, default="any", help=FAIL_ON_HELP + "; shows and writes these only, "
                   "and exits 1 when there are any")
    r.add_argument("--limit", type=nonnegative, default=REPORT_LIMIT, metavar="N",
                   help=f"records shown: the newest N (default {REPORT_LIMIT:,}; 0: all of them, slow for a full ring); "
                        "with --summary or --by, the hottest N rows")
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
    from ..loaders.launch import LaunchError, launch

    kind, rest = argv[0], argv[1:]
    if rest[:1] in (["-h"], ["--help"]):
        launchers = _Parser(prog=parser.prog).add_subparsers(parser_class=_Parser)
        _launcher_parsers(launchers)  # declared once: the same parsers as in build_parser
        launchers.choices[kind].print_help()
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


def _outputs(args: argparse.Namespace) -> list[Named]:
    """Every file this command writes, to check before the program runs."""
    out = [Named("--json", args.json), Named("--sarif", getattr(args, "sarif", None) or ""),
           Named("--log-file", args.log_file or "")]
    if getattr(args, "update_baseline", False):
        out.append(Named("--baseline", args.baseline))
    return [n for n in out if n.path]


_STREAMS = ("stdin", "stdout", "stderr")


def _json_apart(args: argparse.Namespace) -> None:
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


def _reads(args: argparse.Namespace) -> list[Named]:
    """The files the run reads or runs, which no output may overwrite: a baseline being read, the
    program, and the files its command line names (a script, its input)."""
    import shutil

    reads = []
    if getattr(args, "baseline", None) and not getattr(args, "update_baseline", False):
        reads.append(Named("the baseline being read", args.baseline))
    rest = list(getattr(args, "program", None) or [])
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if rest:
        first = rest[0] if "/" in rest[0] else (shutil.which(rest[0]) or rest[0])
        reads.append(Named("the program", first))
        reads.extend(Named("a file the program's command line names", a) for a in rest[1:] if os.path.isfile(a))
    return reads


def _check_outputs(writes: list[Named], reads: list[Named]) -> None:
    """Nothing runs unless every output can be written, and no two land on one file (issues 17, 29)."""
    try:
        check_distinct(writes, reads)
        for n in writes:
            check_writable(n.path, _WHAT.get(n.option, n.option))
    except OutputError as exc:
        raise ToolError(str(exc)) from None


_WHAT = {"--json": "the JSON output", "--sarif": "the SARIF output", "--log-file": "the log file",
         "--baseline": "the baseline"}


def _sink(args: argparse.Namespace) -> Report:
    """Where ualdbg's own report goes: stderr or --log-file (written whole at the end), never the
    program's stdout. One per command."""
    rep = getattr(args, "report_sink", None)
    if rep is None:
        rep = args.report_sink = Report(args.log_file)
    return rep


def _trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[dict[str, Any], Any]:
    engine = args.engine or ("trap" if args.debugger else "auto")
    stepping = bool(args.in_ or args.range or args.everywhere or args.policy)
    if stepping and engine != "step":
        raise ToolError("--in, --range, --everywhere and --policy belong to --engine step")
    if engine == "step" and args.debugger:
        raise ToolError("--engine step runs the native stepper; --debugger chooses the trap engine's debugger")
    if getattr(args, "update_baseline", False) and not args.baseline:
        raise ToolError("--update-baseline needs --baseline FILE (where to write it)")
    known = None
    if getattr(args, "baseline", None) and not args.update_baseline:
        try:
            known = baseline.load(args.baseline)
        except baseline.BaselineError as exc:
            raise ToolError(str(exc)) from None
    _json_apart(args)
    _check_outputs(_outputs(args), _reads(args))
    if args.pid is not None:
        return _trace_pid(args, known)
    if args.duration is not None:
        raise ToolError("--duration goes with --pid (a program started by ualdbg is traced to its end)")
    program = _program(args, parser)
    req = RunRequest(program, debugger=args.debugger or "gdb", at=args.at or "main", all_modules=bool(args.all_modules),
                     modules=args.module, buffer=args.buffer, engine=engine, follow=not args.no_follow,
                     patch_after=0 if args.no_patch else args.patch_after,
                     step_functions=list(args.in_), step_ranges=list(args.range), everywhere=args.everywhere,
                     policy=args.policy, arch=args.arch)
    show_progress = sys.stderr.isatty() and not args.log_file
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
    return _print_trace(args, result, known), result


def _print_trace(args: argparse.Namespace, result: Any, known: Any, last: str | None = None) -> dict[str, Any]:
    """The trace document written (--json) and summarised, launched or attached alike; `last`
    is printed after the notes."""
    doc = result.doc
    if args.json:
        write_json(doc, args.json, "the JSON output")
    out = _sink(args)
    out.print(header(doc))
    if doc["sites"]:
        out.print(summary_table(doc, getattr(args, "by", "pc"), costs_for(doc)))
    programs = _per_program(doc)
    if programs:
        out.print(programs)
    for note in doc.get("notes") or []:
        out.print(f"note: {note}")
    if args.json and patch_note(doc):  # the records written are partial (issue 31)
        out.print(f"note: {patch_note(doc)}")
    for line in blind_lines(doc):
        out.print(line)
    if last:
        out.print(last)
    if known is not None:
        args.new_sites = baseline.new_sites(doc, known, getattr(args, "fail_on", "any"))
    return doc


def _trace_pid(args: argparse.Namespace, known: Any) -> tuple[dict[str, Any], Any]:
    """`--pid`: attach to the running process (ualdbg.cli.attach) and print the usual summary."""
    from .attach import run_attached

    if args.program and args.program != ["--"]:
        raise ToolError("--pid traces a running process: name no program after it")
    if args.engine == "step" or args.debugger == "lldb" or args.arch:
        raise ToolError("--pid: the agent (injected) or the trap engine under gdb attach to a running process "
                        "(no --engine step, --debugger lldb or --arch)")
    from .attach import attach_problem

    problem = attach_problem(args.pid)
    if problem:
        raise ToolError(problem)
    engine = "trap" if args.engine == "trap" or args.debugger == "gdb" else "agent"
    req = RunRequest([], all_modules=bool(args.all_modules), modules=args.module, buffer=args.buffer, engine=engine,
                     pid=args.pid, duration=args.duration, patch_after=0 if args.no_patch else args.patch_after)
    err = sys.stderr
    result = run_attached(req, ready=lambda how: print(f"ualdbg: attached to process {args.pid} ({how}); "
                                                       + (f"detaching in {args.duration:g} s" if args.duration else
                                                          "Ctrl-C detaches"), file=err, flush=True),
                          say=lambda line: print(line, file=err, flush=True))
    attached = result.doc["attached"]
    last = (f"ualdbg: detached from process {args.pid} ({attached['ended_by']}); no thread has AC set"
            if attached["detached"] else None)
    return _print_trace(args, result, known, last), result


def _watch(args: argparse.Namespace) -> int:
    """`ualdbg watch`: live rates while tracing (ualdbg.cli.watch), then the usual summary."""
    import threading

    from .watch import PROGRAM_KEYS, AgentSampler, Display, Keys, LiveResolver, ProgramOutput

    if (args.pid is None) == (not args.program or args.program == ["--"]):
        raise ToolError("ualdbg watch: give --pid PID or -- PROG ARGS (one of them)")
    _json_apart(args)
    _check_outputs(_outputs(args), _reads(args))
    stream = sys.stdout
    live = stream.isatty() and not args.json_lines
    quit_ = threading.Event()
    if args.pid is not None:
        from .attach import attach_problem, run_attached

        problem = attach_problem(args.pid)
        if problem:
            raise ToolError(problem)
        resolver = LiveResolver(lambda: args.pid)
        display = Display(stream, resolver, top=args.top, json_lines=args.json_lines, live=live,
                          title=f"ualdbg watch: process {args.pid}")
        req = RunRequest([], all_modules=bool(args.all_modules), modules=args.module, buffer=args.buffer,
                         engine="agent", pid=args.pid, duration=args.duration)
        try:
            with Keys(quit_.set):
                result = run_attached(req, on_sample=display.sample, interval=args.interval, quit=quit_,
                                      say=lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            display.close()
    else:
        from ..engines.agent import AgentNotIn, AgentRun, AgentUnavailable, run_agent
        from ..engines.wrapper import interrupt_program

        program = _program(args, argparse.ArgumentParser())
        from ..engines.runner import RunResult, resolve_program

        typed = program[0]
        program[0] = resolve_program(program[0])
        run = AgentRun(program, all_modules=bool(args.all_modules), modules=list(args.module), buffer=args.buffer,
                       argv0=typed, patch_after=0 if args.no_patch else 2)
        sampler = AgentSampler(run.later_maps)
        resolver = LiveResolver(lambda: sampler.root)
        display = Display(stream if live or args.json_lines else sys.stderr, resolver, top=args.top,
                          json_lines=args.json_lines, live=live,
                          title=f"ualdbg watch: {os.path.basename(program[0])}", keys=PROGRAM_KEYS)
        # On a terminal the program writes to a pty of ualdbg's, whose output is printed above the
        # live view instead of over it (its stdin stays the terminal).
        output = ProgramOutput(display.program_output) if live else None
        if output is not None:
            run.stdout = output.slave
            run.stderr = output.slave if sys.stderr.isatty() else None
        last = [0.0]

        def on_directory(directory: str, secs: float) -> None:
            if secs - last[0] >= args.interval:
                last[0] = secs
                display.sample(sampler(directory, secs))  # after q: the maps only, for the data's names
            if args.duration is not None and secs >= args.duration and not quit_.is_set():
                quit_.set()
                interrupt_program()

        def on_q() -> None:
            # q stops watching, not the program: it runs on (its output straight to the terminal),
            # the trace goes on, and the summary and its exit status come at its end.
            quit_.set()
            display.close()
            print(f"ualdbg watch: stopped watching (q); {os.path.basename(program[0])} runs on, its summary "
                  "follows when it ends (Ctrl-C interrupts it)", file=sys.stderr, flush=True)

        try:
            with Keys(on_q):
                res = run_agent(run, on_directory=on_directory)
        except AgentUnavailable as exc:
            raise ToolError(f"{exc}; `ualdbg watch -- PROG` needs the agent (try --pid on the running program)",
                            EXIT_TOOL) from None
        except AgentNotIn as exc:
            raise ProgramUntraced(str(exc), exc.exit_status, exc.exit_signal) from None
        finally:
            if output is not None:
                output.close()
            display.close()
            sampler.close()
        result = RunResult(res.doc, res.exit_status, res.exit_signal, "")
    doc = result.doc
    if args.json:
        write_json(doc, args.json, "the JSON output")
    out = _sink(args)
    out.print(header(doc))
    if doc["sites"]:
        out.print(summary_table(doc, "pc", costs_for(doc)))
    for note in doc.get("notes") or []:
        out.print(f"note: {note}")
    for line in blind_lines(doc):
        out.print(line)
    if args.pid is not None and doc["attached"]["detached"]:
        out.print(f"ualdbg: detached from process {args.pid} ({doc['attached']['ended_by']}); no thread has AC set")
    out.close()
    if args.pid is not None:
        return EXIT_CLEAN  # the process is not ualdbg's child: its status is in the JSON
    return pass_exit_status(result.exit_status, result.exit_signal)  # as `trace -- PROG` does


def _per_program(doc: dict[str, Any]) -> str | None:
    """Several programs (a script, a test suite): the faults of each, by program."""
    procs = [p for p in doc.get("processes") or [] if p.get("path")]
    if len({p["path"] for p in procs}) < 2:
        return None
    by: dict[str, list[int]] = {}
    for p in procs:
        counts = by.setdefault(p["path"], [0, 0, 0])
        counts[0] += 1
        counts[1] += p.get("faults_total") or 0
        counts[2] += p.get("faults_ignored") or 0
    lines = ["per program (processes: unaligned accesses in scope, ignored):"]
    for path, (n, total, ignored) in sorted(by.items(), key=lambda kv: (-kv[1][1], kv[0])):
        lines.append(f"  {total:>9,}  {path}  ({n} process{'es' if n != 1 else ''}, {ignored:,} ignored)")
    return "\n".join(lines)


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    doc, _result = _trace(args, parser)
    partial = bool(doc.get("partial"))
    verdict = decide(doc, max_faults=args.max_faults, error_exitcode=args.error_exitcode,
                     new_sites=getattr(args, "new_sites", None), partial=partial,
                     allow_incomplete=args.allow_incomplete, fail_on=args.fail_on)
    if args.update_baseline and verdict.status == args.error_exitcode and not doc["program"].get("exit_signal") \
            and not doc["program"].get("exit_status"):
        verdict = Verdict(EXIT_CLEAN, f"ualdbg check: ok: baseline of {len(filtered(doc, args.fail_on)['sites'])} "
                                      f"sites written to {args.baseline}")
    if args.sarif:  # after the verdict: its invocation carries the exit status (issue 29)
        write_json(build_sarif(doc, exit_code=verdict.status), args.sarif, "the SARIF output")
    report = _sink(args)
    if args.update_baseline:
        written = baseline.build(doc, args.fail_on)
        write_json(written, args.baseline, "the baseline")
        if written.get("note"):  # weaker keys than the source text's (ci/fingerprint.py): said, and in the file
            report.print(f"note: baseline: {written['note']}")
    report.print(verdict.line)
    if not report.close():
        say(verdict.line)  # the log did not reach its path (the fallback is named above): the verdict stays
    return verdict.status


def _report(args: argparse.Namespace) -> int:
    if not args.file:
        raise ToolError("ualdbg report: name a JSON trace, e.g. ualdbg report t.json")
    if len(args.file) > 1 and not args.merge:
        raise ToolError("ualdbg report: several files need --merge")
    _check_outputs([n for n in (Named("--json", args.json or ""), Named("--sarif", args.sarif or "")) if n.path], [])
    docs = [(path, load_document(path)) for path in args.file]
    doc = filtered(merge(docs) if args.merge else docs[0][1], args.fail_on)
    if args.json:
        write_json(doc, args.json, "the JSON output")
    if args.sarif:
        write_json(build_sarif(doc), args.sarif, "the SARIF output")
    if args.json and standard_stream(args.json) == 1:  # the document alone on stdout
        return EXIT_CLEAN
    out = make_console(sys.stdout)
    out.print(header(doc))
    for line in blind_lines(doc):
        out.print(line)
    if args.summary or args.by != "pc" or args.merge:
        out.print(summary_table(doc, args.by, costs_for(doc), limit=args.limit or None))
    else:
        out.print(records_table(doc, args.limit or None))
        kept = len(doc["records"])
        if patch_note(doc):
            out.print(f"note: {patch_note(doc)}")
        if args.limit and kept > args.limit:  # a full ring is 100,000 rows: minutes of table (issue 29)
            out.print(f"records: the newest {args.limit:,} of {kept:,} kept shown (--limit N; --limit 0 shows all; "
                      f"--summary counts every fault)")
    if args.fail_on != "any":
        out.print(f"--fail-on {args.fail_on}: {noun(args.fail_on, doc['faults_total'])} in scope")
        return EXIT_FOUND if doc["faults_total"] else EXIT_CLEAN
    return EXIT_CLEAN


def _closed_streams() -> None:
    """A standard stream the user closed (`2>&-`) is nobody's: ualdbg's own lines to it go nowhere,
    and its descriptor is held by a close-on-exec /dev/null, so that no file ualdbg opens lands on
    it and the program still starts with it closed, as it would without ualdbg."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        nul = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        if nul != fd:  # a lower one was closed too and took it: handled on its own turn
            os.close(nul)
            continue
        setattr(sys, name, open(nul, "r" if fd == 0 else "w", closefd=False))


def _closed_pipe() -> int:
    """Whoever read ualdbg's output stopped (`ualdbg report t.json | head -1`): end quietly by
    SIGPIPE, status 141 in a shell, as `git log | head -1` and coreutils do (docs/CLI.md)."""
    import signal

    try:
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, sys.stdout.fileno())  # what is still buffered is flushed there at exit
    except (OSError, ValueError, AttributeError):
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    _closed_streams()
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
            _sink(args).close()
            if args.pid is not None:
                return EXIT_CLEAN  # the process is not ualdbg's child: its status is in the JSON
            return pass_exit_status(result.exit_status, result.exit_signal)
        if args.cmd == "check":
            return _check(args, parser)
        if args.cmd == "watch":
            return _watch(args)
        if args.cmd == "stackcheck":
            from ..commands.stackcheck import run_cli

            _check_outputs([Named("--json", args.json)] if args.json else [], _reads(args))

            return run_cli(args)
        if args.cmd == "audit":
            from ..commands.audit import run_cli as _audit_cli

            _check_outputs([Named("--json", args.json)] if args.json else [],
                           [Named("the ELF file", args.elf), *([Named("--trace", args.trace)] if args.trace else [])])

            return _audit_cli(args)
        if args.cmd in ("gdbinit", "lldbinit"):
            from ..loaders.launch import init_lines

            print("\n".join(init_lines(args.cmd[:-4])))
            return EXIT_CLEAN
        if args.cmd == "report":
            return _report(args)
    except BrokenPipeError:
        return _closed_pipe()
    except ProgramUntraced as exc:  # it ran, once, untraced: its failure is its own status, else ours
        say(f"ualdbg: {exc}")
        if exc.exit_signal is not None or exc.exit_status:
            return pass_exit_status(exc.exit_status, exc.exit_signal)
        return exc.status
    except ToolError as exc:
        say(f"ualdbg: {exc}")  # escaped: the message may quote a hostile file's names
        return exc.status
    except ValueError as exc:  # bad input (a JSON trace, --arch, a setting)
        say(f"ualdbg: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # an unreadable or unwritable file that no check above foresaw
        say(f"ualdbg: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
        return EXIT_TOOL if _wraps(args) else EXIT_ERROR
    except KeyboardInterrupt:
        print("ualdbg: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line (UALDBG_DEBUG=1 shows the traceback)
        if os.environ.get("UALDBG_DEBUG"):
            raise
        say(f"ualdbg: internal error ({type(exc).__name__}: {exc}); UALDBG_DEBUG=1 shows where")
        return EXIT_TOOL if _wraps(args) else EXIT_ERROR
    finally:
        sink = getattr(args, "report_sink", None)
        if sink is not None:
            sink.close()  # what the report had when an error cut it short still reaches --log-file
    return EXIT_ERROR


def _wraps(args: argparse.Namespace) -> bool:
    """Whether this command runs a program (or traces one, --pid), as a wrapper (timeout(1),
    env(1)) does: then its own failure is 125, never a status the program's ordinary failure
    could have (ci/gate.py)."""
    return args.cmd in ("trace", "check", "stackcheck", "watch")


if __name__ == "__main__":
    sys.exit(main())
