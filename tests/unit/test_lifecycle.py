"""The process lifecycle (engines/lifecycle.py) with a fake Target and StepControl: what the trap
and the step engine do at the arm point, an attach, a fault, a new process, a thread's end, an
exit, a detach and `off`, and what each tells on the event bus. The adapters only translate
their debugger's events into these calls (tests/gdb, tests/lldb check that they do)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from stepfakes import FakeControl
from stepfakes import FakeTarget as _FakeTarget

from ualdbg.core.target import SigInfo
from ualdbg.engines.faultpath import Decision
from ualdbg.engines.lifecycle import Events, Kind, arm_function
from ualdbg.engines.session import Session
from ualdbg.engines.step import ScopeRequest
from ualdbg.isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP
from ualdbg.render.report import break_text

AC, TF = 0x40000, 0x100
# 0x1000: mov rax, qword ptr [rdi] (an 8-byte read); 0x1003: call 0x2000
CODE = {0x1000: bytes.fromhex("488b07" "e8f80f0000")}
FAULT = SigInfo(SIGBUS, BUS_ADRALN, None)


class FakeTarget(_FakeTarget):
    """stepfakes' one-thread target with a pid and a thread list the test changes."""

    def __init__(self, pid: int | None = 4242) -> None:
        super().__init__({"eflags": 0x202, "rip": 0x1000, "rdi": 0x5001, "rsp": 0x7000}, CODE)
        self._pid = pid
        self.tids = [7]

    def pid(self) -> int | None:
        return self._pid

    def threads(self) -> list[int]:
        return list(self.tids)


def _session(tracing: bool = True, breaking: bool = False) -> tuple[Session, list[tuple[Kind, Any]]]:
    s = Session("fake")
    s.mode.tracing, s.mode.breaking = tracing, breaking
    told: list[tuple[Kind, Any]] = []
    for kind in Kind:
        s.events.subscribe(kind, lambda payload, kind=kind: told.append((kind, payload)))
    return s, told


def _kinds(told: list[tuple[Kind, Any]]) -> list[Kind]:
    return [kind for kind, _ in told]


def _step_session(tracing: bool = True) -> tuple[Session, list[tuple[Kind, Any]]]:
    s, told = _session(tracing)
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1008",)), "natural")
    return s, told


# -- the bus ---------------------------------------------------------------------------------------
def test_events_reach_every_handler_in_order_until_unsubscribed() -> None:
    bus = Events()
    got: list[str] = []
    bus.subscribe(Kind.EXITED, lambda p: got.append(f"a{p}"))
    drop = bus.subscribe(Kind.EXITED, lambda p: got.append(f"b{p}"))
    bus.subscribe(Kind.OFF, lambda p: got.append("off"))
    bus.emit(Kind.EXITED, 1)
    drop()
    drop()  # twice is harmless
    bus.emit(Kind.EXITED, 2)
    bus.emit(Kind.NEW_PROCESS, 3)  # no handler
    assert got == ["a1", "b1", "a2"]


# -- arming ----------------------------------------------------------------------------------------
def test_arm_point_arms_nothing_when_ualdbg_is_not_armed() -> None:
    s, told = _session(tracing=False)
    t = FakeTarget()
    assert s.lifecycle.arm_point(t, FakeControl()) is False
    assert not s.engine.active and not t.regs["eflags"] & AC and told == []
    assert s.program.pid is None


def test_arm_point_arms_the_trap_engine_in_every_thread() -> None:
    s, told = _session()
    t = FakeTarget()
    control = FakeControl()
    assert s.lifecycle.arm_point(t, control) is True
    assert s.engine.active and s.engine.armed == {7} and t.regs["eflags"] & AC
    assert s.program.pid == 4242 and told == [(Kind.ARMED, t)] and control.calls == []


def test_arm_point_arms_the_step_engine_instead_when_chosen() -> None:
    s, told = _step_session()
    t = FakeTarget()
    control = FakeControl()
    assert s.lifecycle.arm_point(t, control) is True
    assert not s.engine.active and not t.regs["eflags"] & AC
    assert s.step.armed and s.step.control is control
    assert ("break", 0x1000) in control.calls and ("step", 7) in control.calls
    assert told == [(Kind.STEP_ARMED, t)]


