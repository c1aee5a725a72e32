"""One ualdbg session inside one debugger: the fault recorder (engines/recorder.py: settings,
scope, the shared trace buffer, the fault path) with the trap and the step engine that feed it,
and what it hands render/ (its TraceResult and the report of its last fault), and the lifecycle
(engines/lifecycle.py) that the adapters call at each event of a process."""
from __future__ import annotations

import platform

from ..core.result import StepSummary, TraceResult, sites_of
from ..core.target import Target
from ..isa import arch as archmod
from ..render.report import fault_report
from .lifecycle import Events, Lifecycle
from .recorder import FaultRecorder
from .step import StepEngine
from .trap import TrapEngine


class Session(FaultRecorder):
    def __init__(self, debugger: str) -> None:
        super().__init__(debugger)
        self.engine = TrapEngine(self)
        self.step = StepEngine(self)  # step mode (`--engine step`), enabled instead of the trap engine
        self.events = Events()
        self.lifecycle = Lifecycle(self, self.engine, self.step, self.events, self.break_report)

    @property
    def engine_name(self) -> str:
        return self.step.name if self.step.enabled else self.engine.name

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        return self.engine._arch(target)

    def fixup_reported(self) -> dict[int, int] | None:
        fixup = self.engine.fixup
        return fixup.reported if fixup is not None else None

    def result(self) -> TraceResult:
        """What this session has recorded, for the JSON document (render/jsondoc.py)."""
        arch = self.engine.arch
        return TraceResult(
            engine=self.engine_name, debugger=self.debugger, version=self.version,
            arch=platform.machine() if arch is None else arch.name,
            program=self.program, scope=self.scope.describe(), buffer=self.buffer,
            sites=sites_of(self.buffer, self.resolve, self.data_at), recording=self.armed,
            step=self._step_summary(), blind_spots=self.engine.blind.spots(self.program.pid, self.program.path))

    def _step_summary(self) -> StepSummary | None:
        """Step mode: its scope and policy, and how many instructions it stepped."""
        step = self.step
        if not step.enabled:
            return None
        st = step.stats
        return StepSummary(scope=step.scope.describe() if step.scope is not None else step.request.describe(),
                           policy=self.policy.name, steps=st.steps, entries=st.entries, calls_run=st.calls_run)

    def break_report(self) -> list[str]:
        """The break report of the last recorded fault, with its source line when the `source`
        setting is on: what every adapter prints at a break stop."""
        fault = self.last_fault
        if fault is None:
            return []
        loc = self.resolve(fault.pc)
        src = None
        if self.config["source"] and loc.file and loc.line and self.symbolizer is not None:
            src = self.symbolizer.source_line(loc.file, loc.line)
        return fault_report(fault, loc, src, self.last_data, checked_before=self.step.enabled)
