"""The step engine's decisions (engines/step.py) with a fake Target and StepControl: checks before
each instruction, calls out of the scope run to a return breakpoint, entries, break stops."""
from __future__ import annotations

from stepfakes import FakeControl
from stepfakes import FakeTarget as _FakeTarget

from ualdbg.engines.session import Session
from ualdbg.engines.step import ScopeRequest, StepDecision

# 0x1000: mov rax, qword ptr [rdi]       (8-byte read)
# 0x1003: call 0x2000                    (out of the scope)
# 0x1008: add qword ptr [rdi + rdx*8], 1 (8-byte read-write)
# 0x100d: ret
CODE = {0x1000: bytes.fromhex("488b07" "e8f80f0000" "488304d701" "c3")}


def FakeTarget(regs: dict[str, int]) -> _FakeTarget:
    return _FakeTarget({"eflags": 0x202, **regs}, CODE)


def _session(policy: str, breaking: bool = False) -> Session:
    s = Session("fake")
    s.mode.tracing, s.mode.breaking = not breaking, breaking
    s.step.configure(ScopeRequest(ranges=("0x1000,0x100e",)), policy)
    return s


def test_checks_each_instruction_and_runs_calls_out_of_scope() -> None:
    s = _session("natural")
    t = FakeTarget({"rip": 0x1000, "rdi": 0x5001, "rdx": 0, "rsp": 0x7000})
    c = FakeControl()
    s.lifecycle.arm_now(t, c)
    # at the range start: stepping starts and `mov rax, [rdi]` (8 bytes at 1 mod 8) is recorded
    assert ("break", 0x1000) in c.calls and ("step", 7) in c.calls
    assert s.buffer.total == 1 and s.step.stats.entries == 1
    t.regs["rip"] = 0x1003  # the call: its push goes to an aligned rsp - 8
    assert s.step.on_step(t, 7) is StepDecision.STEP
    t.regs.update(rip=0x2000, rsp=0x6FF8)  # into the callee, outside the scope
    assert s.step.on_step(t, 7) is StepDecision.RUN
    assert c.calls[-2:] == [("unstep", 7), ("break", 0x1008)] and s.step.stats.calls_run == 1
    t.regs.update(rip=0x1008, rsp=0x6000)  # the return address, but a deeper frame: not ours
    assert s.step.on_breakpoint(t, 7) is StepDecision.RUN
    t.regs["rsp"] = 0x7000  # the call returns
    assert s.step.on_breakpoint(t, 7) is StepDecision.STEP
    assert s.buffer.total == 2 and s.recorder.last_fault is not None and s.recorder.last_fault.pc == 0x1008
    assert s.recorder.last_fault.policy == "natural" and s.recorder.last_fault.va == 0x5001 and s.recorder.last_fault.size == 8
    t.regs["rip"] = 0x100D  # ret reads [rsp], aligned
    assert s.step.on_step(t, 7) is StepDecision.STEP
    t.regs.update(rip=0x9000, rsp=0x7008)  # returned to the caller: stepping ends
    assert s.step.on_step(t, 7) is StepDecision.RUN and not s.step.threads
    assert s.step.stats.steps == 4 and s.buffer.total == 2
    t.regs["rip"] = 0x1000  # entering again through the entry breakpoint
    assert s.step.on_breakpoint(t, 7) is StepDecision.STEP and s.step.stats.entries == 2


def test_break_stops_before_the_offending_instruction() -> None:
    s = _session("ac", breaking=True)
    t = FakeTarget({"rip": 0x1003, "rdi": 0x5000, "rdx": 0, "rsp": 0x7000})
    c = FakeControl()
    s.lifecycle.arm_now(t, c)  # in the range, not at its start: stepping starts here, no entry counted
    assert s.step.stats.entries == 0 and s.buffer.total == 0
    t.regs.update(rip=0x1008, rdi=0x5004)  # add qword [rdi] at 4 mod 8: #AC would trap
    assert s.step.on_step(t, 7) is StepDecision.STOP
    assert s.recorder.last_fault is not None and s.recorder.last_fault.pc == 0x1008 and s.recorder.last_fault.access is not None


def test_cacheline_policy_counts_only_line_splits() -> None:
    s = _session("cacheline")
    t = FakeTarget({"rip": 0x1000, "rdi": 0x5038, "rdx": 0, "rsp": 0x7000})
    s.lifecycle.arm_now(t, FakeControl())  # 8 bytes at 0x5038 end at 0x503f: no split
    assert s.buffer.total == 0
    t.regs.update(rip=0x1008, rdi=0x503C)  # 8 bytes at 0x503c cross 0x5040
    s.step.on_step(t, 7)
    assert s.buffer.total == 1
