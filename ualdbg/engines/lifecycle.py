"""The process lifecycle, written once for every debugger: what the engines do when the arm point
is hit, when a process starts, execs, makes a task, loses a thread, exits, or is about to be let
go (detach, quit), and at `ualdbg off`. What they decide at a stop is its neighbour, stops.py.

The adapters (adapters/gdb/, adapters/lldb/) only translate their debugger's events (gdb.events,
catchpoint conditions, lldb's stop hook, breakpoint callbacks) into calls of `Lifecycle` and
`Stops`, and carry out their verdicts with their debugger's mechanics (`handle` settings, thread
plans, breakpoints). What happened is told on the session's `Events` bus, which the adapters and
the batch drivers subscribe to for what is theirs alone (a progress file, an adapter's own
per-process state, a line for the user).

    event           emitted by                       payload
    ARMED           arm_point, attached, arm_at_start  the Target the engine armed
    STEP_ARMED      arm_point, attached              the Target the step engine armed
    FAULT_RECORDED  Stops.fault                      the engine's Decision
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

from ..core.result import ProgramInfo
from ..core.target import Target
from ..isa import arch as archmod
from .faultpath import FaultPath, Mode
from .step import StepControl, StepDecision, StepEngine, creates_thread
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

    def __init__(self, mode: Mode, program: ProgramInfo, faults: FaultPath, engine: TrapEngine, step: StepEngine,
                 events: Events | None = None) -> None:
        self.mode = mode
        self.program = program
        self.faults = faults
        self.engine = engine
        self.step = step
        self.events = events if events is not None else Events()
        self.arch: archmod.ArchInfo | None = None

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        """The target's architecture, learnt from the first live target (gdb-multiarch knows it
        only once a program is loaded or connected) and kept for the session; the trap engine
        is told it then, before any event of that target reaches it."""
        if self.arch is None:
            self.arch = archmod.arch_info(target.arch())
            self.engine.use_arch(self.arch)
        return self.arch

    # -- arming ----------------------------------------------------------------------------------
    def _arm_step(self, target: Target, control: StepControl) -> None:
        self.step.arm(target, control, self.arch_of(target))
        self.events.emit(Kind.STEP_ARMED, target)

    def _arm_trap(self, target: Target) -> None:
        self.arch_of(target)
        self.engine.arm(target)
        self.events.emit(Kind.ARMED, target)

    def arm_point(self, target: Target, control: StepControl) -> bool:
        """`main` (or the entry, `--at start`) is reached: arm the engine the user chose, if
        ualdbg is armed at all. True when an engine was armed."""
        if not self.mode.trap_armed:
            return False
        self.program.pid = target.pid()
        if self.step.enabled:
            self._arm_step(target, control)
        else:
            self._arm_trap(target)
        return True

    def arm_at_start(self, target: Target) -> bool:
        """A new image (run or exec) is loaded: with `--at start` this is the first moment it can
        be armed (the trap engine; its arm point is the loader's entry). True when armed."""
        if not (self.mode.trap_armed and self.mode.at == "start"):
            return False
        self._arm_trap(target)
        return True

    def attached(self, target: Target, control: StepControl) -> str | None:
        """The first stop of a process ualdbg was armed for before `attach`: its arm point is
        long past, arm where the process is. Returns the line for the user, or None when there
        was nothing to arm (not armed, or armed already)."""
        if not self.mode.trap_armed:
            return None
        if self.step.enabled:
            if self.step.armed:
                return None
            self.program.pid = target.pid()
            self._arm_step(target, control)
            return f"ualdbg: attached: step engine armed: {self.step.describe()}"
        if self.engine.active:
            return None
        self.program.pid = target.pid()
        self._arm_trap(target)
        return f"ualdbg: attached: armed {len(self.engine.armed)} thread(s)"

    def arm_now(self, target: Target, control: StepControl | None = None, later: frozenset[int] = frozenset()) -> None:
        """`break` or `trace start` typed while the program is stopped: arm the trap engine, or
        with a step control the step engine, where the program is (nothing is told: the command
        says what it armed). `later`: threads still to run the instruction they stopped at
        before `off` (Host.settle_faults), armed once they have (Session.arm_late)."""
        if control is not None:
            self.step.arm(target, control, self.arch_of(target))
        else:
            self.arch_of(target)
            self.engine.arm(target, later)

    # -- processes and threads -------------------------------------------------------------------
    def new_process(self, pid: int) -> None:
        """A run, an attach or an exec: addresses mean something new, and nothing is armed until
        the next arm point (a stop before `main` in the next run must not arm it early)."""
        self.faults.new_process()
        self.engine.forget_threads()
        self.step.forget_threads()
        self.program.pid = pid
        self.events.emit(Kind.NEW_PROCESS, pid)

    def syscall(self, target: Target, tid: int | None = None, nr: int | None = None,
                entry: bool | None = None) -> StepDecision:
        """A thread is at the entry or the exit of a syscall that makes a task (clone, fork,
        vfork, clone3) or changes its signal mask: the trap engine starts new tasks unarmed
        and re-decides the thread's arming after a mask change; the step engine keeps TF out
        of a forked child and steps a new thread with --everywhere. What the debugger does not
        tell (gdb's catchpoint), the engines read from the thread's registers. STOP: the step
        engine breaks before a new thread's first instruction."""
        if self.step.enabled:
            return self._step_syscall(target, tid, nr, entry)
        self.arch_of(target)
        self.engine.on_syscall(target, tid, nr, entry)
        return StepDecision.RUN

    def _step_syscall(self, target: Target, tid: int | None, nr: int | None, entry: bool | None) -> StepDecision:
        """A stepped process's new tasks: where they inherit the stepping (gdb: clone copies
        TF), at the creating thread's entry and exit; where not (lldb's thread plans), at the
        new thread's first stop, the exit of the syscall that made it (StepEngine.on_thread_start)."""
        step, control = self.step, self.step.control
        if control is None:
            return StepDecision.RUN  # not armed in this process yet
        t = archmod.trap_flags(self.arch_of(target).name)
        if t is None:
            return StepDecision.RUN  # no trap flag for a new task to inherit: stepped by breakpoints
        tid = tid if tid is not None else target.current_tid()
        if not control.steps_inherited:
            return step.on_thread_start(target, tid) if entry is False and nr in t.task_creating_syscalls else StepDecision.RUN
        if not step.stepping(tid):
            return StepDecision.RUN
        if target.read_register(t.syscall_nr, tid) not in t.task_creating_syscalls:
            return StepDecision.RUN
        if target.read_register(t.syscall_ret, tid) == (-archmod.ENOSYS & 0xFFFFFFFFFFFFFFFF):
            step.before_task_creation(target, tid, creates_thread(target, tid))
            return StepDecision.RUN
        return step.after_task_creation(target, tid)

    def touched_threads(self) -> set[int]:
        """The threads whose flags ualdbg may have set: what `off` and a detach must reach (gdb
        holds them stopped first in non-stop mode)."""
        e = self.engine
        return set(e.armed) | set(e.pending) | set(e.tf_suspect) | set(self.step.threads)

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
        buf = self.faults.recorder.buffer
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
            self.arch_of(target)
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
        if target is not None and target.pid() is not None:
            self.arch_of(target)
        # Threads stepping over a fault by ualdbg's TF: their trap may have happened already,
        # unreported (gdb's all-stop stopped them for another thread's event). OFF tells them.
        stepping = {tid for tid, own_tf in self.engine.pending.items() if not own_tf}
        self.engine.disarm(target)
        self.step.disarm(target)
        self.events.emit(Kind.OFF, stepping)
