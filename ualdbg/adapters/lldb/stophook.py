"""The stop decisions inside lldb, which has no conditional signal catchpoints: a scripted stop
hook sees every stop that reaches lldb's command level (`process handle SIGBUS -s true -p false
-n false`: every SIGBUS) and auto-continues the ones that must not stop. The step engine's break
reports come first; then `_STOP_RULES`, one table by the thread's stop reason, decide; an
alignment fault goes to the session's Stops (engines/stops.py)."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...engines.faultpath import Decision
from ...engines.session import Session
from ...isa.arch import SIGBUS
from ...render.report import break_text
from .breakpoints import Breakpoints
from .faultstep import FaultSteps
from .interp import warn
from .registry import HOOKS
from .signals import SigbusHandling
from .sitemap import after_our_breakpoint
from .stepping import LldbStepControl
from .target import LldbTarget


class StopHook:
    """`target stop-hook add -P ...StopHook`: sees every stop that reaches lldb's command level;
    returning False auto-continues it."""

    def __init__(self, target: lldb.SBTarget, extra_args: Any, internal_dict: Any) -> None:
        self.debugger_id = target.GetDebugger().GetID()

    def handle_stop(self, exe_ctx: lldb.SBExecutionContext, stream: lldb.SBStream) -> bool:
        hooks = HOOKS.get(self.debugger_id)
        if hooks is None or not hooks.installed:
            return True
        try:
            return hooks.on_stop(exe_ctx.GetThread(), stream)
        except Exception as exc:
            warn(stream, f"stop handler: {exc}")
            return True


class Stop:
    """One thread's stop as the stop rules read it (each SB call made once)."""

    def __init__(self, process: lldb.SBProcess, thread: lldb.SBThread, stream: lldb.SBStream) -> None:
        self.process = process
        self.thread = thread
        self.stream = stream
        self.tid = int(thread.GetThreadID())

    @property
    def pc(self) -> int:
        return int(self.thread.GetFrameAtIndex(0).GetPC())

    @property
    def signo(self) -> int:
        return int(self.thread.GetStopReasonDataAtIndex(0))


