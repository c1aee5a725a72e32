"""What the engines decide when a thread stops, written once for every debugger: an alignment
fault (the trap engine), the single-step trap after one, a step of the step engine or one of its
breakpoints, a fault the debugger itself stepped over (lldb). A STOP leaves the break report of
the recorded fault to show at the stop the user sees (`take_report`: taken once, and written by
render/report.py's `break_text`); after
`ualdbg off` the faults and step-over traps the debugger has yet to deliver are let go (`owe`,
`owed_steps`). The adapters carry out
the verdicts; lifecycle.py is the rest of a process's life."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from ..core.result import FaultReport
from ..core.target import SigInfo, Target
from ..isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP
from .faultpath import Decision
from .lifecycle import Kind, Lifecycle
from .step import TRAP_TRACE, StepDecision


class Stops:
    """The stop decisions of one session. Every method runs while the debugger has the thread
    stopped; `tid` is the stopped thread (the target's current one)."""

    def __init__(self, lifecycle: Lifecycle, break_report: Callable[[], FaultReport | None]) -> None:
        self.lifecycle = lifecycle
        self.engine = lifecycle.engine
        self.step = lifecycle.step
        self.events = lifecycle.events
        self.break_report = break_report  # of the fault recorded last (Session.break_report)
        # tid -> the break report its stop shows, until the adapter takes it (insertion order:
        # the latest last). Reports no stop showed go with the process.
        self.reports: dict[int, FaultReport | None] = {}
        # After `off`: threads stopped at an alignment fault the debugger has yet to deliver.
        self.owed: set[int] = set()
        # ... and threads whose single-step trap after a fault (ualdbg's TF, gdb) may still come:
        # the lifecycle tells them with OFF, the adapter keeps those it finds unreported.
        self.owed_steps: set[int] = set()
        self.events.subscribe(Kind.EXITED, lambda _: self.reports.clear())
        self.events.subscribe(Kind.OFF, lambda stepping: self.owed_steps.update(stepping or ()))

    # -- the trap engine -------------------------------------------------------------------------
    def signal_info(self, target: Target, signo: int) -> SigInfo | None:
        """The stop's siginfo; where the debugger has none (qemu's gdb stub), what the fix-up
        engine goes on (it decodes the instruction); None: the AC engine cannot tell."""
        info = target.siginfo()
        if info is not None:
            return info
        self.lifecycle.arch_of(target)
        return self.engine.siginfo_unavailable(target, signo)

    def fault(self, target: Target, info: SigInfo) -> Decision:
        """A thread stopped at a signal ualdbg may own (an alignment SIGBUS, a strict CPU's
        SIGBUS/SIGSEGV): the trap engine decides. A recorded fault is told as FAULT_RECORDED;
        a STOP holds its break report for the stop the user sees."""
        self.lifecycle.arch_of(target)
        decision = self.engine.on_signal(target, info)
        if decision is Decision.NOT_OURS:
            return decision
        if decision is Decision.STEP_THEN_RESUME or info.signo == SIGBUS:
            self.events.emit(Kind.FAULT_RECORDED, decision)
        if decision is Decision.STOP:
            self._hold(target.current_tid())
        return decision

    def fault_trap(self, target: Target, tid: int) -> Decision | None:
        """A SIGTRAP of a thread that ran its faulting instruction with AC clear and TF set (the
        trap engine's step-over): ours, no siginfo needed; RESUME, or NOT_OURS for a program
        that single-steps itself. None: no step-over is pending in this thread."""
        if tid not in self.engine.pending:
            return None
        self.lifecycle.arch_of(target)
        return self.engine.on_signal(target, SigInfo(SIGTRAP, 0, None))

    def fault_stepped(self, target: Target, tid: int) -> str | None:
        """A FaultStepper target (lldb) ran the faulting instruction of `tid`: arm it again. A
        line for the user when the step ended where the instruction cannot go (first time)."""
        self.lifecycle.arch_of(target)
        return self.engine.fault_stepped(target, tid)

    def slot_catch(self, tid: int) -> int | None:
        """Before the single step a STEP_THEN_RESUME asked for, where the debugger steps in
        software (MIPS): the address a taken branch makes the `nop` go to, which the step must
        stop at too (FixupEngine.slot_catch)."""
        fixup = self.engine.fixup
        return fixup.slot_catch(tid) if fixup is not None else None

    def slot_stepped(self, target: Target, tid: int) -> None:
        """After that single step: the PC where the delayed branch goes."""
        fixup = self.engine.fixup
        if fixup is not None:
            fixup.finish_slot(target, tid)

    def stopped(self, target: Target) -> None:
        """A stop the user sees: the trap engine finishes what the debugger's own steps hid
        from it and arms the threads no hook saw being born."""
        if self.lifecycle.mode.trap_armed or self.engine.pending:
            self.lifecycle.arch_of(target)
            self.engine.reconcile(target)

    # -- the step engine -------------------------------------------------------------------------
    def step_trap(self, target: Target, tid: int, info: SigInfo | None) -> StepDecision | None:
        """A SIGTRAP where the step engine single-steps by TF (gdb): a step of a stepped thread,
        or the first trap of a thread that inherited TF from one. None: not a single-step trap
        of the engine's (a breakpoint's int3, the program's own, the debugger's own step)."""
        if info is None or info.code != TRAP_TRACE:
            return None
        if not self.step.stepping(tid):
            return self._step_decided(self.step.on_unknown_trace(target, tid), tid)
        return self._step_decided(self.step.on_step(target, tid), tid)

    def stepped(self, target: Target, tid: int) -> StepDecision:
        """One instruction of a thread the step engine steps has run (lldb's thread plan)."""
        return self._step(self.step.on_step(target, tid), tid)

    def step_breakpoint(self, target: Target, tid: int) -> StepDecision:
        """An entry or return breakpoint of the step engine (an instruction's, where it steps by
        breakpoints) was hit."""
        return self._step(self.step.on_breakpoint(target, tid), tid)

    def step_syscall(self, target: Target, tid: int | None = None, nr: int | None = None,
                     entry: bool | None = None) -> StepDecision:
        """Lifecycle.syscall, with a break report held when the step engine stops there."""
        decision = self.lifecycle.syscall(target, tid, nr, entry)
        return self._step(decision, tid if tid is not None else target.current_tid())

    def _step(self, decision: StepDecision, tid: int) -> StepDecision:
        if decision is StepDecision.STOP:
            self._hold(tid)
        return decision

    def _step_decided(self, decision: StepDecision | None, tid: int) -> StepDecision | None:
        return None if decision is None else self._step(decision, tid)

    # -- break reports ---------------------------------------------------------------------------
    def _hold(self, tid: int) -> None:
        self.reports.pop(tid, None)  # re-held: the latest again
        self.reports[tid] = self.break_report()

    def take_report(self, tid: int | None) -> FaultReport | None:
        """The break report a STOP of `tid` held (once). `tid` None: the latest one of any
        thread, and no other is kept (gdb shows one stop at a time)."""
        if tid is None:
            if not self.reports:
                return None
            report = list(self.reports.values())[-1]
            self.reports.clear()
            return report
        return self.reports.pop(tid, None)

    # -- after `off` -------------------------------------------------------------------------------
    def owe(self, tids: Iterable[int]) -> None:
        """`off` found these threads stopped at an alignment fault their debugger has yet to
        deliver (gdb reports a thread's pending SIGBUS at the next resume; lldb's thread still
        shows its own). Their AC is clear now: each one's fault is let go once without the
        signal, and it runs the instruction as if ualdbg never was."""
        self.owed |= set(tids)

    def keep_owed(self, tids: Iterable[int]) -> None:
        """Only these threads may still deliver their fault or trap (gdb: the others moved on)."""
        keep = set(tids)
        self.owed &= keep
        self.owed_steps &= keep

    def owes(self) -> bool:
        """Whether a fault or a step-over trap may still come from before `off`."""
        return bool(self.owed or self.owed_steps)

    def forgive(self) -> None:
        """Nothing is owed any more: the debugger lets go of the signal (gdb's finish_drain)."""
        self.owed.clear()
        self.owed_steps.clear()

    def owed_fault(self, tid: int, info: SigInfo | None) -> bool:
        """After `off`: whether this stop is the owed fault of `tid` (resume it without the
        signal; it is no longer owed): its alignment fault, or the trap of its step over one."""
        if info is not None and info.signo == SIGBUS and info.code == BUS_ADRALN and tid in self.owed:
            self.owed.discard(tid)
            return True
        if info is not None and info.signo == SIGTRAP and info.code == TRAP_TRACE and tid in self.owed_steps:
            self.owed_steps.discard(tid)
            return True
        return False

    def paid(self, tid: int) -> bool:
        """`tid` ran past its owed fault (lldb steps it over): True when none is owed any more."""
        self.owed.discard(tid)
        self.owed_steps.discard(tid)
        return not self.owes()
