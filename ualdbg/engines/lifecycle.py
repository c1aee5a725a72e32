"""The process lifecycle, written once for every debugger: what the engines do when the arm point
is hit, when a thread stops at an alignment fault, when a process starts, execs, loses a thread,
exits, or is about to be let go (detach, quit), and at `ualdbg off`.

The adapters (adapters/gdb/hooks.py, adapters/lldb/hooks.py) only translate their debugger's
events (gdb.events, catchpoint conditions, lldb's stop hook, breakpoint callbacks) into calls of
`Lifecycle`, and carry out its verdicts with their debugger's mechanics (`handle` settings,
thread plans, breakpoints). What happened is told on the session's `Events` bus, which the
adapters and the batch drivers subscribe to for what is theirs alone (a progress file, an
adapter's own per-process state, a line for the user).

    event           emitted by                       payload
    ARMED           arm_point, attached, arm_at_start  the Target the engine armed
    STEP_ARMED      arm_point, attached              the Target the step engine armed
    FAULT_RECORDED  fault                            the engine's Decision
    NEW_PROCESS     new_process (run, attach, exec)  the pid
                    (syscall: a task made, a mask changed: the engines' own, nothing told)
    THREAD_EXITED   thread_exited, threads_gone      the tid
    EXITED          exited                           None
    DETACHING       before_detach                    the Target (or None)
    OFF             disarm                           None
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from ..core.target import SigInfo, Target
from ..isa.arch import SIGBUS
from .recorder import Decision, FaultRecorder
from .step import StepControl, StepEngine
from .trap import TrapEngine


class Kind(Enum):
    ARMED = "armed"
    STEP_ARMED = "step armed"
    FAULT_RECORDED = "fault recorded"
    NEW_PROCESS = "new process"
    THREAD_EXITED = "thread exited"
    EXITED = "exited"
    DETACHING = "detaching"
    OFF = "off"


Handler = Callable[[Any], None]


class Events:
    """A small synchronous bus: `emit` calls every handler of that kind, in the order they
    subscribed. A handler's exception reaches the emitter (the adapters report it as before)."""

    def __init__(self) -> None:
        self._handlers: dict[Kind, list[Handler]] = {}

    def subscribe(self, kind: Kind, handler: Handler) -> Callable[[], None]:
        """Add a handler; returns what removes it."""
        handlers = self._handlers.setdefault(kind, [])
        handlers.append(handler)

        def unsubscribe() -> None:
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def emit(self, kind: Kind, payload: Any = None) -> None:
        for handler in list(self._handlers.get(kind, ())):
            handler(payload)


def arm_function(has_main: bool) -> tuple[str, str | None]:
    """The function whose entry is the arm point with `--at main`: `main`, or for a stripped
    program libc's `__libc_start_main` (which calls main, after only the program's constructors
    and libc's own start-up); and, for the latter, the line that tells the user."""
    if has_main:
        return "main", None
    return "__libc_start_main", "ualdbg: the program has no symbol `main` (stripped?): arming at __libc_start_main"


