"""What the in-process agent asks of lldb (engines/agentlink.py, AgentHost): the environment of
the next `process launch` (target.env-vars; lldb launches the program itself, no shell in
between) and SIGBUS passed to the program without a stop; breakpoints that never stop, for the
threads it arms once they are out of pthread_create or born, and threads kept stopped through
its load (engines/threadbirth.py)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence

import lldb  # type: ignore[import-not-found]

from ...core.target import Target
from ...engines.agentlink import handler_step_end, returning_from_fault
from .breakpoints import Breakpoints
from .faultstep import step_back_to_the_line, step_through_handler
from .interp import command, warn
from .signals import SigbusHandling
from .target import LldbTarget

_ROW = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)


class HandlerStepHook:
    """`target stop-hook add -P ...HandlerStepHook`, while the agent traces: a user's instruction
    step over an instruction that faults ends in the agent's SIGBUS handler under lldb (the
    kernel reports the step at the handler's first instruction, and lldb stops there), where
    gdb's ends after the instruction. Such a step goes on: the handler counts the fault, the
    instruction runs, and the step ends at its successor (engines/agentlink.handler_step_end).
    A line step (`next`, `step`) lldb's plan left at the signal return instead goes back to the
    function it was stepping in and over the rest of its line (faultstep.BackToTheLine). Every
    other stop is the user's (True)."""

    def __init__(self, target: lldb.SBTarget, extra_args: object, internal_dict: object) -> None:
        self.last: dict[int, int] = {}  # thread -> its PC at the last stop the user saw (the hook's, or now)
        process = target.GetProcess()
        if process.IsValid() and process.GetState() == lldb.eStateStopped:
            self._note(process)

    def _note(self, process: lldb.SBProcess) -> None:
        """Every thread's PC now: where a step the user starts from this stop starts (any thread
        they select; a stop hook is called with the selected one only)."""
        self.last = {int(t.GetThreadID()): int(t.GetFrameAtIndex(0).GetPC()) for t in process}

    def handle_stop(self, exe_ctx: lldb.SBExecutionContext, stream: lldb.SBStream) -> bool:
        thread = exe_ctx.GetThread()
        tid, pc = int(thread.GetThreadID()), int(thread.GetFrameAtIndex(0).GetPC())
        try:  # (the stop's, of the selected thread)
            if thread.GetStopReason() in (lldb.eStopReasonPlanComplete, lldb.eStopReasonTrace) and self._go_on(thread, tid, pc):
                return False  # on: the plan's stop is the step's
        except Exception as exc:
            warn(stream, f"stepping past the agent's handler: {exc}")
        self._note(thread.GetProcess())
        return True

    def _go_on(self, thread: lldb.SBThread, tid: int, pc: int) -> bool:
        target = LldbTarget(thread.GetProcess(), thread)
        to = handler_step_end(target, tid, pc)
        if to is not None:  # an instruction step
            what = (thread.GetStopDescription(64) or "").split(" (")[0] or "instruction step into"
            step_through_handler(thread, to, what)
            return True
        start = self.last.get(tid)
        if start is None or not returning_from_fault(target, tid, pc):
            return False
        # A line step: lldb's plan stepped out of the handler on its own and gave up at the
        # signal return. Back to the function the step started in, and on to the end of its line.
        address = lldb.SBAddress(start, thread.GetProcess().GetTarget())
        scope = address.GetFunction() if address.GetFunction().IsValid() else address.GetSymbol()
        entry = address.GetLineEntry()
        sbtarget = thread.GetProcess().GetTarget()
        fn = (scope.GetStartAddress().GetLoadAddress(sbtarget), scope.GetEndAddress().GetLoadAddress(sbtarget))
        line = ((entry.GetStartAddress().GetLoadAddress(sbtarget), entry.GetEndAddress().GetLoadAddress(sbtarget))
                if entry.IsValid() else (0, 0))
        if not scope.IsValid() or not fn[0] <= start < fn[1]:
            return False
        into = "step in" in (thread.GetStopDescription(128) or "")
        step_back_to_the_line(thread, fn, line, into)
        return True


