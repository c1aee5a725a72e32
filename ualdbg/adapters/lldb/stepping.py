"""lldb's primitives for the step engine (engines/step.py). lldb 19 turns a single-step trap it
did not ask for into a visible stop, so a thread in scope is stepped by a scripted thread plan
(`ScopeStep`) whose `should_stop` asks the engine after each instruction. Scope entries and the
return addresses of calls out of the scope are plain breakpoints (no callback: lldb's generated
callback wrappers break when one is made inside another callback, and the arm point is one),
decided by the stop hook, which auto-continues them unless the engine stops there (break)."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...core.target import Target
from ...engines.session import Session
from ...engines.step import StepDecision
from .breakpoints import BP_NAME, Breakpoints
from .registry import HOOKS
from .target import LldbTarget

_THIS = __name__
BP_TAG = "step_point_hit"  # the name tag of our breakpoints (as Breakpoints.own gives its callbacks')


def _control_of(thread: lldb.SBThread) -> LldbStepControl | None:
    hooks = HOOKS.get(thread.GetProcess().GetTarget().GetDebugger().GetID())
    return hooks.step_control if hooks is not None else None


def split_function_warning(target: lldb.SBTarget) -> str | None:
    """lldb 19 takes a function gcc split into a hot and a cold part (libc's pthread_create and
    start_thread) for one function spanning both, and profiles all of that span again at every
    stop inside it (llvm-project pull request 111409, in lldb 20): a few steps per second there.
    The span comes from DWARF, so it happens with a separate debug file (libc6-dbg); one line
    when --everywhere meets one."""
    m = re.search(r"lldb version (\d+)", lldb.SBDebugger.GetVersionString() or "")
    if m is None or int(m.group(1)) >= 20:
        return None
    split = [module.GetFileSpec().GetFilename() for module in target.module_iter()
             if module.GetSymbolFileSpec().IsValid() and module.GetFileSpec().IsValid()
             and module.GetSymbolFileSpec().fullpath != module.GetFileSpec().fullpath
             and module.GetSymbolFileSpec().fullpath.endswith(".debug")]
    if not split:
        return None
    return (f"ualdbg: lldb {m.group(1)} single-steps a function split into hot and cold parts (libc's "
            "pthread_create, start_thread) at a few steps per second when its DWARF comes from a separate "
            f"debug file, as here for {', '.join(split)}; `settings set symbols.enable-external-lookup false` "
            "before the first `process launch` avoids it (docs/STEP.md)")


class ScopeStep:
    """Scripted thread plan: single-step the thread while the engine says STEP; complete on RUN
    (the thread leaves the scope); stay, and stop the process, on STOP (break), so `continue`
    goes on stepping. Other threads run while it steps (stop-others off): a thread waiting for
    a lock another thread holds must not hang."""

    def __init__(self, thread_plan: lldb.SBThreadPlan, args_data: Any, internal_dict: Any = None) -> None:
        self.plan = thread_plan
        self.thread = thread_plan.GetThread()
        self.tid = int(self.thread.GetThreadID())
        if hasattr(thread_plan, "SetStopOthers"):
            thread_plan.SetStopOthers(False)

    def _control(self) -> LldbStepControl | None:
        return _control_of(self.thread)

    def explains_stop(self, event: lldb.SBEvent) -> bool:
        # A single-step that lands on a breakpoint is still our step: lldb discards the plans
        # above the one that explains a stop, and stepping would end there.
        return self.thread.GetStopReason() in (lldb.eStopReasonTrace, lldb.eStopReasonBreakpoint)

    def should_stop(self, event: lldb.SBEvent) -> bool:
        control = self._control()
        if control is None or self.tid not in control.planned:
            self.plan.SetPlanComplete(True)
            return False
        decision = control.on_step(self.thread)
        users = self.thread.GetStopReason() == lldb.eStopReasonBreakpoint and not control.is_ours(self.thread, any_of_ours=True)
        if decision is StepDecision.RUN:
            control.planned.discard(self.tid)
            self.plan.SetPlanComplete(True)
            return users
        return users or decision is StepDecision.STOP  # the user's own breakpoint stops as always

    def should_step(self) -> bool:
        return True

    def is_stale(self) -> bool:
        control = self._control()
        if control is None or self.tid not in control.planned:
            self.plan.SetPlanComplete(True)
            return True
        return False

    def stop_description(self, stream: lldb.SBStream) -> None:
        stream.Print("ualdbg step engine: unaligned access ahead")


class LldbStepControl:
    """The StepControl of engines/step.py over lldb; its decisions are the session's Stops."""

    eager_returns = True  # see the module docstring
    steps_inherited = False  # a thread plan is no new thread's: Lifecycle.syscall adopts it at clone's exit

    def __init__(self, session: Session, sbtarget: Callable[[], lldb.SBTarget], breakpoints: Breakpoints) -> None:
        self.session = session
        self.sbtarget = sbtarget
        self.breakpoints = breakpoints
        self.planned: set[int] = set()  # threads with a live ScopeStep plan
        self.points: dict[int, int] = {}  # address -> breakpoint ID
        self.in_callback = False
        self.warned_split = False  # split_function_warning said once

    def _target(self, thread: lldb.SBThread) -> LldbTarget:
        return LldbTarget(thread.GetProcess(), thread)

    # -- StepControl -------------------------------------------------------------------------
    def step(self, target: Target, tid: int) -> None:
        if tid in self.planned:
            return
        assert isinstance(target, LldbTarget)
        thread = target.process.GetThreadByID(tid)
        err = thread.StepUsingScriptedThreadPlan(f"{_THIS}.ScopeStep", False)
        if not err.Success():
            raise RuntimeError(f"cannot queue single-stepping: {err.GetCString()}")
        self.planned.add(tid)

    def unstep(self, target: Target, tid: int) -> None:
        self.planned.discard(tid)  # the plan completes at its next question

    def break_at(self, addr: int) -> None:
        if addr in self.points:
            return
        if self.in_callback:
            return  # never while lldb decides a stop: the engine made them all at arm time
        target = self.sbtarget()
        bp = target.BreakpointCreateByAddress(addr)
        if not bp.IsValid():
            raise RuntimeError(f"lldb refused a breakpoint at {addr:#x}")
        for name in (BP_NAME, f"{BP_NAME}_{BP_TAG}"):
            bp.AddName(name)
        self.points[addr] = bp.GetID()

    def clear_breakpoints(self) -> None:
        target = self.sbtarget()
        for bp in self.breakpoints.ours(target, BP_TAG):
            target.BreakpointDelete(bp.GetID())
        self.points.clear()
        self.planned.clear()

    # -- events ------------------------------------------------------------------------------
    def is_ours(self, thread: lldb.SBThread, any_of_ours: bool = False) -> bool:
        """Whether the breakpoint of this stop is the step engine's (or any of ualdbg's)."""
        bp = thread.GetProcess().GetTarget().FindBreakpointByID(thread.GetStopReasonDataAtIndex(0))
        return bool(bp.IsValid() and bp.MatchesName(BP_NAME if any_of_ours else f"{BP_NAME}_{BP_TAG}"))

    @contextmanager
    def deciding(self) -> Iterator[None]:
        """While lldb decides a stop (a plan's question, a breakpoint's callback): no breakpoint
        is made then (`break_at`)."""
        self.in_callback = True
        try:
            yield
        finally:
            self.in_callback = False

    def on_step(self, thread: lldb.SBThread) -> StepDecision:
        with self.deciding():
            return self.session.stops.stepped(self._target(thread), int(thread.GetThreadID()))

    def on_breakpoint(self, thread: lldb.SBThread) -> bool:
        """An entry or return breakpoint of the step engine: True stops there (break)."""
        with self.deciding():
            decision = self.session.stops.step_breakpoint(self._target(thread), int(thread.GetThreadID()))
        return decision is StepDecision.STOP

    def stepping(self, thread: lldb.SBThread) -> bool:
        return int(thread.GetThreadID()) in self.planned

    def warn_split(self, target: Target) -> None:
        """When the lifecycle has armed the step engine (--everywhere): split_function_warning,
        once."""
        step = self.session.step
        if step.scope is not None and step.scope.kind == "everywhere" and not self.warned_split:
            assert isinstance(target, LldbTarget)
            said = split_function_warning(target.process.GetTarget())
            if said:
                self.warned_split = True
                import sys

                sys.stdout.write(said + "\n")
