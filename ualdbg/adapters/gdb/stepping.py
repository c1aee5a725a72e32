"""gdb's primitives for the step engine (engines/step.py): single-stepping by EFLAGS.TF, whose
trap reaches ualdbg's `catch signal SIGTRAP` condition without a round trip through gdb's
`stepi` (a condition cannot resume the inferior; it only decides), and internal breakpoints
at scope entries and at the return addresses of calls out of the scope."""
from __future__ import annotations

from typing import Protocol

import gdb  # type: ignore[import-not-found]

from ...core.target import Target
from ...engines.session import Session
from ...engines.step import TRAP_TRACE, StepDecision, set_trap_flag
from ...isa import arch as archmod
from .console import warn
from .target import GdbTarget


class StepHooks(Protocol):
    """What the step control uses of hooks.py's GdbHooks, which owns it."""

    session: Session
    target_: GdbTarget
    report_pending: list[str] | None

    def _set_pass(self, signo: int, pas: bool) -> None: ...


class _StepPoint(gdb.Breakpoint):
    """An entry or return breakpoint: the engine decides, in the stop callback, whether the
    thread starts stepping here; it stops only before an offending instruction (break)."""

    def __init__(self, control: GdbStepControl, addr: int) -> None:
        super().__init__(f"*{addr:#x}", internal=True)
        self.silent = True
        self.control = control

    def stop(self) -> bool:
        try:
            return self.control.on_breakpoint()
        except Exception as exc:  # never let a hook error stop the user's program
            warn(f"step engine: {exc}")
            return False


class GdbStepControl:
    """The StepControl of engines/step.py over gdb, plus the SIGTRAP routing it needs."""

    eager_returns = False  # a call's return breakpoint is made when a stepped thread leaves the scope

    def __init__(self, hooks: StepHooks) -> None:
        self.hooks = hooks
        self.points: dict[int, _StepPoint] = {}

    # -- StepControl -------------------------------------------------------------------------
    def step(self, target: Target, tid: int) -> None:
        set_trap_flag(target, tid, True)

    def unstep(self, target: Target, tid: int) -> None:
        set_trap_flag(target, tid, False)

    def break_at(self, addr: int) -> None:
        bp = self.points.get(addr)
        if bp is None or not bp.is_valid():
            self.points[addr] = _StepPoint(self, addr)

    def clear_breakpoints(self) -> None:
        for bp in self.points.values():
            if bp.is_valid():
                bp.delete()
        self.points.clear()

    # -- events ------------------------------------------------------------------------------
    def _decide(self, decision: StepDecision) -> bool:
        if decision is StepDecision.STOP:
            self.hooks.report_pending = self.hooks.session.break_report()
            return True
        return False

    def on_breakpoint(self) -> bool:
        hooks = self.hooks
        with hooks.target_.event():
            tid = hooks.target_.current_tid()
            return self._decide(hooks.session.step.on_breakpoint(hooks.target_, tid))

    def on_trap(self) -> int | None:
        """At a SIGTRAP (inside the catchpoint's event): 1 stop, 0 resume, None not ours."""
        hooks, step = self.hooks, self.hooks.session.step
        target = hooks.target_
        tid = target.current_tid()
        info = target.siginfo()
        if info is None or info.code != TRAP_TRACE:
            return None  # a breakpoint's int3 (ours are decided by their stop callback) or the program's
        if not step.stepping(tid):
            # A thread born of a stepped thread inherits TF: clear it there (gdb's own
            # single-steps do not show TF in the registers, so they are not mistaken for it).
            adopted = step.on_unknown_trace(target, tid)
            if adopted is None:
                return None
            hooks._set_pass(archmod.SIGTRAP, False)
            return 1 if self._decide(adopted) else 0
        hooks._set_pass(archmod.SIGTRAP, False)
        return 1 if self._decide(step.on_step(target, tid)) else 0

    def on_syscall(self) -> int:
        """At clone/fork/vfork/clone3 (inside the syscall catchpoint's event): 1 stop, 0 resume."""
        step, target = self.hooks.session.step, self.hooks.target_
        tid = target.current_tid()
        if not step.stepping(tid):
            return 0
        t = archmod.trap_flags(archmod.arch_info(target.arch()).name)
        if t is None or target.read_register(t.syscall_nr, tid) not in t.task_creating_syscalls:
            return 0
        if target.read_register(t.syscall_ret, tid) == (-archmod.ENOSYS & 0xFFFFFFFFFFFFFFFF):
            step.before_task_creation(target, tid, self._creates_thread(target, tid))
            return 0
        return 1 if self._decide(step.after_task_creation(target, tid)) else 0

    @staticmethod
    def _creates_thread(target: Target, tid: int) -> bool:
        """clone/clone3 with CLONE_THREAD (a pthread), from the syscall's flags argument."""
        nr = target.read_register("orig_rax", tid)
        if nr == 56:  # clone(flags, ...)
            flags = target.read_register("rdi", tid)
        elif nr == 435:  # clone3(struct clone_args *): flags are its first u64
            flags = int.from_bytes(target.read_memory(target.read_register("rdi", tid), 8) or b"\0", "little")
        else:
            return False
        return bool(flags & 0x10000)  # CLONE_THREAD
