"""The trap engine's faults that lldb steps over itself (engines/trap.py: a FaultStepper target):
a scripted thread plan single-steps the faulting instruction with AC clear, then the engine arms
the thread again; after `off`, the same plan takes a thread stopped at a fault past it. lldb 19
turns a single-step trap it did not ask for into a visible stop, so the engine's own TF path
cannot serve here. Where a single-step of an instruction was seen to land elsewhere
(engines/stepends.py), the plan runs the thread to the instruction's successor instead, by
lldb's run-to-address plan (a breakpoint there)."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...isa.arch import BUS_ADRALN, SIGBUS
from .registry import hooks_of_thread

TF = 0x100  # EFLAGS' trap flag
_THIS = __name__  # the plan is named to lldb by its dotted path from here


class FaultStep:
    """Scripted thread plan: single-step the thread once (AC is clear), then arm it again and
    let the plans below (the user's `next`, `finish`... or the base plan) carry on. The other
    threads wait for that one instruction, so no other stop can come between."""

    def __init__(self, thread_plan: lldb.SBThreadPlan, args_data: Any, internal_dict: Any = None) -> None:
        self.plan = thread_plan
        self.thread = thread_plan.GetThread()
        self.start_pc = self.thread.GetFrameAtIndex(0).GetPC()
        valid = args_data is not None and args_data.IsValid()
        leave = args_data.GetValueForKey("leave") if valid else None
        self.leave = bool(leave is not None and leave.IsValid() and leave.GetBooleanValue())
        to = args_data.GetValueForKey("to") if valid else None
        self.to = int(to.GetIntegerValue()) if to is not None and to.IsValid() else None
        self.finished = False
        self.run_to: lldb.SBThreadPlan | None = None
        if hasattr(thread_plan, "SetStopOthers"):
            thread_plan.SetStopOthers(True)
        if self.to is not None:
            # The instruction's one successor, by a breakpoint there (run-to-address): its
            # single-step was seen to land elsewhere.
            address = lldb.SBAddress(self.to, self.thread.GetProcess().GetTarget())
            error = lldb.SBError()
            self.run_to = thread_plan.QueueThreadPlanForRunToAddress(address, error)
            if not error.Success() or self.run_to is None or not self.run_to.IsValid():
                self.run_to = None  # single-step after all
            else:
                self.run_to.SetStopOthers(True)

    def _done(self) -> None:
        if self.finished:
            return
        self.finished = True
        hooks = hooks_of_thread(self.thread)
        if hooks is not None:
            if self.leave or hooks.turned_leave(int(self.thread.GetThreadID())):
                hooks.left(self.thread)
            else:
                hooks.fault_stepped(self.thread)
        self.plan.SetPlanComplete(True)

    def _stale_fault(self) -> bool:
        """The thread still shows the SIGBUS this plan steps over: it has not run yet (another
        thread's event stopped the process first)."""
        return bool(is_alignment_sigbus(self.thread) and self.thread.GetFrameAtIndex(0).GetPC() == self.start_pc)

    def explains_stop(self, event: lldb.SBEvent) -> bool:
        if self.run_to is not None:
            return bool(self.run_to.IsPlanComplete() or self._stale_fault())
        return bool(self.thread.GetStopReason() == lldb.eStopReasonTrace or self._stale_fault())

    def should_stop(self, event: lldb.SBEvent) -> bool:
        if self.run_to is not None:
            if self.run_to.IsPlanComplete():
                self._done()
        elif self.thread.GetStopReason() == lldb.eStopReasonTrace:
            self._done()
        return False

    def should_step(self) -> bool:
        return self.run_to is None

    def is_stale(self) -> bool:
        # Another plan (a user's step) ran the instruction, or a stop moved the thread: our step
        # is done either way; arm again and get discarded. Not a trace stop: that is our own
        # step ending, maybe in a signal handler (a SIGBUS the thread had pending when `off` or
        # `trace start` came, delivered during the step); discarded here, it was left to lldb,
        # which showed it as a stop (1 run in about 40 of break, trace start on threads).
        if self.thread.GetStopReason() == lldb.eStopReasonTrace:
            return False
        if self.thread.GetFrameAtIndex(0).GetPC() != self.start_pc:
            self._done()
            return True
        return False

    def stop_description(self, stream: lldb.SBStream) -> None:
        stream.Print("ualdbg: stepping over an unaligned access")


class ThroughHandler:
    """Scripted thread plan for a user's step that ended at the first instruction of the
    agent's SIGBUS handler (engines/agentlink.handler_step_end): the handler runs (it counts the
    fault), then the faulting instruction, and the step ends at its successor, as gdb's does
    (it steps over the handler of a signal it passes). The other threads wait."""

    def __init__(self, thread_plan: lldb.SBThreadPlan, args_data: Any, internal_dict: Any = None) -> None:
        self.plan = thread_plan
        self.thread = thread_plan.GetThread()
        self.to = int(args_data.GetValueForKey("to").GetIntegerValue())
        self.what = args_data.GetValueForKey("what").GetStringValue(64) or "instruction step into"
        if hasattr(thread_plan, "SetStopOthers"):
            thread_plan.SetStopOthers(True)
        error = lldb.SBError()
        address = lldb.SBAddress(self.to, self.thread.GetProcess().GetTarget())
        self.run_to = thread_plan.QueueThreadPlanForRunToAddress(address, error)
        if error.Success() and self.run_to is not None and self.run_to.IsValid():
            self.run_to.SetStopOthers(True)

    def _there(self) -> bool:
        return bool(self.thread.GetFrameAtIndex(0).GetPC() == self.to)

    def explains_stop(self, event: lldb.SBEvent) -> bool:
        # (at the successor: the run-to plan's breakpoint there)
        return self._there()

    def should_stop(self, event: lldb.SBEvent) -> bool:
        if self._there():
            self.plan.SetPlanComplete(True)
            return True
        return False

    def should_step(self) -> bool:
        return False

    def is_stale(self) -> bool:
        return False

    def stop_description(self, stream: lldb.SBStream) -> None:
        stream.Print(f"{self.what} (its unaligned access counted by the agent's SIGBUS handler)")


class BackToTheLine:
    """Scripted thread plan for a user's line step (`next`, `step`) over a line that faulted,
    which lldb's own plan left at the signal return (__restore_rt: "step over failed (Could not
    create return address breakpoint.)"; engines/agentlink.returning_from_fault): one
    instruction at a time through the sigreturn and the agent's copy of the instruction until
    the thread is back in the function it was stepping in, then the rest of its line stepped
    over (or into) as lldb's plan would have. The other threads wait."""

    MAX_STEPS = 4096  # the sigreturn and an out-of-line copy: a few dozen

    def __init__(self, thread_plan: lldb.SBThreadPlan, args_data: Any, internal_dict: Any = None) -> None:
        self.plan = thread_plan
        self.thread = thread_plan.GetThread()
        get = args_data.GetValueForKey
        self.fn = (int(get("fn_lo").GetIntegerValue()), int(get("fn_hi").GetIntegerValue()))
        self.line = (int(get("line_lo").GetIntegerValue()), int(get("line_hi").GetIntegerValue()))
        self.into = bool(get("into").GetBooleanValue())
        self.rest: lldb.SBThreadPlan | None = None
        self.steps = 0
        if hasattr(thread_plan, "SetStopOthers"):
            thread_plan.SetStopOthers(True)

    def explains_stop(self, event: lldb.SBEvent) -> bool:
        return self.rest is not None or self.thread.GetStopReason() == lldb.eStopReasonTrace

    def should_stop(self, event: lldb.SBEvent) -> bool:
        pc = int(self.thread.GetFrameAtIndex(0).GetPC())
        if self.rest is None and not self.fn[0] <= pc < self.fn[1] and self.steps < self.MAX_STEPS:
            self.steps += 1
            return False  # not back yet: one more instruction
        if self.rest is None:
            self._drop_tf()
        if self.rest is None and self.line[0] <= pc < self.line[1]:
            address = lldb.SBAddress(pc, self.thread.GetProcess().GetTarget())
            queue = self.plan.QueueThreadPlanForStepInRange if self.into else self.plan.QueueThreadPlanForStepOverRange
            self.rest = queue(address, self.line[1] - pc)
            if self.rest is not None and self.rest.IsValid():
                self.rest.SetStopOthers(True)
                return False
        self.plan.SetPlanComplete(True)
        return True

    def _drop_tf(self) -> None:
        """The agent's copy of the instruction re-arms with pushfq, or AC, popfq: stepped one
        instruction at a time, pushfq saved the step's TF and popfq made it the thread's own
        (the kernel clears only a TF it set), and the next `continue` would stop with "trace"."""
        flags = self.thread.GetFrameAtIndex(0).FindRegister("rflags")
        value = flags.GetValueAsUnsigned()
        if flags.IsValid() and value & TF:
            flags.SetValueFromCString(hex(value & ~TF), lldb.SBError())

    def should_step(self) -> bool:
        return self.rest is None

    def is_stale(self) -> bool:
        return False

    def stop_description(self, stream: lldb.SBStream) -> None:
        stream.Print(f"step {'in' if self.into else 'over'} (its unaligned access counted by the agent's SIGBUS handler)")


def _run_plan(thread: lldb.SBThread, plan: str, args: dict[str, Any], failed: str) -> None:
    """Queue this module's scripted plan `plan` on `thread`, with `args` (as JSON)."""
    data = lldb.SBStructuredData()
    data.SetFromJSON(json.dumps(args))
    err = thread.StepUsingScriptedThreadPlan(f"{_THIS}.{plan}", data, False)
    if not err.Success():
        raise RuntimeError(f"{failed}: {err.GetCString()}")


def step_back_to_the_line(thread: lldb.SBThread, fn: tuple[int, int], line: tuple[int, int], into: bool) -> None:
    """A user's line step left at the signal return of a fault goes on (BackToTheLine)."""
    _run_plan(thread, "BackToTheLine", {"fn_lo": fn[0], "fn_hi": fn[1], "line_lo": line[0], "line_hi": line[1],
                                        "into": into}, "cannot step back from the agent's handler")


def step_through_handler(thread: lldb.SBThread, to: int, what: str) -> None:
    """A user's step that ended in the agent's SIGBUS handler goes on to `to` (ThroughHandler)."""
    _run_plan(thread, "ThroughHandler", {"to": int(to), "what": what}, "cannot step out of the agent's handler")


def is_alignment_sigbus(thread: lldb.SBThread) -> bool:
    """Whether the thread is stopped at an alignment fault (SIGBUS, BUS_ADRALN)."""
    if thread.GetStopReason() != lldb.eStopReasonSignal or thread.GetStopReasonDataAtIndex(0) != SIGBUS:
        return False
    code = thread.GetSiginfo().GetChildMemberWithName("si_code")
    return bool(code.IsValid() and code.GetValueAsSigned() == BUS_ADRALN)


class FaultSteps:
    """The FaultStep plans of one debugger: the PC each thread's queued plan runs the fault
    at, and where each thread's last one ended (lldb may show that trap again)."""

    def __init__(self) -> None:
        self.stepping: dict[int, int] = {}  # tid -> PC of the fault its FaultStep plan runs
        self.stepped: dict[int, int] = {}  # tid -> PC where its last FaultStep ended
        # Threads whose trap-engine plan was still queued at `off`: it takes them past the fault
        # as a `leave` plan would (a second plan on one thread outlived the first, stepping
        # with the others stopped while SIGBUS was dropped: lldb spun, issue 32).
        self.leavers: set[int] = set()

    def queue(self, thread: lldb.SBThread, to: int | None = None) -> None:
        """FaultStepper.step_over_fault: the plan for this thread's fault (`to`: run it there)."""
        self.stepping[int(thread.GetThreadID())] = thread.GetFrameAtIndex(0).GetPC()
        if to is not None:
            args = lldb.SBStructuredData()
            args.SetFromJSON(f'{{"to": {int(to)}}}')
            err = thread.StepUsingScriptedThreadPlan(f"{_THIS}.FaultStep", args, False)
        else:
            err = thread.StepUsingScriptedThreadPlan(f"{_THIS}.FaultStep", False)
        if not err.Success():
            raise RuntimeError(f"cannot queue a single-step: {err.GetCString()}")

    def leave(self, thread: lldb.SBThread, queued: bool = False) -> None:
        """After `off`: take this thread, stopped at a fault, past it (AC is clear now); when
        its trap-engine plan is `queued` already, that plan does it."""
        if queued:
            self.leavers.add(int(thread.GetThreadID()))
            return
        args = lldb.SBStructuredData()
        args.SetFromJSON('{"leave": true}')
        thread.StepUsingScriptedThreadPlan(f"{_THIS}.FaultStep", args, False)

    def turned_leave(self, tid: int) -> bool:
        """A plan queued by the trap engine ended for a thread that `off` then owed its step."""
        if tid in self.leavers:
            self.leavers.discard(tid)
            return True
        return False

    def done(self, thread: lldb.SBThread) -> bool:
        """A FaultStep plan ended: True when it was the trap engine's (arm the thread again)."""
        tid = int(thread.GetThreadID())
        if self.stepping.pop(tid, None) is None:
            return False
        self.stepped[tid] = thread.GetFrameAtIndex(0).GetPC()
        return True

    def being_stepped(self, tid: int, pc: int) -> bool:
        """The SIGBUS at `pc` is the one a queued plan is about to step over, not a new one."""
        return self.stepping.get(tid) == pc

    def just_stepped(self, tid: int, pc: int) -> bool:
        """A stop at `pc` is the trap that ended this thread's last plan, shown again."""
        return self.stepped.get(tid) == pc

    def lost(self, live: set[int], pc_of: Callable[[int], int]) -> list[int]:
        """At a stop the user sees: the threads whose plan was lost (another plan ran the
        instruction, or a stop moved the thread); gone threads are forgotten."""
        out = []
        for tid, pc in list(self.stepping.items()):
            if tid not in live:
                self.stepping.pop(tid, None)
            elif pc_of(tid) != pc:
                self.stepping.pop(tid, None)
                out.append(tid)
        return out

    def forget(self) -> None:
        """`off`: the engine's plans no longer arm; returns nothing, `leave` says who leaves."""
        self.stepping.clear()
        self.stepped.clear()
