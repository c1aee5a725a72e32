"""One ualdbg session inside one debugger: the fault recorder (engines/recorder.py: settings,
scope, the shared trace buffer, the fault path) with the trap and the step engine that feed it,
and the lifecycle (engines/lifecycle.py) that the adapters call at each event of a process."""
from __future__ import annotations

from ..core.target import Target
from ..isa import arch as archmod
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
        self.lifecycle = Lifecycle(self, self.engine, self.step, self.events)

    @property
    def engine_name(self) -> str:
        return self.step.name if self.step.enabled else self.engine.name

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        return self.engine._arch(target)

    def fixup_reported(self) -> dict[int, int] | None:
        fixup = self.engine.fixup
        return fixup.reported if fixup is not None else None
