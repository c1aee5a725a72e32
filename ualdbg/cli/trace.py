"""`ualdbg trace -- PROG` (and `--pid PID`): run a program under the agent, the trap engine or the
native stepper, or attach to one, then write its outputs and print the summary. `check` runs the
same trace (cli/check.py)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..ci import baseline
from ..ci.gate import EXIT_CLEAN, STATUSES
from ..commands.argtypes import nonnegative, positive
from ..commands.options import (
    SHELL_ENGINES,
    add_buffer_arg,
    add_engine_arg,
    add_format_arg,
    add_patch_args,
    add_scope_args,
    add_step_args,
)
from ..commands.registry import ShellCommand, examples_text, shell_command
from ..core.errors import ToolError
from ..core.result import TraceResult
from ..engines.runner import RunRequest, pass_exit_status, run_traced
from ..isa.costclass import costs_for
from ..render.console import make_console
from ..render.formats import FORMATS
from ..render.tables import GROUPS
from .common import JSON_HELP, check_outputs, json_apart, outputs, program_of, reads, seconds, sink, write_formats
from .outputs import write_trace

TRACE_STATUSES = f"""exit status:
  the program's own  its exit status, or 128+N when signal N killed it (with --pid: 0)
{STATUSES}"""


SUMMARY_LIMIT = 40  # rows a person reads; a table of every site of a big program took longer than its run


def run_options(p: argparse.ArgumentParser) -> None:
    """trace's and check's options; those a debugger command has too come from commands/options."""
    p.add_argument("--json", metavar="FILE", help=JSON_HELP)
    add_format_arg(p, to_path=True)
    add_scope_args(p)
    add_buffer_arg(p, 100_000)
    add_engine_arg(p, SHELL_ENGINES, None)
    add_step_args(p, until_return=False)
    p.add_argument("--debugger", choices=("gdb", "lldb"), default=None, help="which debugger drives the trap engine (implies --engine trap; default gdb)")
    p.add_argument("--no-follow", action="store_true", help="agent: trace only the program, not the processes it starts")
    add_patch_args(p)
    p.add_argument("--arch", default=None, metavar="ARCH",
                   help="the program's architecture (default: its ELF header); sparc64, alpha... run under qemu-user and gdb-multiarch")
    p.add_argument("--log-file", metavar="FILE", default=None,
                   help="write ualdbg's report there instead of stderr (the program's stdout and stderr stay its own)")
    p.add_argument("--pid", type=positive, default=None, metavar="PID",
                   help="trace this running process instead of starting one (every thread, those it starts too), "
                        "until Ctrl-C, --duration or its exit; the agent is injected into it (--engine trap: gdb); it "
                        "goes on unchanged after the detach")
    p.add_argument("--duration", type=seconds, default=None, metavar="S", help="with --pid: detach after S seconds")
    p.add_argument("--limit", type=nonnegative, default=SUMMARY_LIMIT, metavar="N",
                   help=f"the summary's hottest N sites (or --by rows) and their data (default {SUMMARY_LIMIT}; 0: all); "
                        "--json, --sarif and --format files always hold every site")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS (a native program, or a #! script: "
                   "the agent then traces the programs it runs)")


@shell_command
class Trace(ShellCommand):
    name = "trace"
    help = "run a program, record every unaligned access, print the summary"
    description = ("Run PROG to completion under the agent (or the trap engine) and summarise its unaligned accesses. "
                   "The program's stdin, stdout, stderr and exit status pass through unchanged.")
    epilog = TRACE_STATUSES + "\n\n" + examples_text([
        "ualdbg trace -- ./prog args",
        "ualdbg trace --by line --json t.json -- ./prog     counts per source line, and the JSON",
        "ualdbg trace --all-modules -- ./prog               include ld.so and system libraries",
        "ualdbg trace --engine step --in parse --policy natural -- ./prog   what a strict CPU would trap",
        "ualdbg trace --pid 1234                            a running process, until Ctrl-C; it goes on after",
        "ualdbg trace --pid 1234 --duration 10 --json t.json   ten seconds of it"])
    wraps = True

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        run_options(parser)
        parser.add_argument("--by", choices=GROUPS, default="pc", help="the summary per pc (default), source line, "
                            "function or module")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        trace_result, result = trace(args)
        write_formats(args, trace_result)
        sink(args).close()
        if args.pid is not None:
            return EXIT_CLEAN  # the process is not ualdbg's child: its status is in the JSON
        return pass_exit_status(result.exit_status, result.exit_signal)


def trace(args: argparse.Namespace) -> tuple[TraceResult, Any]:
    """The run `trace` and `check` make: the TraceResult (written with --json and summarised) and
    the run's result (its exit status)."""
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
    json_apart(args)
    check_outputs(outputs(args), reads(args))
    if args.pid is not None:
        return _trace_pid(args, known)
    if args.duration is not None:
        raise ToolError("--duration goes with --pid (a program started by ualdbg is traced to its end)")
    program = program_of(args)
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


def _print_trace(args: argparse.Namespace, run: Any, known: Any, last: str | None = None) -> TraceResult:
    """The trace written (--json) and summarised, launched or attached alike; `last` is printed
    after the notes."""
    from ..render.textreport import report_items

    result: TraceResult = run.result
    if args.json:
        write_trace(result, args.json, FORMATS["json"], "the JSON output")
    out = sink(args)
    # the records written are partial when patched sites left faults without one (issue 31)
    for item in report_items(result, getattr(args, "by", "pc"), costs=costs_for(result), records_written=bool(args.json),
                             limit=getattr(args, "limit", 0) or None):
        out.print(item)
    if last:
        out.print(last)
    if known is not None:
        args.new_sites = baseline.new_sites(result, known, getattr(args, "fail_on", "any"))
    return result


def _trace_pid(args: argparse.Namespace, known: Any) -> tuple[TraceResult, Any]:
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
    attached = result.result.attached
    last = (f"ualdbg: detached from process {args.pid} ({attached.ended_by}); no thread has AC set"
            if attached is not None and attached.detached else None)
    return _print_trace(args, result, known, last), result
