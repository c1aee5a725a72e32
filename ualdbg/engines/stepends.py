"""Where a debugger's own single-step of a fault may end (lldb's FaultStep plans: a FaultStepper
target), checked when it has: the next instruction, a direct branch's target, the instruction
again for a rep string one (isa.insn.successors). lldb 19 once landed 0x34000000 below a `jg`'s
target (an int3 of ualdbg's inside the instruction, fixed since); issue 32 asks that such a step
be seen. Still at the fault, the instruction did not run: it runs again, and the trap engine does
not count its fault twice. Anywhere else it ran as other bytes, or the debugger lost track: said
once per instruction, and a note in the trace. Later faults at such an instruction are not
single-stepped: the debugger runs the thread to the instruction's one successor (a breakpoint
there), when it has one (not a branch, not a rep string one). UALDBG_STEP_FAULTS_BY_BREAKPOINT=1
does so for every fault (a diagnostic, and how the tests run that path in a real lldb)."""
from __future__ import annotations

import os

from ..isa.insn import Insn, successors


class StepEnds:
    def __init__(self) -> None:
        self.stepping: dict[int, tuple[int, frozenset[int] | None]] = {}  # tid -> (PC, where it may end)
        self.missteps: dict[int, tuple[int, tuple[int, ...]]] = {}  # PC -> (where it went, expected)
        self.always = os.environ.get("UALDBG_STEP_FAULTS_BY_BREAKPOINT") == "1"

    def by_breakpoint(self, pc: int, insn: Insn | None) -> int | None:
        """Where to run the fault at `pc` to instead of single-stepping it: the instruction's one
        successor, once a single-step of it landed elsewhere (None: single-step it)."""
        if insn is None or insn.rep or insn.flow != "next" or not (self.always or pc in self.missteps):
            return None
        return insn.next_pc

    def expect(self, tid: int, pc: int, insn: Insn | None) -> int | None:
        """The debugger is to step the fault at `pc` in `tid` (None: the decoder cannot say);
        returns where to run it to instead of a single-step (by_breakpoint), or None."""
        self.stepping[tid] = (pc, successors(insn) if insn is not None else None)
        return self.by_breakpoint(pc, insn)

    def ended(self, tid: int, now: int) -> tuple[str | None, int | None]:
        """The step of `tid` ended at `now`: (the line to say, first time only; the PC whose fault
        runs again and must not be counted twice)."""
        stepped = self.stepping.pop(tid, None)
        if stepped is None:
            return None, None
        pc, expected = stepped
        if expected is None or now in expected:
            return None, None
        if now == pc:
            return None, pc
        if pc in self.missteps:
            return None, None
        self.missteps[pc] = (now, tuple(sorted(expected)))
        return _note(pc, *self.missteps[pc]), None

    def notes(self) -> list[str]:
        return [_note(pc, now, expected) for pc, (now, expected) in sorted(self.missteps.items())]

    def forget(self, tid: int) -> None:
        self.stepping.pop(tid, None)

    def clear(self) -> None:
        self.stepping.clear()


def _note(pc: int, now: int, expected: tuple[int, ...]) -> str:
    return (f"the debugger's single-step of the faulting instruction at {pc:#x} ended at {now:#x}, not at "
            f"{' or '.join(f'{e:#x}' for e in expected)}: the program may not have run that instruction as it "
            "would without ualdbg (a breakpoint inside its bytes?)"
            + (f"; its later faults run to {expected[0]:#x} by a breakpoint instead" if len(expected) == 1 else ""))
