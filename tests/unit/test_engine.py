"""The trap engine and the session's fault path against a fake Target (no debugger): the
decisions, the AC/TF flag dance, scope, and the exact counters."""
from __future__ import annotations

from ualdbg.core.model import AccessKind
from ualdbg.core.target import FaultStepper, SigInfo, Target
from ualdbg.core.trace import TraceBuffer
from ualdbg.engines.faultpath import Decision
from ualdbg.engines.modulescope import Scope
from ualdbg.engines.session import Session
from ualdbg.isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP

AC, TF = 0x40000, 0x100
PROG = 0x555555554000
LIBC = 0x7FFFF7C00000
MAPS = f"""{PROG:x}-{PROG + 0x2000:x} r-xp 00000000 00:00 1 /nonexistent/prog
{LIBC:x}-{LIBC + 0x1000:x} r-xp 00000000 00:00 2 /usr/lib/x86_64-linux-gnu/libc.so.6
"""
ADD_RMW = bytes.fromhex("48830001")  # add qword ptr [rax], 1
INVALID = bytes.fromhex("06")  # push es: invalid in 64-bit mode


class FakeTarget(Target):
    debugger = "fake"

    def __init__(self) -> None:
        self.regs = {1: {"eflags": 0x246, "rip": PROG + 0x100, "rax": 0x1001, "orig_rax": 0}, 2: {"eflags": 0x246, "rip": PROG, "rax": 0, "orig_rax": 0}}
        self.mem = {PROG + 0x100: ADD_RMW, PROG + 0x200: INVALID, LIBC + 0x10: ADD_RMW}
        self.tid = 1
        self.info = SigInfo(SIGBUS, BUS_ADRALN, None)

    def pid(self) -> int:
        return 1

    def arch(self) -> str:
        return "i386:x86-64"

    def current_tid(self) -> int:
        return self.tid

    def threads(self) -> list[int]:
        return [1, 2]

    def read_register(self, name: str, tid: int | None = None) -> int:
        return self.regs[tid or self.tid][name]

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        self.regs[tid or self.tid][name] = value

    def read_memory(self, addr: int, size: int) -> bytes:
        return (self.mem.get(addr, b"") + b"\x90" * 16)[:size]

    def siginfo(self) -> SigInfo:
        return self.info

    def maps_text(self) -> str:
        return MAPS


def armed(breaking: bool = False) -> tuple[Session, FakeTarget]:
    s = Session("fake")
    s.mode.breaking, s.mode.tracing = breaking, not breaking
    t = FakeTarget()
    s.lifecycle.arm_now(t)
    return s, t


def test_arm_sets_ac_in_every_thread_and_disarm_clears_it() -> None:
    s, t = armed()
    assert all(t.regs[tid]["eflags"] & AC for tid in (1, 2))
    s.engine.disarm(t)
    assert not any(t.regs[tid]["eflags"] & (AC | TF) for tid in (1, 2))


def test_fault_then_trap_resumes_with_ac_back() -> None:
    s, t = armed()
    assert s.engine.on_signal(t) is Decision.RESUME
    flags = t.regs[1]["eflags"]
    assert not flags & AC and flags & TF  # the instruction runs once with AC clear
    fault = s.recorder.last_fault
    assert fault is not None and fault.va == 0x1001 and fault.size == 8 and fault.access is AccessKind.READ_WRITE
    assert fault.explained is True
    t.info = SigInfo(SIGTRAP, 2, None)
    assert s.engine.on_signal(t) is Decision.RESUME
    assert t.regs[1]["eflags"] & AC and not t.regs[1]["eflags"] & TF
    assert s.buffer.total == 1 and s.buffer.counters[PROG + 0x100].count == 1


def test_break_mode_stops_and_other_sigbus_is_not_ours() -> None:
    s, t = armed(breaking=True)
    assert s.engine.on_signal(t) is Decision.STOP
    t2 = FakeTarget()
    s2, _ = armed()
    s2.lifecycle.arm_now(t2)
    t2.info = SigInfo(SIGBUS, 2, 0x1234)  # BUS_ADRERR: a real bus error, the program's own
    assert s2.engine.on_signal(t2) is Decision.NOT_OURS


def test_not_armed_is_not_ours_and_a_programs_own_tf_is_kept() -> None:
    s = Session("fake")
    t = FakeTarget()
    s.arch_of(t)
    assert s.engine.on_signal(t) is Decision.NOT_OURS
    s, t = armed()
    t.regs[1]["eflags"] |= TF  # the program single-steps itself
    assert s.engine.on_signal(t) is Decision.RESUME
    t.info = SigInfo(SIGTRAP, 2, None)
    assert s.engine.on_signal(t) is Decision.NOT_OURS  # its SIGTRAP is its own
    assert t.regs[1]["eflags"] & TF


