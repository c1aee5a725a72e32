"""The stop decisions inside gdb: the conditions of ualdbg's catchpoints ($_ualdbg_signal,
$_ualdbg_syscall), which ask the session's Stops (engines/stops.py) and turn its verdict into
gdb's answer (1 stop, 0 resume) and `handle ... pass` setting; a signal that is not ualdbg's
goes as the user's `handle` says; and the single step a fault in a delay slot needs."""
from __future__ import annotations

from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.target import SigInfo
from ...engines.faultpath import Decision
from ...engines.session import Session
from ...engines.step import StepDecision
from ...isa.arch import SIGTRAP
from .catchpoints import Catchpoints
from .console import warn
from .holding import Holding
from .signals import SIGNAL_NAMES, SignalHandles
from .target import GdbTarget
from .threadhold import SI_TKILL

SI_KERNEL = 0x80  # x86: the si_code of the SIGTRAP an int3 raises
INT3 = b"\xcc"


class Conditions:
    """What each catchpoint condition of one gdb answers."""

    def __init__(self, session: Session, target: GdbTarget, catchpoints: Catchpoints, signals: SignalHandles,
                 holding: Holding) -> None:
        self.session = session
        self.target = target
        self.catchpoints = catchpoints
        self.signals = signals
        self.holding = holding
        # A fault performed in SH's delay slot (engines/fixup.py): the thread stops silently,
        # takes one `stepi`, and resumes where its branch goes (Stops.slot_stepped). The batch
        # driver calls finish_slot itself; at the prompt the stop event does, then continues.
        self.slot_pending = False
        self.finishing_slot = False
        _SignalFunction(self)
        _SyscallFunction(self)

    def on_signal(self, signo: int) -> int:
        stops, t = self.session.stops, self.target
        with t.event():
            tid = t.current_tid()
            if signo == SIGTRAP and self.holding.kicks and self.holding.expects_kick(tid):
                return self.holding.swallow_kick(tid)
            if not self.catchpoints.installed:
                return self._after_off()
            if signo == SIGTRAP and self.session.step.enabled:
                stepped = stops.step_trap(t, tid, t.siginfo())
                if stepped is not None:
                    self.signals.set_pass(SIGTRAP, False)
                    return 1 if stepped is StepDecision.STOP else 0
            if signo == SIGTRAP:
                # The single-step trap after a fault ran with AC clear: ours, no siginfo needed.
                trapped = stops.fault_trap(t, tid)
                if trapped is not None:
                    self.signals.set_pass(SIGTRAP, False)
                    return 0 if trapped is Decision.RESUME else 1
            info = stops.signal_info(t, signo)
            if info is None:
                return 1
            decision = stops.fault(t, info)
            if decision is Decision.NOT_OURS:
                return self._as_user_would(info)
            self.signals.set_pass(info.signo, False)
            if decision is Decision.STEP_THEN_RESUME:
                self.slot_pending = True
                self.catchpoints.silence(True)
                return 1
            return 1 if decision is Decision.STOP else 0  # a STOP's report waits for the stop event

    def _after_off(self) -> int:
        """After `off`: a fault that happened before it, reported only now. Its thread's AC is
        clear, so resuming without the signal runs the instruction as if ualdbg never was."""
        info = self.target.siginfo()
        if self.session.stops.owed_fault(self.target.current_tid(), info):
            return 0
        return self._as_user_would(info) if info is not None else 1

    def _as_user_would(self, info: SigInfo) -> int:
        """A signal ualdbg has no business with: behave as the user's `handle` says."""
        if info.signo == SIGTRAP and info.code == SI_TKILL and self.holding.is_kick():
            return self.holding.swallow_kick(self.target.current_tid())  # one ualdbg did not count on
        if info.signo == SIGTRAP and info.code > 0:
            if not self._program_breakpoint(info):
                self.signals.set_pass(SIGTRAP, False)
                return 0  # gdb's own breakpoints and steps: let gdb decide, never pass them on
        stop, prnt, pas = self.signals.users(info.signo)
        # A SIGTRAP the program raised (si_code <= 0) or a SIGBUS that is no #AC: the program's.
        self.signals.set_pass(info.signo, pas)
        if prnt and not stop:
            gdb.write(f"\nProgram received signal {SIGNAL_NAMES.get(info.signo)}.\n")
        return 1 if stop else 0

    def _program_breakpoint(self, info: SigInfo) -> bool:
        """The program's own `int3`. gdb has already backed the PC up onto it, taking it for one
        of its breakpoints, and puts it back only for a signal nothing explains; our catchpoint
        explains every SIGTRAP, so without this the int3 would run again forever. Move the PC
        past it, as gdb would, and let the user's `handle SIGTRAP` decide. (gdb reads its own
        breakpoints' shadow bytes, so an int3 read at the PC is never one of gdb's.)"""
        if info.code != SI_KERNEL or "x86-64" not in self.target.arch():
            return False
        pc = self.target.read_register("rip")
        if self.target.read_memory(pc, 1) != INT3:
            return False
        self.target.write_register("rip", pc + len(INT3))
        return True

    def on_syscall(self) -> int:
        with self.target.event():
            return 1 if self.session.stops.step_syscall(self.target) is StepDecision.STOP else 0

    # -- a fault in a delay slot (STEP_THEN_RESUME) --------------------------------------------------
    def finish_slot(self) -> bool:
        """The step and the PC a STEP_THEN_RESUME decision asked for; False when none is due."""
        if not self.slot_pending:
            return False
        self.slot_pending = False
        catch = None
        stops, t = self.session.stops, self.target
        try:
            to = stops.slot_catch(t.current_tid())
            if to is not None:
                # gdb steps MIPS by a breakpoint after the `nop`; a taken branch jumps past it.
                catch = gdb.Breakpoint(f"*{to:#x}", internal=True)
                catch.silent = True
            gdb.execute("stepi", to_string=True)
            if gdb.selected_inferior().pid:
                with t.event():
                    stops.slot_stepped(t, t.current_tid())
        finally:
            if catch is not None and catch.is_valid():
                catch.delete()
            self.catchpoints.silence(False)
        return True

    def finish_slot_and_continue(self) -> None:
        """At the prompt (from the stop event: gdb runs the step and the resume from there): a
        loop, not a recursion, over consecutive delay-slot faults."""
        if self.finishing_slot:
            return  # a stop inside the loop below: the loop takes it
        self.finishing_slot = True
        try:
            while self.finish_slot():
                gdb.execute("continue")
        except gdb.error as exc:
            warn(f"after a fault in a delay slot: {exc}")
        finally:
            self.finishing_slot = False


class _SignalFunction(gdb.Function):
    """$_ualdbg_signal(): the condition of ualdbg's signal catchpoints (1 = stop)."""

    def __init__(self, conditions: Conditions) -> None:
        super().__init__("_ualdbg_signal")
        self.conditions = conditions

    def invoke(self, signo: Any) -> int:
        try:
            return self.conditions.on_signal(int(signo))
        except Exception as exc:
            warn(f"while handling a signal: {exc}")
            return 1


class _SyscallFunction(gdb.Function):
    """$_ualdbg_syscall(): the condition of ualdbg's syscall catchpoint (never stops)."""

    def __init__(self, conditions: Conditions) -> None:
        super().__init__("_ualdbg_syscall")
        self.conditions = conditions

    def invoke(self) -> int:
        try:
            return self.conditions.on_syscall()
        except Exception as exc:
            warn(f"while handling a syscall: {exc}")
            return 0
