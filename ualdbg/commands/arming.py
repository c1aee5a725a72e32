"""`ualdbg break`, `ualdbg off`, `ualdbg status`, `ualdbg config`: arming and its state."""
from __future__ import annotations

import argparse

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.settings import SETTINGS
from ..core.target import LiveThreads, offers
from ..engines.modulescope import Scope
from ..engines.scope import ScopeError
from ..engines.step import ScopeRequest
from ..isa.alignment import ac_rules
from ..isa.arch import trap_flags
from .options import DEBUGGER_ENGINES, add_engine_arg, add_scope_args, add_step_args, step_wanted
from .registry import Host, LaunchSource, Output, Parser, Runner, UsageError, command


def apply_scope(host: Host, args: argparse.Namespace) -> None:
    s = host.session
    s.mode.at = args.at or s.config["at"]
    modules = s.scope.modules
    if args.module:
        modules = tuple(dict.fromkeys(modules + tuple(args.module)))
    s.rules.use_scope(Scope(bool(args.all_modules if args.all_modules is not None else s.config["all-modules"]), modules))


def check_engine_args(host: Host, args: argparse.Namespace, verb: str) -> None:
    """Step options only with --engine step; one engine at a time."""
    if args.engine != "step" and step_wanted(args):
        raise UsageError(f"ualdbg {verb}: --in, --range, --until-return, --everywhere and --policy need --engine step")
    if args.engine != "step" and host.session.step.enabled:
        raise UsageError(f"ualdbg {verb}: the step engine is armed; add --engine step, or `ualdbg off` first")


def arm_step(host: Host, args: argparse.Namespace, armed_before: bool) -> list[str]:
    """Configure the step engine and arm it now (stopped) or at the arm point of the next run."""
    s = host.session
    if s.engine.active or (armed_before and not s.step.enabled):
        raise UsageError("ualdbg: the trap engine is armed; `ualdbg off` first to switch to --engine step")
    modes = sum((bool(args.in_ or args.range), bool(args.until_return), bool(args.everywhere)))
    if modes == 0:
        raise UsageError("ualdbg: --engine step needs a scope: --in FUNC, --range LO,HI, --until-return or --everywhere")
    if modes > 1:
        raise UsageError("ualdbg: give one scope: --in/--range, --until-return or --everywhere")
    target = host.target()
    if args.until_return and target is None:
        raise UsageError("ualdbg: --until-return needs a stopped program (the current function is the scope)")
    request = ScopeRequest(tuple(args.in_), tuple(args.range), bool(args.everywhere), bool(args.until_return))
    try:
        s.step.configure(request, args.policy, target.arch() if target is not None else "x86_64")
        host.install()
        if target is None:
            s.step.check_static(s.program.path)
            return [f"step engine armed at {s.mode.at} of the next run: {s.step.describe()}"]
        s.lifecycle.arm_now(target, host.step_control())
    except ScopeError as exc:
        s.step.enabled = False
        raise UsageError(f"ualdbg: {exc}") from None
    return [f"step engine armed now: {s.step.describe()}; {len(s.step.threads)} thread(s) stepping"]


def program_path(host: Host) -> str | None:
    """The program the next `run` starts (or that runs), as far as the debugger knows it."""
    if host.session.program.path:
        return host.session.program.path
    if isinstance(host, LaunchSource):
        try:
            return host.launch_info()[0]
        except UsageError:
            return None
    return None


def start_agent(host: Host, patch_after: int = 2) -> list[str]:
    """`trace start` through the in-process agent (engines/agentlink.py): loaded at the next run,
    or injected now. After `break`, the debugger's engine is disarmed first (no more stops; the
    faults it recorded stay, the thread stopped at one runs it unchecked)."""
    from ..engines.agent import AgentRun, AgentUnavailable

    s = host.session
    target = host.target()
    if s.agent.live:
        return [f"ualdbg: tracing already, through {s.agent.describe()}"]
    said = []
    if s.mode.breaking or s.engine.active or s.step.enabled:
        said.append("ualdbg: no longer breaking: faults are recorded without stopping from now on")
        s.mode.breaking = False
        s.lifecycle.disarm(target)
        host.uninstall()
    run = AgentRun([program_path(host) or ""], at=s.mode.at, all_modules=s.scope.all_modules,
                   modules=list(s.scope.modules), buffer=s.buffer.capacity, patch_after=patch_after)
    try:
        if target is None:
            s.agent.prepare_launch(host.agent_host(), run)
            how = "loaded at the next run"
        else:
            later = host.settle_faults()
            done = s.agent.inject(host.agent_host(), target, run, later)
            how = (f"injected now, {len(done.armed)} thread(s) armed" + (f", {len(later)} once past their fault" if later else "")
                   + (f", {len(done.later)} once out of pthread_create or started" if done.later else ""))
            said += done.notes()
    except (AgentUnavailable, RuntimeError, OSError) as exc:
        raise UsageError(f"ualdbg: the agent could not start: {exc}; `ualdbg trace start --engine trap` records "
                         "in the debugger") from None
    s.mode.tracing = s.mode.agent = True
    return said + [f"ualdbg: tracing unaligned accesses in {s.scope.describe()} through the in-process agent "
                   f"({how}; the debugger passes SIGBUS to it without stopping)"]


