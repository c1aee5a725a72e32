"""The step engine's check of one instruction before it runs (step.py decides which): every
memory operand's address computed from the thread's registers, checked against the policy,
and each access that breaks it recorded at the instruction's PC; a Thumb-2 IT block is checked
as a whole at its IT instruction."""
from __future__ import annotations

from ..core.target import SigInfo, Target
from ..isa import arch as archmod
from ..isa.decode import Insn, InsnDecoder, RegisterUnavailable, accesses, decoder_for
from ..lazyclass import dataclass
from .faultpath import FaultPath
from .registers import LazyRegisters

TRAP_TRACE = 2  # si_code of a single-step trap


@dataclass
class StepStats:
    steps: int = 0  # in-scope instructions checked (each one single-step)
    entries: int = 0  # times a thread entered the scope through an entry breakpoint
    calls_run: int = 0  # calls out of the scope run at full speed
    faults: int = 0  # policy violations found
    unchecked: int = 0  # Thumb IT block instructions whose address an earlier one of the block changes

    def line(self) -> str:
        return (f"{self.steps} steps, {self.entries} entries, {self.calls_run} calls run at full speed, "
                f"{self.faults} violations" + (f", {self.unchecked} IT-block accesses not computable ahead"
                                               if self.unchecked else ""))


class StepCheck:
    """Checks the instructions of one step configuration and counts them (`stats`)."""

    def __init__(self, faults: FaultPath) -> None:
        self.faults = faults
        self.stats = StepStats()
        self.thumb: InsnDecoder | None = None  # 32-bit ARM's decoder of an IT block (isa/arch/arm.py)

    def check(self, target: Target, a: archmod.ArchInfo, tid: int, pc: int) -> tuple[Insn | None, bool]:
        """The instruction at `pc`, about to run in `tid`, and whether to stop before it (break:
        it breaks the policy)."""
        faults = self.faults
        self.stats.steps += 1
        insn = faults.insn_at(target, a, pc, tid)
        # An instruction recorded here that then traps too (ARMv7's ldrd, MIPS's lw): the signal
        # engine performs it without counting it a second time (FixupEngine.reported).
        faults.reruns.passed(tid, pc)
        if insn is not None and insn.mode == "thumb" and insn.name.startswith("it"):
            return insn, self._check_it_block(target, a, tid, insn)
        if insn is None or not insn.operands:
            return insn, False
        try:
            found = accesses(insn, LazyRegisters(target, tid))
        except (RegisterUnavailable, KeyError):
            found = []
        if not any(faults.rules.policy.violates(acc, insn) for acc in found):
            return insn, False
        self.stats.faults += 1
        stop = faults.record(target, a, tid, SigInfo(archmod.SIGTRAP, TRAP_TRACE, None))
        faults.reruns.expect(tid, pc)
        return insn, stop

    def _check_it_block(self, target: Target, a: archmod.ArchInfo, tid: int, it: Insn) -> bool:
        """A Thumb-2 IT instruction: gdb puts no breakpoint inside its block (it moves one there
        to the IT), so the block's instructions are checked here, before any of them runs, each
        recorded at its own PC. One whose address or condition depends on an earlier
        instruction of the block cannot be computed ahead: counted in `stats.unchecked`."""
        from ..isa.arch import arm

        faults = self.faults
        if self.thumb is None:
            self.thumb = decoder_for(a.name)
        regs = LazyRegisters(target, tid)
        try:
            block = arm.it_block(self.thumb, it, target.read_memory(it.next_pc, 16), regs)
        except (RegisterUnavailable, KeyError):
            return False
        stop = False
        for insn, found in block:
            if found is None:
                self.stats.unchecked += 1
                continue
            acc = next((acc for acc in found if faults.rules.policy.violates(acc, insn)), None)
            if acc is None:
                continue
            self.stats.faults += 1
            stop |= faults.record(target, a, tid, SigInfo(archmod.SIGTRAP, TRAP_TRACE, None),
                                  decoded=(insn, acc, True), pc=insn.pc)
            faults.reruns.expect(tid, insn.pc)
        return stop