class Lifecycle:
    """The decisions of one session over its processes, for the trap and the step engine. Every
    method runs while the debugger has the process stopped (or gone)."""

    def __init__(self, recorder: FaultRecorder, engine: TrapEngine, step: StepEngine,
                 events: Events | None = None, break_report: Callable[[], list[str]] | None = None) -> None:
        self.recorder = recorder
        self.engine = engine
        self.step = step
        self.events = events if events is not None else Events()
        # The report of the recorded fault a STOP shows (Session.break_report: render/report.py).
        self.break_report = break_report if break_report is not None else (lambda: [])

    # -- arming ----------------------------------------------------------------------------------
    def _arm_step(self, target: Target, control: StepControl) -> None:
        self.step.arm(target, control)
        self.events.emit(Kind.STEP_ARMED, target)

    def _arm_trap(self, target: Target) -> None:
        self.engine.arm(target)
        self.events.emit(Kind.ARMED, target)

    def arm_point(self, target: Target, control: StepControl) -> bool:
        """`main` (or the entry, `--at start`) is reached: arm the engine the user chose, if
        ualdbg is armed at all. True when an engine was armed."""
        r = self.recorder
        if not r.armed:
            return False
        r.program.pid = target.pid()
        if self.step.enabled:
            self._arm_step(target, control)
        else:
            self._arm_trap(target)
        return True

    def arm_at_start(self, target: Target) -> bool:
        """A new image (run or exec) is loaded: with `--at start` this is the first moment it can
        be armed (the trap engine; its arm point is the loader's entry). True when armed."""
        r = self.recorder
        if not (r.armed and r.at == "start"):
            return False
        self._arm_trap(target)
        return True

    def attached(self, target: Target, control: StepControl) -> str | None:
        """The first stop of a process ualdbg was armed for before `attach`: its arm point is
        long past, arm where the process is. Returns the line for the user, or None when there
        was nothing to arm (not armed, or armed already)."""
        r = self.recorder
        if not r.armed:
            return None
        if self.step.enabled:
            if self.step.armed:
                return None
            r.program.pid = target.pid()
            self._arm_step(target, control)
            return f"ualdbg: attached: step engine armed: {self.step.describe()}"
        if self.engine.active:
            return None
        r.program.pid = target.pid()
        self._arm_trap(target)
        return f"ualdbg: attached: armed {len(self.engine.armed)} thread(s)"

    # -- stops -----------------------------------------------------------------------------------
    def fault(self, target: Target, info: SigInfo) -> tuple[Decision, list[str] | None]:
        """A thread stopped at a signal ualdbg may own (an alignment SIGBUS, a strict CPU's
        SIGBUS/SIGSEGV): the trap engine decides. Returns its decision and, for STOP, the
        break report to show. A recorded fault is told as FAULT_RECORDED."""
        decision = self.engine.on_signal(target, info)
        if decision is Decision.NOT_OURS:
            return decision, None
        if decision is Decision.STEP_THEN_RESUME or info.signo == SIGBUS:
            self.events.emit(Kind.FAULT_RECORDED, decision)
        if decision is Decision.STOP:
            return decision, self.break_report()
        return decision, None

    def stopped(self, target: Target) -> None:
        """A stop the user sees: the trap engine finishes what the debugger's own steps hid
        from it and arms the threads no hook saw being born."""
        if self.recorder.armed or self.engine.pending:
            self.engine.reconcile(target)

    # -- processes and threads -------------------------------------------------------------------
    def new_process(self, pid: int) -> None:
        """A run, an attach or an exec: addresses mean something new, and nothing is armed until
        the next arm point (a stop before `main` in the next run must not arm it early)."""
        self.recorder.new_process()
        self.engine.forget_threads()
        self.step.forget_threads()
        self.recorder.program.pid = pid
        self.events.emit(Kind.NEW_PROCESS, pid)

    def syscall(self, target: Target, tid: int | None = None, nr: int | None = None,
                entry: bool | None = None) -> None:
        """A thread is at the entry or the exit of a syscall that makes a task (clone, fork,
        vfork, clone3) or changes its signal mask: the trap engine starts new tasks unarmed
        and re-decides the thread's arming after a mask change. What the debugger does not
        tell (gdb's catchpoint), the engine reads from the thread's registers. The step
        engine's new threads are the adapters' own: gdb's inherit TF, lldb's thread plans are
        not inherited (adapters/*/stepping.py)."""
        self.engine.on_syscall(target, tid, nr, entry)

    def thread_exited(self, tid: int) -> None:
        self.engine.thread_exited(tid)
        self.step.thread_exited(tid)
        self.events.emit(Kind.THREAD_EXITED, tid)

    def threads_gone(self, live: Iterable[int]) -> None:
        """For a debugger that tells no thread's end (lldb): every thread the trap engine keeps
        state for and that is not among `live` has exited."""
        e = self.engine
        alive = set(live)
        for tid in list(e.armed | e.sigbus_blocked | e.in_clone | set(e.pending) | set(e.reported)):
            if tid not in alive:
                self.thread_exited(tid)

    def exited(self, ended_at: float | None = None, keep_end: bool = False) -> str | None:
        """The process is gone. The trace's clock ends at `ended_at` (now when None; with
        `keep_end`, an end already set stays). Returns, once per step configuration, the line
        saying that the step scope was never entered."""
        self.engine.forget_threads()
        said = None
        step = self.step
        if step.enabled:
            said = step.never_entered_message()
            if said and step.reported_unentered:
                said = None
            elif said:
                step.reported_unentered = True
            # Its breakpoints go with the process (one at a PIE address would not insert at the
            # next run).
            if step.control is not None:
                step.control.clear_breakpoints()
            step.forget_threads()
        buf = self.recorder.buffer
        if not (keep_end and buf.stopped_at is not None):
            buf.stopped_at = ended_at if ended_at is not None else time.monotonic()
        self.events.emit(Kind.EXITED)
        return said

    def before_detach(self, target: Target | None) -> None:
        """The debugger is about to let go of the process (detach, quit): a thread left with AC
        or TF set would die of its next unaligned access, or its next instruction, with no
        tracer. The step scope stays chosen: an `attach` arms it again."""
        e, step = self.engine, self.step
        if target is not None and (e.armed or e.pending):
            e.disarm(target)
        if target is not None and step.threads and step.control is not None:
            live = set(target.threads())
            for tid in [t for t in step.threads if t in live]:
                step.control.unstep(target, tid)
            step.control.clear_breakpoints()
            step.forget_threads()
        self.events.emit(Kind.DETACHING, target)

    def disarm(self, target: Target | None) -> None:
        """`ualdbg off` (or `trace stop` when not breaking): no thread keeps a flag of ualdbg's,
        no breakpoint of the step engine stays."""
        self.engine.disarm(target)
        self.step.disarm(target)
        self.events.emit(Kind.OFF)