def test_arm_at_start_only_with_at_start() -> None:
    s, told = _session()
    t = FakeTarget()
    assert s.lifecycle.arm_at_start(t) is False and not s.engine.active
    s.mode.at = "start"
    assert s.lifecycle.arm_at_start(t) is True and s.engine.active and told == [(Kind.ARMED, t)]
    s.mode.tracing = False
    s.engine.forget_threads()
    assert s.lifecycle.arm_at_start(t) is False and not s.engine.active


def test_attached_arms_once_where_the_process_is() -> None:
    s, told = _session()
    t = FakeTarget()
    assert s.lifecycle.attached(t, FakeControl()) == "ualdbg: attached: armed 1 thread(s)"
    assert s.engine.active and s.program.pid == 4242
    assert s.lifecycle.attached(t, FakeControl()) is None  # armed already: nothing to say
    assert _kinds(told) == [Kind.ARMED]
    s2, _ = _session(tracing=False)
    assert s2.lifecycle.attached(FakeTarget(), FakeControl()) is None and not s2.engine.active


def test_attached_arms_the_step_engine_once() -> None:
    s, told = _step_session()
    t = FakeTarget()
    said = s.lifecycle.attached(t, FakeControl())
    assert said == f"ualdbg: attached: step engine armed: {s.step.describe()}" and s.step.armed
    assert s.lifecycle.attached(t, FakeControl()) is None
    assert not s.engine.active and _kinds(told) == [Kind.STEP_ARMED]


# -- faults and stops ------------------------------------------------------------------------------
def test_a_traced_fault_is_recorded_told_and_resumed() -> None:
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.stops.fault(t, FAULT) is Decision.RESUME and s.stops.take_report(7) is None
    assert s.buffer.total == 1 and told[-1] == (Kind.FAULT_RECORDED, Decision.RESUME)
    assert not t.regs["eflags"] & AC and t.regs["eflags"] & TF  # the instruction runs once unarmed


def test_a_break_fault_stops_with_its_report() -> None:
    s, told = _session(tracing=False, breaking=True)
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.stops.fault(t, FAULT) is Decision.STOP
    report = break_text(s.stops.take_report(7), color=False)  # held for the stop the user sees, once
    assert report and "PC = 0x1000" in report and s.stops.take_report(7) is None
    assert told[-1] == (Kind.FAULT_RECORDED, Decision.STOP)


def test_a_signal_that_is_not_ours_is_neither_recorded_nor_told() -> None:
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.stops.fault(t, SigInfo(SIGBUS, 2, 0x1234)) is Decision.NOT_OURS  # BUS_ADRERR: the program's
    assert s.stops.take_report(None) is None
    assert s.buffer.total == 0 and Kind.FAULT_RECORDED not in _kinds(told)


def test_a_stop_arms_threads_no_hook_saw_born() -> None:
    s, _ = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    t.tids = [7, 8]
    t.regs["eflags"] = 0x202  # (one register file: thread 8 reads as unarmed)
    s.stops.stopped(t)
    assert s.engine.armed == {7, 8} and t.regs["eflags"] & AC


def test_a_stop_when_not_armed_changes_nothing() -> None:
    s, _ = _session(tracing=False)
    t = FakeTarget()
    s.stops.stopped(t)
    assert not s.engine.armed and not t.regs["eflags"] & AC


# -- processes and threads -------------------------------------------------------------------------
def test_a_new_process_forgets_every_thread_until_its_arm_point() -> None:
    s, told = _step_session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    s.lifecycle.new_process(99)
    assert s.program.pid == 99 and not s.step.armed and not s.step.threads
    assert told[-1] == (Kind.NEW_PROCESS, 99)
    s2, _ = _session()
    s2.lifecycle.arm_point(t, FakeControl())
    s2.lifecycle.new_process(100)
    assert not s2.engine.active and not s2.engine.armed


