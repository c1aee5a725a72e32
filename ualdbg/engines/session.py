"""One ualdbg session inside one debugger: the fault recorder (engines/recorder.py: settings,
scope, the shared trace buffer, the fault path) with the trap and the step engine that feed it."""
from __future__ import annotations

from ..core.target import Target
from ..isa import arch as archmod
from .recorder import FaultRecorder
from .step import StepEngine
from .trap import TrapEngine


class Session(FaultRecorder):
    def __init__(self, debugger: str) -> None:
        super().__init__(debugger)
        self.engine = TrapEngine(self)
        self.step = StepEngine(self)  # step mode (`--engine step`), enabled instead of the trap engine

    @property
    def engine_name(self) -> str:
        return self.step.name if self.step.enabled else self.engine.name

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        return self.engine._arch(target)

    def fixup_reported(self) -> dict[int, int] | None:
        fixup = self.engine.fixup
        return fixup.reported if fixup is not None else None

    def new_process(self) -> None:
        """A run, an attach or an exec: addresses mean something new."""
        super().new_process()
        self.engine.forget_threads()
        self.step.forget_threads()