class LldbAgentHost:
    """The agent's environment and signal settings in one lldb debugger."""

    def __init__(self, debugger: lldb.SBDebugger, sigbus: SigbusHandling, process: Callable[[], lldb.SBProcess],
                 installed: Callable[[], bool], breakpoints: Breakpoints,
                 target_of: Callable[[lldb.SBThread], Target]) -> None:
        self.debugger = debugger
        self.breakpoints = breakpoints
        self.target_of = target_of
        self.on_hit: Callable[[Target, int, int], None] | None = None
        self.in_callback = False
        self.sigbus = sigbus
        self.process = process
        self.installed = installed
        self.held: list[int] = []  # threads suspended by `hold`
        self.step_hook: tuple[lldb.SBTarget, int] | None = None  # HandlerStepHook's, while SIGBUS is passed

    def _env_vars(self) -> dict[str, str]:
        return dict(_ROW.findall(command(self.debugger, "settings show target.env-vars")))

    def launch_environment(self) -> dict[str, str]:
        own = self._env_vars()
        value = own.get("LD_PRELOAD", os.environ.get("LD_PRELOAD"))  # target.inherit-env: lldb's own
        return {"LD_PRELOAD": value} if value is not None else {}

    def set_launch_environment(self, values: Mapping[str, str | None]) -> None:
        have = self._env_vars()
        for name, value in values.items():
            if name in have:
                command(self.debugger, f"settings remove target.env-vars {name}")
            if value is not None and not (name == "LD_PRELOAD" and value == os.environ.get("LD_PRELOAD")
                                          and name not in have):
                command(self.debugger, f'settings append target.env-vars "{name}={value}"')

    def pass_sigbus(self, on: bool) -> None:
        """SIGBUS passed to the agent, and a user's step into its handler taken past the
        instruction (HandlerStepHook) while it is."""
        self.sigbus.pass_through(self.process(), on, self.installed())
        if on and self.step_hook is None:
            target = self.debugger.GetSelectedTarget()
            out = command(self.debugger, f"target stop-hook add -P {__name__}.HandlerStepHook")
            m = re.search(r"#(\d+)", out)
            self.step_hook = (target, int(m.group(1))) if m else None
        elif not on and self.step_hook is not None:
            target, number = self.step_hook
            self.step_hook = None
            if target.IsValid() and target == self.debugger.GetSelectedTarget():
                try:
                    command(self.debugger, f"target stop-hook delete {number}")
                except RuntimeError:
                    pass

    WATCH = "watch_hit"  # breakpoints.watch_hit, the callback

    def watch_addresses(self, addrs: Sequence[int], on_hit: Callable[[Target, int, int], None]) -> None:
        self.unwatch_addresses()
        target = self.debugger.GetSelectedTarget()
        self.on_hit = on_hit
        try:
            for addr in addrs:
                bp = target.BreakpointCreateByAddress(addr)
                self.breakpoints.own(bp, self.WATCH)
                bp.SetAutoContinue(True)
        except RuntimeError:
            self.unwatch_addresses()
            raise

    def hold(self, tids: Sequence[int]) -> bool:
        """lldb keeps a suspended thread stopped through `continue` and its expression calls,
        with its thread plans kept for later (SBThread.Suspend)."""
        process = self.process()
        for tid in self.held:
            thread = process.GetThreadByID(tid)
            if thread.IsValid():
                thread.Resume()
        self.held = []
        for tid in tids:
            thread = process.GetThreadByID(tid)
            if not thread.IsValid() or not thread.Suspend():
                self.hold([])
                return False
            self.held.append(tid)
        return True

    def unwatch_addresses(self) -> None:
        """Deleted now from a command. From a callback (lldb deciding a stop) they stay, doing
        nothing, until the next command or stop (sweep): a breakpoint disabled inside its own
        callback made lldb report the stop (1 run in 8 of break, off, trace start)."""
        self.on_hit = None
        if not self.in_callback:
            self.sweep()

    def sweep(self) -> None:
        """Delete the watch's breakpoints once it is over (a command or a stop: never inside a
        breakpoint's callback)."""
        if self.on_hit is not None or self.in_callback:
            return
        target = self.debugger.GetSelectedTarget()
        for bp in self.breakpoints.ours(target, self.WATCH):
            target.BreakpointDelete(bp.GetID())

    def hit(self, thread: lldb.SBThread, addr: int) -> None:
        """A thread reached a watched address (breakpoints.watch_hit)."""
        if self.on_hit is None:
            return
        self.in_callback = True
        try:
            self.on_hit(self.target_of(thread), int(thread.GetThreadID()), addr)
        finally:
            self.in_callback = False
