"""gdb's primitives for the step engine (engines/step.py): single-stepping by EFLAGS.TF, whose
trap reaches ualdbg's `catch signal SIGTRAP` condition without a round trip through gdb's
`stepi` (a condition cannot resume the inferior; it only decides: conditions.py asks the
session's Stops), and internal breakpoints at scope entries and at the return addresses of calls
out of the scope."""
from __future__ import annotations

import gdb  # type: ignore[import-not-found]

from ...core.target import Target
from ...engines.step import StepDecision, set_trap_flag
from ...engines.stops import Stops
from .console import warn
from .target import GdbTarget


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
    """The StepControl of engines/step.py over gdb."""

    eager_returns = False  # a call's return breakpoint is made when a stepped thread leaves the scope
    steps_inherited = True  # clone copies EFLAGS.TF: a stepped thread's new thread traps at once

    def __init__(self, stops: Stops, target: GdbTarget) -> None:
        self.stops = stops
        self.target = target
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
    def on_breakpoint(self) -> bool:
        """One of its breakpoints was hit (a stop callback): True stops there (break)."""
        with self.target.event():
            return self.stops.step_breakpoint(self.target, self.target.current_tid()) is StepDecision.STOP
