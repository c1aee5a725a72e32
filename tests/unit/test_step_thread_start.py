"""StepEngine.on_thread_start (engines/step.py): lldb's new threads under --everywhere. lldb steps
by thread plans a new thread does not inherit, so its adapter reports each thread at the exit of
the clone that made it; the engine adopts the thread there (syscall result 0) and checks its
current instruction, and leaves alone the creating thread and every other scope."""
from __future__ import annotations

from stepfakes import FakeControl, FakeTarget

from ualdbg.engines.session import Session
from ualdbg.engines.step import ScopeRequest, StepDecision

# 0x1000: mov rax, qword ptr [rdi]   (8-byte read)
CODE = {0x1000: bytes.fromhex("488b07" "c3")}
MAPS = "00001000-00002000 r-xp 00000000 00:00 0 /nonexistent/prog\n"


class MappedTarget(FakeTarget):
    def maps_text(self) -> str | None:
        return MAPS


def _armed(request: ScopeRequest) -> tuple[Session, MappedTarget, FakeControl]:
    s = Session("fake")
    s.mode.tracing = True
    s.step.configure(request, "natural")
    t = MappedTarget({"eflags": 0x202, "rip": 0x9000, "rdi": 0x5001, "rax": 0, "rsp": 0x7000}, CODE)
    c = FakeControl()
    s.lifecycle.arm_now(t, c)
    return s, t, c


def test_everywhere_adopts_the_new_thread_where_clone_returned_0() -> None:
    s, t, c = _armed(ScopeRequest(everywhere=True))
    assert c.calls == [("step", 7)] and s.step.stepping(7)  # the arming thread
    t.regs.update(rip=0x1000, rax=8)  # the creating thread's return: the new thread's id
    assert s.step.on_thread_start(t, 9) is StepDecision.RUN and not s.step.stepping(9)
    t.regs["rax"] = 0  # the new thread: stepped from here, its first instruction checked
    assert s.step.on_thread_start(t, 8) is StepDecision.STEP
    assert c.calls[-1] == ("step", 8) and s.step.stepping(8)
    assert s.buffer.total == 1 and s.recorder.last_fault is not None and s.recorder.last_fault.tid == 8 and s.recorder.last_fault.va == 0x5001
    # seen again (a second site on its way, or a stale stop): not adopted twice
    assert s.step.on_thread_start(t, 8) is StepDecision.RUN and c.calls.count(("step", 8)) == 1


def test_other_scopes_leave_new_threads_to_their_entry_breakpoints() -> None:
    s, t, c = _armed(ScopeRequest(ranges=("0x1000,0x1004",)))
    t.regs.update(rip=0x1000, rax=0)
    assert s.step.on_thread_start(t, 8) is StepDecision.RUN
    assert not s.step.stepping(8) and ("step", 8) not in c.calls and s.buffer.total == 0


def test_not_armed_adopts_nothing() -> None:
    s = Session("fake")
    s.step.configure(ScopeRequest(everywhere=True), "natural")
    t = MappedTarget({"eflags": 0x202, "rip": 0x1000, "rdi": 0x5001, "rax": 0, "rsp": 0x7000}, CODE)
    assert s.step.on_thread_start(t, 8) is StepDecision.RUN and not s.step.stepping(8)