def test_thread_ends_are_forgotten_by_both_engines() -> None:
    s, told = _session()
    t = FakeTarget()
    t.tids = [7, 8]
    s.lifecycle.arm_point(t, FakeControl())
    s.step.returns[8] = [(0x1008, 0x7000)]  # as if stepped, out of the scope for a call
    s.lifecycle.thread_exited(8)
    assert s.engine.armed == {7} and 8 not in s.step.returns and told[-1] == (Kind.THREAD_EXITED, 8)
    t.tids = [7, 9]
    s.stops.stopped(t)  # 9 is armed at the stop
    s.lifecycle.threads_gone([9])  # a debugger that tells no thread's end: 7 is gone
    assert s.engine.armed == {9} and told[-1] == (Kind.THREAD_EXITED, 7)


def test_an_exit_forgets_threads_and_ends_the_clock() -> None:
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.lifecycle.exited(ended_at=123.0) is None
    assert not s.engine.active and not s.engine.armed and s.buffer.stopped_at == 123.0
    assert told[-1] == (Kind.EXITED, None)
    s.lifecycle.exited(ended_at=456.0, keep_end=True)  # an end already set stays
    assert s.buffer.stopped_at == 123.0
    s.lifecycle.exited(ended_at=456.0)
    assert s.buffer.stopped_at == 456.0
    s.buffer.stopped_at = None
    s.lifecycle.exited(keep_end=True)  # now, when no time is given
    assert s.buffer.stopped_at is not None and s.buffer.stopped_at > 456.0


def test_an_exit_says_once_that_the_step_scope_was_never_entered() -> None:
    s, _ = _session()
    s.step.configure(ScopeRequest(ranges=("0x3000,0x3008",)), "natural")  # nothing runs there
    control = FakeControl()
    t = FakeTarget()
    s.lifecycle.arm_point(t, control)
    said = s.lifecycle.exited()
    assert said is not None and "was never entered" in said
    assert control.calls[-1] == ("clear", 0) and not s.step.armed
    s.lifecycle.arm_point(t, control)  # the next run, never entered either: said once
    assert s.lifecycle.exited() is None
    s.step.configure(ScopeRequest(ranges=("0x3000,0x3008",)), "natural")  # configured again
    s.lifecycle.arm_point(t, control)
    assert s.lifecycle.exited() is not None


def test_an_exit_of_an_entered_scope_says_nothing() -> None:
    s, _ = _step_session()
    s.lifecycle.arm_point(FakeTarget(), FakeControl())
    assert s.lifecycle.exited() is None


def test_before_detach_no_thread_keeps_a_flag_of_ualdbg() -> None:
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    s.lifecycle.before_detach(t)
    assert not t.regs["eflags"] & (AC | TF) and not s.engine.active and not s.engine.armed
    assert told[-1] == (Kind.DETACHING, t)
    s.lifecycle.before_detach(None)  # no process to reach: nothing to do but tell
    assert told[-1] == (Kind.DETACHING, None)


def test_before_detach_stepped_threads_stop_stepping_and_the_scope_stays() -> None:
    s, _ = _step_session()
    t = FakeTarget()
    control = FakeControl()
    s.lifecycle.arm_point(t, control)
    assert s.step.threads
    s.lifecycle.before_detach(t)
    assert control.calls[-2:] == [("unstep", 7), ("clear", 0)]
    assert not s.step.threads and not s.step.armed and s.step.enabled  # an attach arms it again


def test_off_disarms_both_engines() -> None:
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    s.lifecycle.disarm(t)
    assert not t.regs["eflags"] & AC and not s.engine.active and told[-1] == (Kind.OFF, set())
    s2, _ = _step_session()
    control = FakeControl()
    s2.lifecycle.arm_point(t, control)
    s2.lifecycle.disarm(t)
    assert ("unstep", 7) in control.calls and not s2.step.enabled and not s2.step.threads


def test_a_task_creating_syscall_starts_the_new_task_unarmed() -> None:
    s, _ = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    s.lifecycle.syscall(t, 7, 435, entry=True)  # clone3, as lldb's site breakpoint knows it
    assert not t.regs["eflags"] & AC and s.engine.in_clone == {7}
    s.lifecycle.syscall(t, 7, 435, entry=False)
    assert t.regs["eflags"] & AC and not s.engine.in_clone
    t.regs.update(orig_rax=56, rax=-38 & 0xFFFFFFFFFFFFFFFF)  # gdb's catchpoint: read from registers
    s.lifecycle.syscall(t)
    assert not t.regs["eflags"] & AC and s.engine.in_clone == {7}
    s2, _ = _session()
    s2.lifecycle.syscall(t, 7, 435, entry=True)  # not armed: nothing to do
    assert not s2.engine.in_clone