def release_agent(host: Host) -> list[str]:
    """The agent out of the program (`off`, `trace stop`, `break`): its buffers stay readable."""
    s = host.session
    if not s.agent.live:
        return []
    said = s.agent.release(host.agent_host(), host.target())
    s.mode.agent = False
    return [said] if said else []


def arm(host: Host) -> list[str]:
    """Install the hooks and, when a process is stopped, arm its threads right now."""
    host.install()
    target = host.target()
    if target is None:
        return [f"armed at {host.session.mode.at} of the next run"]
    later = host.settle_faults()
    host.session.lifecycle.arm_now(target, later=later)
    e = host.session.engine
    deferred = e.fixup.arming_deferred() if e.fixup is not None else None
    if deferred:
        return [f"armed at {host.session.mode.at}: {deferred}"]
    return [f"armed now: {len(e.armed)} thread(s) with {e.mechanism}"
            + (f"; {len(e.sigbus_blocked)} kept disarmed (SIGBUS blocked)" if e.sigbus_blocked else "")]


@command("break", description="Stop at each unaligned data access (gdb: also `catch unaligned`).",
         epilog="""Reports the faulting virtual address, PC, size, read/write, function+offset,
module and source line, stopped AT the faulting instruction; continue/step/next resume normally.

examples:
  ualdbg break                    arm at main of the next run (or now, if stopped)
  ualdbg break --at start         arm from the first instruction (the loader too)
  ualdbg break --all-modules      also stop in ld.so and system libraries
  ualdbg break --module libfoo.so
  ualdbg break --engine step --in parse_header     single-step it, stop BEFORE the access
  ualdbg break --engine step --range 0x401000,0x401200 --policy natural
""")
def _break(p: Parser) -> Runner:
    add_engine_arg(p, DEBUGGER_ENGINES, "trap")
    add_scope_args(p)
    add_step_args(p, until_return=True)

    def run(host: Host, args: argparse.Namespace) -> Output:
        check_engine_args(host, args, "break")
        apply_scope(host, args)
        # Tracing through the agent: it goes, the debugger's engine traces on and stops.
        said = release_agent(host)
        mode = host.session.mode
        was, before = mode.breaking, mode.armed
        mode.breaking = True
        try:
            out = arm_step(host, args, before) if args.engine == "step" else arm(host)
        except Exception:
            mode.breaking = was
            raise
        return said + [f"ualdbg: breaking at unaligned accesses in {host.session.scope.describe()}; " + out[0]]

    return run


@command("off", description="Disarm everything: clear AC in every thread, restore signal settings.",
         examples=["ualdbg off                       after `ualdbg break` or `trace start`; the program goes on unchecked"])
def _off(p: Parser) -> Runner:
    def run(host: Host, args: argparse.Namespace) -> Output:
        s = host.session
        said = release_agent(host)
        s.mode.breaking = s.mode.tracing = False
        s.buffer.stopped_at = s.buffer.stopped_at or None
        s.lifecycle.disarm(host.target())
        host.uninstall()
        if s.engine.fixup is not None:
            return said + [f"ualdbg: off; {s.engine.fixup.off_summary()}, signal settings restored"]
        return said + ["ualdbg: off; no thread has AC set, signal settings restored"]

    return run


@command("status", description="Say what is armed, in which threads, by which mechanism.",
         examples=["ualdbg status                    mode, engine, scope, each thread's AC flag, the trace buffer's counts"])
