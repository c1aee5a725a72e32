"""The path from a thread stopped at an access to a recorded fault: decode and check it
(rules.py), keep it if its module counts, record it (recorder.py), name its place (image.py); and
what the user armed ualdbg for (`Mode`), which says whether a recorded fault stops the program.
The trap, fix-up and step engines are given a `FaultPath` and the target's ArchInfo, never the
session; they answer with a `Decision` the adapters carry out."""
from __future__ import annotations

from enum import Enum

from ..core.model import Access, Fault
from ..core.target import SigInfo, Target
from ..isa import arch as archmod
from ..isa.costclass import classify, is_vector
from ..isa.decode import Insn
from ..lazyclass import dataclass
from .image import ProcessImage
from .recorder import FaultRecorder
from .rules import FaultRules


class Decision(Enum):
    """An engine's verdict at a stop, which the adapter carries out."""

    STOP = "stop"  # an unaligned access the user asked to stop at
    RESUME = "resume"  # ours and handled: resume without delivering the signal
    NOT_OURS = "not-ours"  # behave exactly as the debugger would without ualdbg
    # Performed, but the thread must take one single step (through a `nop`) before it resumes
    # at the PC the engine keeps: a fault in SH's delay slot under qemu (engines/fixup.py).
    STEP_THEN_RESUME = "step-then-resume"


@dataclass
class Mode:
    """What the user armed ualdbg for, as the commands set it: stop at each fault (`break`),
    record them (`trace start`), and where arming starts (`--at main|start`)."""

    breaking: bool = False
    tracing: bool = False
    at: str = "main"
    agent: bool = False  # tracing goes through the in-process agent (engines/agentlink.py)

    @property
    def armed(self) -> bool:
        return self.breaking or self.tracing

    @property
    def trap_armed(self) -> bool:
        """Whether the debugger's own engine (trap or step) is wanted: to break, or to trace
        without the agent."""
        return self.breaking or (self.tracing and not self.agent)


class Reruns:
    """Per thread, the PC of a fault recorded before the thread ran its instruction, which will
    trap there again: that trap is performed without being counted twice. The fix-up engine's
    own break stops (the user's resume re-runs the instruction), and the step engine's checks
    of an access that a strict CPU then traps too (ARMv7's ldrd, MIPS's lw)."""

    def __init__(self) -> None:
        self._at: dict[int, int] = {}

    def expect(self, tid: int, pc: int) -> None:
        self._at[tid] = pc

    def take(self, tid: int) -> int | None:
        """The PC `tid` was expected to trap at again, forgotten now."""
        return self._at.pop(tid, None)

    def passed(self, tid: int, pc: int) -> None:
        """`tid` is about to run the instruction at `pc` afresh: a rerun expected there is over."""
        if self._at.get(tid) == pc:
            del self._at[tid]

    def clear(self) -> None:
        self._at.clear()


class FaultPath:
    """One debugger session's fault path: the rules that decide, the image that names, the
    recorder that keeps, and the mode that says whether a recorded fault stops."""

    def __init__(self, mode: Mode, rules: FaultRules, image: ProcessImage, recorder: FaultRecorder) -> None:
        self.mode = mode
        self.rules = rules
        self.image = image
        self.recorder = recorder
        self.reruns = Reruns()

    def insn_at(self, target: Target, arch: archmod.ArchInfo, pc: int, tid: int | None = None) -> Insn | None:
        return self.rules.insn_at(target, arch, pc, tid)

    def record(self, target: Target, arch: archmod.ArchInfo, tid: int, info: SigInfo,
               decoded: tuple[Insn | None, Access | None, bool | None] | None = None,
               pc: int | None = None) -> bool:
        """Record one trapped access; True when the user asked to stop at it. `decoded`: what
        an engine with its own decoder found (engines/fixup.py: SPARC, Alpha), instead of the
        rules' decode. `pc`: the instruction's, when it is not the thread's PC (the step engine
        checks a Thumb IT block at its IT instruction)."""
        if pc is None:
            pc = target.read_register(arch.pc, tid)
        module, system = self.image.module_of(target, pc)
        buffer = self.recorder.buffer
        if not self.rules.scope.includes(module, system):
            buffer.ignore(module.name if module else None)
            return False
        insn, acc, explained = self.rules.analyse(target, arch, tid, pc) if decoded is None else decoded
        pid = target.pid() or 0
        va = acc.va if acc is not None else (info.addr or None)
        fault = Fault(
            seq=buffer.next_seq(),
            time=buffer.now(),
            pid=pid,
            tid=tid,
            cpu=self.recorder.cpu_of(pid, tid) if pid else None,
            pc=pc,
            va=va,
            size=acc.size if acc is not None else None,
            access=acc.kind if acc is not None else None,
            insn=insn.text if insn is not None else None,
            policy=self.rules.policy.name,
            explained=explained,
            cost=classify(insn, acc, arch.name),
            vector=is_vector(insn),
        )
        self.recorder.add(fault)
        self.image.resolve(pc)  # named with the module map of the fault's own time
        if va is not None and self.recorder.wants_data(pc, self.mode.breaking):
            self.recorder.name_data(target, tid, pc, va, self.image.module_map(target))
        return self.mode.breaking

    def new_process(self) -> None:
        """A run, an attach or an exec: addresses mean something new."""
        self.rules.new_process()
        self.image.new_process()
        self.recorder.new_process()