def test_a_stripped_program_is_armed_at_libc_start_main_and_told_so() -> None:
    assert arm_function(True) == ("main", None)
    name, said = arm_function(False)
    assert name == "__libc_start_main" and said is not None and "no symbol `main`" in said


# -- what the session composes -------------------------------------------------------------------
def _holds(obj: object, what: object, depth: int = 2) -> bool:
    """Whether `obj` keeps `what` among its attributes (or theirs, `depth` levels down)."""
    for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if value is what or (depth > 1 and not isinstance(value, type) and _holds(value, what, depth - 1)):
            return True
    return False


def test_no_engine_holds_the_session() -> None:
    """The engines are given the fault path and the ArchInfo, never the session (issue 30)."""
    s, _ = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.engine.arch is s.lifecycle.arch and s.engine.arch is not None and s.engine.arch.name == "x86_64"
    for engine in (s.engine, s.step, s.step.checks, s.engine.slots):
        assert not _holds(engine, s), type(engine).__name__
    assert s.engine.faults is s.faults and s.step.faults is s.faults


def test_the_step_engine_sets_the_policy_through_the_rules() -> None:
    s, _ = _step_session()  # --policy natural
    assert s.rules.policy.name == "natural"
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1008",)), None)  # no --policy: x86's AC rule
    assert s.rules.policy.name == "ac"


# -- the stops: reports held, faults owed after `off` ----------------------------------------------
def test_a_report_is_held_per_thread_and_the_latest_is_what_gdb_shows() -> None:
    s, _ = _session(tracing=False, breaking=True)
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.stops.fault(t, FAULT) is Decision.STOP
    older = s.stops.reports[7]
    s.stops.reports[9] = replace(older, fault=replace(older.fault, pc=0x2000))  # as if held before, never shown
    s.stops.reports[7] = s.stops.reports.pop(7)  # thread 7's is the latest
    text = break_text(s.stops.take_report(None), color=False)
    assert text and "PC = 0x1000" in text and not s.stops.reports  # one stop at a time: the rest go
    s.stops.reports[7] = older
    s.lifecycle.exited(1.0)
    assert s.stops.take_report(7) is None  # no stop shows a gone process's report


def test_faults_owed_after_off_are_let_go_once_each() -> None:
    s, _ = _session()
    stops = s.stops
    stops.owe([7, 8])
    assert not stops.owed_fault(7, SigInfo(SIGTRAP, 2, None))  # not its fault: the user's business
    assert stops.owed_fault(7, FAULT) and not stops.owed_fault(7, FAULT)  # once
    assert not stops.owed_fault(9, FAULT)  # a thread that owed nothing
    assert stops.paid(8) and not stops.owed  # lldb: the last one stepped over its fault


def test_a_step_over_a_fault_still_unreported_at_off_is_let_go_once() -> None:
    # gdb, all-stop: a thread ran its faulting instruction with AC clear and TF set, and its trap
    # came while gdb stopped everything for another thread; `off` clears its TF, but the trap is
    # reported at the next resume. It is ualdbg's, let go once, never shown to the user.
    s, told = _session()
    t = FakeTarget()
    s.lifecycle.arm_point(t, FakeControl())
    assert s.stops.fault(t, FAULT) is Decision.RESUME and t.regs["eflags"] & TF
    s.lifecycle.disarm(t)
    assert told[-1] == (Kind.OFF, {7}) and not t.regs["eflags"] & (AC | TF)
    stops = s.stops
    assert stops.owes() and not stops.owed_fault(7, FAULT)  # its fault was taken: only its trap
    assert stops.owed_fault(7, SigInfo(SIGTRAP, 2, None)) and not stops.owes()
    assert not stops.owed_fault(7, SigInfo(SIGTRAP, 2, None))  # once: the next is the user's business
    stops.owed_steps.add(8)
    stops.keep_owed([9])  # gdb found no trap pending for it
    assert not stops.owes()
