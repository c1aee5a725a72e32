"""`ualdbg watch --pid PID | -- PROG`: the live fault rate while a process runs (the live view is
cli/watch.py), then the usual summary."""
from __future__ import annotations

import argparse
import os
import sys

from ..ci.gate import EXIT_CLEAN, EXIT_TOOL
from ..commands.argtypes import positive
from ..commands.options import add_buffer_arg, add_format_arg, add_scope_args
from ..commands.registry import ShellCommand, shell_command
from ..core.errors import ToolError
from ..engines.runner import ProgramUntraced, RunRequest, pass_exit_status
from ..isa.costclass import costs_for
from ..render.formats import FORMATS
from .common import check_outputs, examples, json_apart, outputs, program_of, reads, seconds, sink, write_formats
from .outputs import write_trace


@shell_command
class Watch(ShellCommand):
    name = "watch"
    help = "live fault rate of a running process or a program (MONITOR ALIGN)"
    description = ("Show the unaligned-access rate while a process runs: total faults/s, the top sites "
                   "with their current and peak rate, count, function and line, its threads, the "
                   "elapsed time; refreshed every --interval seconds on a terminal (q or Ctrl-C stops "
                   "and prints the summary), one line per interval otherwise (--json-lines: one JSON "
                   "object). --pid injects the agent (else attaches with gdb) and detaches at the end: the process goes on. "
                   "-- PROG runs PROG under the agent: on a terminal its output (a pty, so it still "
                   "writes to a terminal) is printed above the live table; q stops watching and PROG "
                   "runs on, its output straight to the terminal, the summary and its exit status "
                   "when it ends; Ctrl-C reaches PROG as without ualdbg, and watch exits as PROG did.")
    epilog = examples("ualdbg watch --pid 1234                         attach, watch, q detaches",
                      "ualdbg watch --pid 1234 --duration 60 --json-lines > rate.jsonl",
                      "ualdbg watch -- ./server --port 8080           run it under the agent and watch",
                      "ualdbg watch --top 5 --interval 2 -- ./bench")
    wraps = True

    def prepare_parser(self, w: argparse.ArgumentParser) -> None:
        w.add_argument("--pid", type=positive, default=None, metavar="PID", help="watch this running process (the agent injected into it, else gdb)")
        w.add_argument("--duration", type=seconds, default=None, metavar="S", help="stop after S seconds")
        w.add_argument("--interval", type=seconds, default=1.0, metavar="S", help="seconds between refreshes (default 1)")
        w.add_argument("--top", type=positive, default=10, metavar="N", help="sites shown (default 10)")
        w.add_argument("--json-lines", action="store_true", help="one JSON object per interval (no table)")
        w.add_argument("--json", metavar="FILE", help="write the final JSON document to FILE (fd:N: to descriptor N, "
                       "as for trace)")
        add_format_arg(w, to_path=True)
        w.add_argument("--no-patch", action="store_true", help="-- PROG: the agent never patches: one trap and one "
                       "record per fault")
        add_scope_args(w)
        add_buffer_arg(w, 100_000)
        w.add_argument("--log-file", metavar="FILE", default=None, help="write the report there instead of stderr")
        w.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """`ualdbg watch`: live rates while tracing (ualdbg.cli.watch), then the usual summary."""
        import threading

        from .watch import PROGRAM_KEYS, AgentSampler, Display, Keys, LiveResolver, ProgramOutput

        if (args.pid is None) == (not args.program or args.program == ["--"]):
            raise ToolError("ualdbg watch: give --pid PID or -- PROG ARGS (one of them)")
        json_apart(args)
        check_outputs(outputs(args), reads(args))
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

            program = program_of(args)
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
            result = RunResult(res.result, res.exit_status, res.exit_signal, "")
        from ..render.textreport import report_items

        trace = result.result
        if args.json:
            write_trace(trace, args.json, FORMATS["json"], "the JSON output")
        write_formats(args, trace)
        out = sink(args)
        for item in report_items(trace, "pc", programs=False, costs=costs_for(trace)):
            out.print(item)
        if args.pid is not None and trace.attached is not None and trace.attached.detached:
            out.print(f"ualdbg: detached from process {args.pid} ({trace.attached.ended_by}); no thread has AC set")
        out.close()
        if args.pid is not None:
            return EXIT_CLEAN  # the process is not ualdbg's child: its status is in the JSON
        return pass_exit_status(result.exit_status, result.exit_signal)  # as `trace -- PROG` does