class StopRules:
    """Whether one stop of one debugger's process stays (True) or is auto-continued."""

    def __init__(self, session: Session, debugger: lldb.SBDebugger, breakpoints: Breakpoints, sigbus: SigbusHandling,
                 faultsteps: FaultSteps, step_control: LldbStepControl,
                 fault_target: Callable[[lldb.SBProcess, lldb.SBThread | None], LldbTarget]) -> None:
        self.session = session
        self.debugger = debugger
        self.breakpoints = breakpoints
        self.sigbus = sigbus
        self.faultsteps = faultsteps
        self.step_control = step_control
        self.fault_target = fault_target  # the Target the trap engine steps faults over with

    def decide(self, st: Stop) -> bool:
        reason = st.thread.GetStopReason()
        step = self.session.step
        report = self._report(st) if step.enabled else None
        if not report and reason == lldb.eStopReasonBreakpoint and step.enabled and self.step_control.is_ours(st.thread):
            # An entry or return breakpoint of the step engine: it decides, like a callback.
            if not self.step_control.on_breakpoint(st.thread):
                return False
            report = self._report(st)
        if report:  # the step engine stopped before an offending instruction
            st.stream.Print(report)
            return True
        for applies, verdict in _STOP_RULES.get(reason, ()):
            if applies(self, st):
                return verdict(self, st)
        return True  # the user's breakpoints, steps, signals: lldb's business

    def _report(self, st: Stop) -> str | None:
        """The break report a STOP of this thread holds (Stops.take_report), once."""
        color = bool(self.debugger.GetUseColor()) and "NO_COLOR" not in os.environ
        return break_text(self.session.stops.take_report(st.tid), color)

    # -- the stop rules' tests and verdicts (_STOP_RULES) -----------------------------------------
    def _scope_stepping(self, st: Stop) -> bool:
        """A step its ScopeStep plan has decided; another thread made the stop public."""
        return self.step_control.stepping(st.thread)

    def _fault_stepped_trap(self, st: Stop) -> bool:
        """The trap of a FaultStep, shown again because the thread has not run since."""
        return self.faultsteps.just_stepped(st.tid, st.pc)

    def _fault_run_to(self, st: Stop) -> bool:
        """The internal breakpoint of a FaultStep that ran its thread to the instruction's
        successor (engines/stepends.py), shown because another thread stopped meanwhile (lldb
        names it "breakpoint -N which has been deleted", or "breakpoint site N which has been
        deleted"); a user's breakpoint there stays."""
        number = int(st.thread.GetStopReasonDataAtIndex(0))
        users = number > 0 and st.process.GetTarget().FindBreakpointByID(number).IsValid()
        return not users and self.faultsteps.just_stepped(st.tid, st.pc)

    def _past_our_breakpoint(self, st: Stop) -> bool:
        """lldb single-stepped the instruction under one of our breakpoints to get past it (the
        `syscall` of clone3, say), and another thread stopped meanwhile."""
        return after_our_breakpoint(st.thread)

    def _fault_being_stepped(self, st: Stop) -> bool:
        """The SIGBUS its FaultStep plan is about to step over, not a new one."""
        return st.signo == SIGBUS and self.faultsteps.being_stepped(st.tid, st.pc)

    def _our_breakpoint_stop(self, st: Stop) -> bool:
        """Our callbacks said continue; another thread made this stop public."""
        return self.breakpoints.is_ours(st.process.GetTarget(), st.thread)

    def _our_plan_complete(self, st: Stop) -> bool:
        """A FaultStep that completed while another thread stopped."""
        return (st.thread.GetStopDescription(64) or "").startswith("ualdbg:")

    def _programs_signal(self, st: Stop) -> bool:
        """The program's other signals: as lldb's `process handle` says (this may be an old stop
        of a thread that was held while another one ran, shown again)."""
        return bool(st.process.GetUnixSignals().GetShouldStop(st.signo))

    def _on_exec(self, st: Stop) -> bool:
        """AC died with the old image (PLATFORM.md); main re-resolves in the new one. The stop
        stays: lldb stops at exec by default (target.process.stop-on-exec)."""
        lifecycle = self.session.lifecycle
        lifecycle.new_process(int(st.process.GetProcessID()))
        lifecycle.arm_at_start(self.fault_target(st.process, st.thread))
        return True

    def _on_sigbus(self, st: Stop) -> bool:
        process, thread = st.process, st.thread
        target = self.fault_target(process, thread)
        info = target.siginfo()
        if info is not None and info.signo != SIGBUS:
            # lldb keeps showing a thread's SIGBUS after the thread has moved on (it was
            # suspended while another thread ran); the kernel's siginfo tells the truth.
            return False
        decision = self.session.stops.fault(target, info) if info is not None else Decision.NOT_OURS
        if decision is Decision.NOT_OURS:
            pas, stop, notify = self.sigbus.users()
            self.sigbus.suppress(process, not pas)
            if notify and not stop:
                st.stream.Print(f"Process {process.GetProcessID()} received signal SIGBUS (thread {thread.GetThreadID()}): not an alignment check, {'passed' if pas else 'not passed'}\n")
            return stop
        self.sigbus.suppress(process, True)
        report = self._report(st)
        if report:
            st.stream.Print(report)
        return decision is Decision.STOP


def _always(rules: StopRules, st: Stop) -> bool:
    return True


def _go_on(rules: StopRules, st: Stop) -> bool:
    """Auto-continue: another thread's stop (or another call of this hook) decides."""
    return False


_Rule = tuple[Callable[[StopRules, Stop], bool], Callable[[StopRules, Stop], bool]]
# The stop hook's decision per stop reason: the first rule whose test applies gives the verdict
# (True keeps the stop); a reason without a rule that applies keeps it.
_STOP_RULES: dict[int, tuple[_Rule, ...]] = {
    lldb.eStopReasonTrace: ((StopRules._scope_stepping, _go_on),
                            (StopRules._fault_stepped_trap, _go_on),
                            (StopRules._past_our_breakpoint, _go_on)),
    lldb.eStopReasonNone: ((_always, _go_on),),  # another thread's stop: that thread's call decides
    lldb.eStopReasonInvalid: ((_always, _go_on),),
    lldb.eStopReasonSignal: ((StopRules._fault_being_stepped, _go_on),
                             (lambda rules, st: st.signo == SIGBUS, StopRules._on_sigbus),
                             (_always, StopRules._programs_signal)),
    lldb.eStopReasonBreakpoint: ((StopRules._our_breakpoint_stop, _go_on),
                                 (StopRules._fault_run_to, _go_on)),
    lldb.eStopReasonPlanComplete: ((StopRules._our_plan_complete, _go_on),),
    lldb.eStopReasonExec: ((_always, StopRules._on_exec),),
}
