"""One ualdbg session inside one debugger, composed of its parts: what the user armed (`Mode`),
what decides (rules.py: scope, policy, decoded instructions), what names (image.py: modules,
symbolizer), what records (recorder.py: buffer, data names), the fault path that joins them
(faultpath.py), the trap and step engines that are given that path and the target's ArchInfo,
and the lifecycle and stop decisions the adapters call; and what it hands render/: its
TraceResult and the report of its last fault."""
from __future__ import annotations

import os
from dataclasses import replace

from .. import __version__
from ..agent.presence import creating_note
from ..core.result import FaultReport, ProgramInfo, TraceResult, sites_of
from ..core.sections import StepSummary
from ..core.settings import Config
from ..core.target import Target
from ..core.trace import TraceBuffer
from ..isa import arch as archmod
from .agentlink import AgentLink, combine, finish_steps
from .faultpath import FaultPath, Mode
from .image import ProcessImage
from .lifecycle import Events, Kind, Lifecycle
from .modulescope import Scope
from .recorder import FaultRecorder
from .rules import FaultRules
from .step import StepEngine
from .stops import Stops
from .trap import TrapEngine


class Session:
    def __init__(self, debugger: str) -> None:
        self.debugger = debugger
        self.version = __version__
        self.config = Config()
        self.mode = Mode()
        self.program = ProgramInfo()
        self.rules = FaultRules()
        self.image = ProcessImage()
        self.recorder = FaultRecorder(TraceBuffer(self.config["buffer"]))
        self.faults = FaultPath(self.mode, self.rules, self.image, self.recorder)
        self.engine = TrapEngine(self.faults)
        self.step = StepEngine(self.faults)  # step mode (`--engine step`), enabled instead of the trap engine
        self.events = Events()
        self.lifecycle = Lifecycle(self.mode, self.program, self.faults, self.engine, self.step, self.events)
        self.stops = Stops(self.lifecycle, self.break_report)
        self.agent = AgentLink()  # `trace start`'s in-process agent (engines/agentlink.py)
        self.events.subscribe(Kind.NEW_PROCESS, self.agent.launched)

    @property
    def buffer(self) -> TraceBuffer:
        return self.recorder.buffer

    @property
    def scope(self) -> Scope:
        return self.rules.scope

    @property
    def engine_name(self) -> str:
        """The engine that traces now: the agent while it does, else the debugger's own."""
        if self.mode.agent:
            return "agent"
        return self.step.name if self.step.enabled else self.engine.name

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        """The target's architecture (Lifecycle.arch_of: learnt once)."""
        return self.lifecycle.arch_of(target)

    def stopped(self, target: Target) -> None:
        """A stop the user sees (both debuggers' stop hooks): the trap engine's business
        (Stops.stopped), and the agent's single-steps the debugger's own step took over."""
        self.stops.stopped(target)
        if self.agent.live and not self.agent.waiting:
            finish_steps(self.agent.current, target)

    def arm_late(self, target: Target, tid: int) -> None:
        """A thread that was stopped at a fault when ualdbg went off has run that instruction
        (Host.settle_faults): armed now for whichever engine is armed."""
        if self.agent.live and not self.agent.waiting:
            self.agent.arm_thread(target, tid)
        elif self.engine.active and self.engine.fixup is None and tid not in self.engine.armed:
            self.lifecycle.arch_of(target)
            self.engine.arm_thread(target, tid)

    def result(self) -> TraceResult:
        """What this session has recorded, for the JSON document (render/jsondoc.py): the
        debugger's own engine's faults and the agent's, one trace."""
        own = self._own_result()
        agent = self.agent.results()
        if not agent:
            return own
        trapped = bool(self.buffer.total or self.buffer.ignored)
        one = combine(own, self.buffer if trapped else None, agent, self.buffer.capacity)
        program, image = self.program, agent[0].program
        # (the process's last image, after its own execs, is the one that exited)
        exit_status = program.exit_status if program.exit_status is not None else agent[-1].program.exit_status
        one.program = ProgramInfo(path=program.path or image.path, args=list(program.args or image.args),
                                  pid=program.pid or image.pid, exit_status=exit_status,
                                  exit_signal=program.exit_signal)
        self.agent.sections(one)
        if self.agent.creating:
            one.note(creating_note(self.agent.creating))
        for line in self.engine.steps.notes():
            one.note(line)
        return one

    def _own_result(self) -> TraceResult:
        arch = self.lifecycle.arch
        result = TraceResult.of_buffer(
            self.buffer, engine=self.step.name if self.step.enabled else self.engine.name, debugger=self.debugger,
            version=self.version,
            arch=os.uname().machine if arch is None else arch.name,
            program=replace(self.program, args=list(self.program.args)), scope=self.scope.describe(),
            sites=sites_of(self.buffer, self.image.resolve, self.recorder.data_at), recording=self.mode.armed)
        result.step = self._step_summary()
        result.blind_spots = self.engine.blind.spots(self.program.pid, self.program.path)
        for line in self.engine.steps.notes():
            result.note(line)
        return result

    def _step_summary(self) -> StepSummary | None:
        """Step mode: its scope and policy, and how many instructions it stepped."""
        step = self.step
        if not step.enabled:
            return None
        st = step.stats
        return StepSummary(scope=step.scope.describe() if step.scope is not None else step.request.describe(),
                           policy=self.rules.policy.name, steps=st.steps, entries=st.entries, calls_run=st.calls_run)

    def break_report(self) -> FaultReport | None:
        """The break report of the last recorded fault, with its source line when the `source`
        setting is on: what every adapter prints at a break stop (Stops.take_report, written by
        render/report.py)."""
        fault = self.recorder.last_fault
        if fault is None:
            return None
        loc = self.image.resolve(fault.pc)
        src = self.image.source_line(loc) if self.config["source"] else None
        return FaultReport(fault, loc, src, self.recorder.last_data, checked_before=self.step.enabled)