def _status(p: Parser) -> Runner:
    def run(host: Host, args: argparse.Namespace) -> Output:
        s, e = host.session, host.session.engine
        mode = " and ".join(m for m, on in (("breaking", s.mode.breaking), ("tracing", s.mode.tracing)) if on) or "off"
        lines = [f"ualdbg {s.version} in {s.debugger}: {mode}"]
        if e.fixup is None:  # x86: which accesses raise #AC here (a strict CPU has its own trap)
            lines.append(f"  #AC rule: {ac_rules().describe()}")
        if s.agent.live:
            lines.append(f"  engine: agent: {s.agent.describe()}")
            lines.append(f"  arm point: {s.mode.at}; scope: {s.scope.describe()}")
        if s.agent.note:
            lines.append(f"  {s.agent.note}")
        if s.mode.agent:
            pass
        elif s.mode.armed and s.step.enabled:
            lines.append(f"  engine: step; scope: {s.step.describe()}")
            lines.append(f"  steps: {s.step.stats.line()}" + (f"; {s.step.ended}" if s.step.ended else ""))
        elif s.mode.armed and e.fixup is not None:
            lines.append(f"  mechanism: {e.mechanism}")
            lines.append(f"  arm point: {s.mode.at}; scope: {s.scope.describe()}")
        elif s.mode.armed:
            lines.append("  engine: trap (in the debugger: one stop per fault)")
            lines.append(f"  mechanism: {e.mechanism} (x86-64: prctl(PR_SET_UNALIGN) returns EINVAL, so the alignment-check flag is used)")
            lines.append(f"  arm point: {s.mode.at}; scope: {s.scope.describe()}")
        target = host.target()
        if target is not None and target.pid() is not None and e.fixup is not None:
            out: Output = ["\n".join(lines + e.fixup.status_lines())]  # no flag to show per thread
        elif target is not None and target.pid() is not None:
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for col in ("thread", "AC", "state"):
                table.add_column(col)
            t = trap_flags(s.arch_of(target).name)
            for tid in target.threads():
                ac = t is not None and bool(target.read_register(t.register, tid) & t.ac_bit)
                state = ("armed by the agent" if s.mode.agent and ac else
                         "single-stepped by the step engine (in scope)" if tid in s.step.threads else
                         "stepping over a fault: AC returns after this instruction" if tid in e.pending else
                         "armed" if tid in e.armed else
                         "disarmed: SIGBUS blocked" if tid in e.sigbus_blocked else
                         "in clone/fork" if tid in e.in_clone else "not armed")
                table.add_row(Text(str(tid)), Text("set" if ac else "clear"), Text(state))
            live = target.live_threads() if offers(target, LiveThreads) else target.threads()
            for tid in sorted(set(live) - set(target.threads())):  # gdb's non-stop mode
                table.add_row(Text(str(tid)), Text("?"), Text("running (non-stop): registers unreadable"))
            lines.append(f"  process {target.pid()}:")
            out = ["\n".join(lines), table]
        else:
            out = ["\n".join(lines + ["  no process"])]
        b = s.buffer
        if s.agent.armings:
            total, ignored = s.agent.totals()
            out.append(f"  agent's buffers: {total} faults in scope, {ignored} traps out of scope (live counters)")
        if not s.agent.armings or b.total or b.ignored:
            out.append(f"  trace buffer{' (in the debugger)' if s.agent.armings else ''}: {b.total} faults in scope, "
                       f"{b.ignored} ignored, {len(b.records)}/{b.capacity} records kept, {b.dropped} dropped")
        return out

    return run


@command("config", description="Show or change a setting: `ualdbg config NAME VALUE` (gdb: also `set ualdbg NAME VALUE`).",
         epilog="settings:\n" + "\n".join(f"  {s.name:<12} {s.doc} (default {s.default})" for s in SETTINGS.values()),
         examples=["ualdbg config                    every setting and its value",
                   "ualdbg config buffer 1000        keep 1000 records (counts stay exact)",
                   "ualdbg config at start           arm at the first instruction (gdb: set ualdbg at start)"])
def _config(p: Parser) -> Runner:
    p.add_argument("name", nargs="?")
    p.add_argument("value", nargs="?")

    def run(host: Host, args: argparse.Namespace) -> Output:
        cfg = host.session.config
        if args.name is None:
            return [f"{n} = {cfg.format(n)}" for n in SETTINGS]
        if args.value is None:
            if args.name not in SETTINGS:
                raise UsageError(f"no setting {args.name!r}; settings: {', '.join(SETTINGS)}")
            return [f"{args.name} = {cfg.format(args.name)}"]
        try:
            cfg.set(args.name, args.value)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.name == "buffer":
            host.session.buffer.resize(cfg["buffer"])
        return [f"{args.name} = {cfg.format(args.name)}"]

    return run
