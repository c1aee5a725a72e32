"""`ualdbg trace start|stop|show|clear|save`: the FLT-style trace buffer in a debugger."""
from __future__ import annotations

import argparse

from ..isa.costclass import costs_for
from ..render.formats import FORMATS, format_for, save
from ..render.tables import GROUPS, header, records_table, summary_table
from .argtypes import positive
from .arming import apply_scope, arm, arm_step, check_engine_args, program_path, release_agent, start_agent
from .options import (
    TRACE_ENGINES,
    add_buffer_arg,
    add_engine_arg,
    add_format_arg,
    add_patch_args,
    add_scope_args,
    add_step_args,
)
from .registry import Host, Output, Parser, Runner, UsageError, command


@command("trace", "start", description="Record every unaligned access without stopping.",
         epilog="""By default the in-process agent records (the one `ualdbg trace` runs from the shell):
loaded at the next `run`, or injected now into a stopped program; the debugger passes SIGBUS to it
without stopping, so a fault costs one signal and a hot site, once patched (--patch-after), about
nothing; records are kept for the faults that trapped, patched ones are counted. `--engine trap`
records in the debugger instead (one debugger stop per fault, each decoded and recorded). Where
the agent cannot run (a static or 32-bit program, qemu, seccomp, gdb non-stop with threads
running) the trap engine records, and `ualdbg status` says which. After `ualdbg break`, `trace
start` stops breaking (the faults already recorded stay); `ualdbg break` while tracing stops at
the next fault and goes on counting (in the debugger). `ualdbg off` disarms: no thread keeps AC,
the program's own SIGBUS handling is as it was.

examples:
  ualdbg trace start
  ualdbg trace start --buffer 1000 --all-modules
  ualdbg trace start --no-patch                    one trap and one record per fault
  ualdbg trace start --engine trap                 record in the debugger, a stop per fault
  ualdbg trace start --engine step --in main --policy cacheline""")
def _start(p: Parser) -> Runner:
    add_buffer_arg(p, None)
    add_engine_arg(p, TRACE_ENGINES, "agent")
    add_patch_args(p)
    add_scope_args(p)
    add_step_args(p, until_return=True)

    def run(host: Host, args: argparse.Namespace) -> Output:
        s = host.session
        check_engine_args(host, args, "trace start")
        apply_scope(host, args)
        if args.buffer:
            s.config.set("buffer", str(args.buffer))
            s.buffer.resize(args.buffer)
        if not s.mode.armed:
            s.buffer.clear()
            s.agent.clear()
        s.buffer.stopped_at = None
        note: list[str] = []
        if args.engine == "agent":
            why = s.agent.problem(program_path(host), host.target())
            if why is None:
                return start_agent(host, 0 if args.no_patch else args.patch_after)
            note = [f"ualdbg: the agent cannot trace here ({why}): the trap engine records in the debugger"]
            args.engine = "trap"
        was, before, breaking = s.mode.tracing, s.mode.armed, s.mode.breaking
        if breaking:  # as through the agent: after `break`, `trace start` records without stopping
            s.mode.breaking = False
            note.append("ualdbg: no longer breaking: faults are recorded without stopping from now on")
        s.mode.tracing = True
        try:
            out = arm_step(host, args, before) if args.engine == "step" else arm(host)
        except Exception:
            s.mode.tracing, s.mode.breaking = was, breaking
            raise
        return note + [f"ualdbg: tracing unaligned accesses in {s.scope.describe()} (ring of {s.buffer.capacity}); "
                       + out[0]]

    return run


@command("trace", "stop", description="Stop recording (a `ualdbg break` stays armed).",
         examples=["ualdbg trace stop                then `ualdbg trace show --summary`"])
def _stop(p: Parser) -> Runner:
    def run(host: Host, args: argparse.Namespace) -> Output:
        s = host.session
        said = release_agent(host)
        s.mode.tracing = False
        s.buffer.stopped_at = s.buffer.started_at + s.buffer.now()
        if not s.mode.breaking:
            s.lifecycle.disarm(host.target())
            host.uninstall()
        return said + [f"ualdbg: trace stopped; {s.result().faults_total} faults recorded"]

    return run


@command("trace", "clear", description="Empty the trace buffer and zero its counters.",
         examples=["ualdbg trace clear               start counting afresh (tracing goes on if it was on)"])
def _clear(p: Parser) -> Runner:
    def run(host: Host, args: argparse.Namespace) -> Output:
        if host.session.agent.live:
            raise UsageError("ualdbg: the agent's counters cannot be zeroed while it traces: "
                             "`ualdbg off`, then `ualdbg trace start` starts afresh")
        host.session.buffer.clear()
        host.session.agent.clear()
        return ["ualdbg: trace buffer cleared"]

    return run


@command("trace", "show", description="Show the trace records, or with --summary the counts per exception PC.",
         epilog="examples:\n  ualdbg trace show --limit 20\n  ualdbg trace show --summary --by line\n  ualdbg trace show --json out.json")
def _show(p: Parser) -> Runner:
    p.add_argument("--summary", action="store_true", help="counts per exception PC (or group), hottest first")
    p.add_argument("--by", choices=GROUPS, default="pc", help="group the summary by pc, line, function or module")
    p.add_argument("--limit", type=positive, default=None, help="only the newest N records (with --summary or --by: "
                   "the hottest N rows)")
    p.add_argument("--thread", type=int, default=None, metavar="TID", help="only records of this thread")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the JSON document to FILE")

    def run(host: Host, args: argparse.Namespace) -> Output:
        result = host.session.result()
        if args.json:
            save(result, args.json, FORMATS["json"])
        out: Output = [header(result)]
        if args.summary or args.by != "pc":
            out.append(summary_table(result, args.by, costs_for(result), limit=args.limit))
        else:
            out.append(records_table(result, args.limit, args.thread))
        return out

    return run


@command("trace", "save", description="Write the trace to FILE: versioned JSON (the CLI's format), or any format "
                                       "of the shell's --format, named by --format or by FILE's suffix.",
         examples=["ualdbg trace save run.json       then, from the shell: ualdbg report run.json --summary",
                   "ualdbg trace save run.sarif      SARIF 2.1.0 (the suffix names the format)",
                   "ualdbg trace save run.log --format text"])
def _save(p: Parser) -> Runner:
    p.add_argument("file")
    add_format_arg(p, to_path=False)

    def run(host: Host, args: argparse.Namespace) -> Output:
        result = host.session.result()
        try:
            save(result, args.file, args.format or format_for(args.file))
        except OSError as exc:
            raise UsageError(f"cannot write {args.file}: {exc.strerror}") from None
        return [f"ualdbg: {result.faults_total} faults saved to {args.file}"]

    return run