def test_out_of_scope_faults_are_counted_as_ignored() -> None:
    s, t = armed()
    t.regs[1]["rip"] = LIBC + 0x10
    assert s.engine.on_signal(t) is Decision.RESUME
    assert s.buffer.total == 0 and s.buffer.ignored == 1 and s.buffer.ignored_by_module == {"libc.so.6": 1}
    s.rules.use_scope(Scope(all_modules=True))
    t.info = SigInfo(SIGTRAP, 2, None)
    s.engine.on_signal(t)
    t.info = SigInfo(SIGBUS, BUS_ADRALN, None)
    assert s.engine.on_signal(t) is Decision.RESUME and s.buffer.total == 1


def test_undecodable_instruction_is_reported_as_unknown() -> None:
    s, t = armed()
    t.regs[1]["rip"] = PROG + 0x200
    s.engine.on_signal(t)
    assert s.recorder.last_fault is not None and s.recorder.last_fault.explained is None and s.recorder.last_fault.va is None


def test_aligned_decoded_access_is_flagged_as_unexplained() -> None:
    s, t = armed()
    t.regs[1]["rax"] = 0x1000  # the decoded operand is aligned: the CPU must have meant another
    s.engine.on_signal(t)
    assert s.recorder.last_fault is not None and s.recorder.last_fault.explained is False


def test_clone_syscall_starts_children_unarmed() -> None:
    s, t = armed()
    t.regs[1].update(orig_rax=56, rax=(-38) & (2**64 - 1))  # clone entry: rax = -ENOSYS
    s.engine.on_syscall(t)
    assert not t.regs[1]["eflags"] & AC
    t.regs[1]["rax"] = 1234  # exit in the parent
    s.engine.on_syscall(t)
    assert t.regs[1]["eflags"] & AC


def test_ring_wraps_but_counts_stay_exact() -> None:
    s, t = armed()
    s.buffer.resize(3)
    for _ in range(10):
        t.info = SigInfo(SIGBUS, BUS_ADRALN, None)
        s.engine.on_signal(t)
        t.info = SigInfo(SIGTRAP, 2, None)
        s.engine.on_signal(t)
    b: TraceBuffer = s.buffer
    assert b.total == 10 and len(b.records) == 3 and b.dropped == 7
    assert [f.seq for f in b.records] == [8, 9, 10] and b.counters[PROG + 0x100].count == 10


class StepperTarget(FakeTarget, FaultStepper):
    """A debugger that single-steps the fault itself (lldb), here landing where told."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[int] = []
        self.to: list[int | None] = []

    def step_over_fault(self, tid: int, to: int | None = None) -> None:
        self.queued.append(tid)
        self.to.append(to)


def test_a_debuggers_step_that_ends_outside_the_instructions_successors_is_said_once() -> None:
    """issue 32: lldb once mis-stepped (an int3 inside a `jg`). The engine checks where the
    debugger's step of a fault ended: at the next instruction, fine; still at the fault, the
    instruction runs again and its fault is not counted twice; anywhere else, one line (and
    a note in the trace) per instruction."""
    s = Session("fake")
    s.mode.tracing = True
    t = StepperTarget()
    s.lifecycle.arm_now(t)
    fault_pc = PROG + 0x100

    def fault_and_step(lands: int) -> str | None:
        t.regs[1]["rip"] = fault_pc
        t.regs[1]["eflags"] |= AC
        assert s.engine.on_signal(t) is Decision.RESUME and t.queued[-1] == 1
        t.regs[1]["rip"] = lands
        return s.stops.fault_stepped(t, 1)

    assert fault_and_step(fault_pc + len(ADD_RMW)) is None and s.buffer.total == 1
    assert t.regs[1]["eflags"] & AC  # armed again
    assert t.to[-1] is None  # single-stepped
    said = fault_and_step(fault_pc + 2)  # inside the instruction: not where it can go
    assert said is not None and f"{fault_pc:#x} ended at {fault_pc + 2:#x}" in said
    assert fault_and_step(fault_pc + 2) is None  # said once
    # From then on the debugger runs that fault to the instruction's successor (a breakpoint).
    assert t.to[-1] == fault_pc + len(ADD_RMW)
    assert s.buffer.total == 3
    assert fault_and_step(fault_pc) is None  # did not run: runs again...
    t.regs[1]["eflags"] |= AC
    assert s.engine.on_signal(t) is Decision.RESUME
    assert s.buffer.total == 4  # ...and its fault again is not a fifth
    assert any("ended at" in n for n in s.result().notes or [])
