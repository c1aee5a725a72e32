"""Step mode inside a debugger: single-step the instructions of a scope (a function, a range, the
current function until it returns, everywhere), check every memory operand of each one against
the alignment policy BEFORE it executes, and record it (trace) or stop there (break). Calls that
leave the scope run at full speed to a return breakpoint; entering the scope is a breakpoint at
each range start. The adapters only provide the debugger primitives (StepControl)."""
from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Protocol

from ..core.target import Target
from ..isa import arch as archmod
from ..isa.alignment import policy_by_name
from ..isa.decode import Insn, InsnDecoder, decoder_for
from ..lazyclass import dataclass
from . import stepplan
from .faultpath import FaultPath
from .scope import ScopeError, StepScope
from .stepcheck import TRAP_TRACE, StepCheck, StepStats
from .stepplan import ScopeRequest

__all__ = ["TRAP_TRACE", "ScopeRequest", "StepControl", "StepDecision", "StepEngine", "StepStats", "creates_thread",
           "set_trap_flag"]

CLONE_THREAD = 0x10000


class StepDecision(Enum):
    STEP = "step"  # keep single-stepping this thread
    RUN = "run"  # let this thread run at full speed (out of scope, or not ours)
    STOP = "stop"  # a user-visible stop before the offending instruction (break)


class StepControl(Protocol):
    """What the step engine needs from a debugger beyond the Target: thin primitives."""

    # A debugger that cannot make breakpoints while it decides a stop (lldb) gets the return
    # breakpoints of every call in the scope when the engine arms.
    eager_returns: bool
    # A thread made by a stepped thread is stepped from birth (gdb: clone copies EFLAGS.TF);
    # where not (lldb's thread plans), the engine adopts it at the task-making syscall's exit.
    steps_inherited: bool

    def step(self, target: Target, tid: int) -> None:
        """From its next resume on, `tid` stops after each instruction (until `unstep`)."""
        ...

    def unstep(self, target: Target, tid: int) -> None:
        """`tid` runs freely from its next resume on."""
        ...

    def break_at(self, addr: int) -> None:
        """An internal breakpoint at `addr` whose hits go to StepEngine.on_breakpoint; setting
        one twice is one breakpoint."""
        ...

    def clear_breakpoints(self) -> None:
        """Delete every breakpoint `break_at` made."""
        ...


def set_trap_flag(target: Target, tid: int, on: bool) -> None:
    """x86 single-stepping without the debugger's own step: EFLAGS.TF makes the CPU trap after
    each instruction, and the debugger's SIGTRAP catchpoint sees the trap (gdb)."""
    t = archmod.trap_flags(archmod.arch_info(target.arch()).name)
    if t is None:
        return  # no trap flag (arm64): the engine steps by breakpoints instead (by_breakpoints)
    old = target.read_register(t.register, tid)
    new = (old | t.tf_bit) if on else (old & ~t.tf_bit)
    if new != old:
        target.write_register(t.register, new, tid)


def creates_thread(target: Target, tid: int) -> bool:
    """x86-64, at the entry of clone/clone3: whether it makes a thread (CLONE_THREAD, a
    pthread) rather than a process, from the syscall's flags argument."""
    nr = target.read_register("orig_rax", tid)
    if nr == 56:  # clone(flags, ...)
        flags = target.read_register("rdi", tid)
    elif nr == 435:  # clone3(struct clone_args *): flags are its first u64
        flags = int.from_bytes(target.read_memory(target.read_register("rdi", tid), 8) or b"\0", "little")
    else:
        return False
    return bool(flags & CLONE_THREAD)


@dataclass
class _Thread:
    last: Insn | None = None  # the instruction checked last (it ran, or is about to)


@dataclass
class StepEngine:
    """Per-process state of step mode. All methods run while the target is stopped; the
    target's architecture comes with `arm`, which every other event follows."""

    faults: FaultPath
    name: str = "step"
    enabled: bool = False  # the user chose this engine (armed now or at the arm point)
    armed: bool = False  # entry breakpoints placed in this process
    request: ScopeRequest = field(default_factory=ScopeRequest)
    scope: StepScope | None = None
    control: StepControl | None = None
    threads: dict[int, _Thread] = field(default_factory=dict)  # threads being single-stepped
    returns: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # tid -> (return pc, sp after)
    entry_points: frozenset[int] = frozenset()
    checks: StepCheck = field(init=False)  # its check of each instruction, and the counts
    ended: str | None = None  # until-return: why stepping ended
    until: tuple[int, int] | None = None  # until-return: (tid, rsp); the frame is gone above it
    reported_unentered: bool = False
    # No trap flag to single-step with (arm64 under qemu-user's gdb stub): a breakpoint on every
    # instruction of the scope instead, each checked before it runs when it is hit.
    by_breakpoints: bool = False
    policy_given: bool = False  # --policy was typed; else the default follows the target's arch
    arch: archmod.ArchInfo | None = None
    decoder: InsnDecoder | None = None  # linear decoding of the scope's ranges, in the target's instruction set

    def __post_init__(self) -> None:
        self.checks = StepCheck(self.faults)

    @property
    def stats(self) -> StepStats:
        """What this step configuration has checked and found."""
        return self.checks.stats

    # -- configuration ---------------------------------------------------------------------------
    def configure(self, request: ScopeRequest, policy: str | None, arch: str = "x86_64") -> None:
        """Check what can be checked before the process exists; raise ScopeError (one line)."""
        name = policy or ("ac" if arch.startswith(("x86", "i386", "amd64")) else "natural")
        try:
            self.faults.rules.use_policy(policy_by_name(name))
        except ValueError as exc:
            raise ScopeError(str(exc)) from None
        self.policy_given = policy is not None
        self.request = request
        self.enabled = True
        self.armed = False
        self.scope = None
        self.ended = None
        self.reported_unentered = False
        self.checks = StepCheck(self.faults)

    def check_static(self, program: str | None) -> None:
        """Before `run`: the functions must exist in the program file (stepplan.check_in_file)."""
        stepplan.check_in_file(program, self.request.functions, self.request.ranges)

    def describe(self) -> str:
        what = self.scope.describe() if self.scope is not None else self.request.describe()
        return f"{what}, policy {self.faults.rules.policy.name}"

    # -- arming ----------------------------------------------------------------------------------
    def _a(self) -> archmod.ArchInfo:
        if self.arch is None:
            raise RuntimeError("the step engine is not armed")
        return self.arch

    def _decoder(self, a: archmod.ArchInfo) -> InsnDecoder:
        if self.decoder is None or self.decoder.arch != a.name:
            self.decoder = decoder_for(a.name)
        return self.decoder

    def arm(self, target: Target, control: StepControl, arch: archmod.ArchInfo, tid: int | None = None) -> None:
        """Resolve the scope in this process, place the entry breakpoints, and start stepping a
        thread that is already in scope (stopped at main with `--in main`, or `--until-return`)."""
        self.control = control
        self.arch = a = arch
        self.by_breakpoints = archmod.trap_flags(a.name) is None
        if not self.policy_given:
            # Configured before the process existed (gdb-multiarch before `target remote`).
            self.faults.rules.use_policy(policy_by_name("ac" if a.mechanism == archmod.MECH_AC else "natural"))
        self.scope = stepplan.scope_in(target, self.faults.image, a, self.request, tid)
        self.armed = True
        self.entry_points = frozenset(lo for lo, _ in self.scope.ranges) if self.scope.kind != "until-return" else frozenset()
        # A range start that is not mapped (yet) gets no breakpoint: the debugger could not
        # insert it, and such a scope is reported as never entered.
        self.entry_points = frozenset(a for a in self.entry_points if target.read_memory(a, 1))
        for addr in sorted(self.entry_points):
            control.break_at(addr)
        if self.by_breakpoints:
            self._arm_by_breakpoints(target, control, a, tid)
            return
        if control.eager_returns:
            for addr in sorted(stepplan.call_returns(target, self._decoder(a), self.scope, self._contains)):
                control.break_at(addr)
        if tid is None and self.scope.kind == "until-return":
            tid = target.current_tid()
        for t in ([tid] if tid is not None else target.threads()):
            if t in self.threads:
                continue
            pc = target.read_register(a.pc, t)
            if self._contains(pc):
                if self.scope.kind == "until-return":
                    self.until = (t, target.read_register(a.sp, t))
                self.threads[t] = _Thread()
                if pc in self.entry_points:
                    self.stats.entries += 1
                control.step(target, t)
                # Its first instruction is checked here (its trace trap comes after it ran);
                # a break cannot stop while arming, so a violation here is recorded only.
                self._check(target, t, self.threads[t], pc)

    def _arm_by_breakpoints(self, target: Target, control: StepControl, a: archmod.ArchInfo,
                            tid: int | None) -> None:
        """A breakpoint at every instruction of the scope (fixed-size instructions); calls out
        of it run at full speed because nothing outside has one. A thread stopped in the scope
        has its current instruction checked now: the debugger steps over the breakpoint under
        it without reporting it."""
        assert self.scope is not None
        for addr in stepplan.every_instruction(target, self.faults.image, self._decoder(a), a, self.scope):
            if addr not in self.entry_points:  # those have theirs already
                control.break_at(addr)
        for t in ([tid] if tid is not None else target.threads()):
            pc = target.read_register(a.pc, t)
            if self._contains(pc):
                st = self.threads.setdefault(t, _Thread())
                self._check(target, t, st, pc)

    def _on_instruction(self, target: Target, tid: int) -> StepDecision:
        """A breakpoint of `_arm_by_breakpoints` (or an entry) was hit: check the instruction."""
        if self.control is None or not self.armed:
            return StepDecision.RUN
        pc = target.read_register(self._a().pc, tid)
        if not self._contains(pc):
            return StepDecision.RUN
        if pc in self.entry_points:
            self.stats.entries += 1
        return self._check(target, tid, self.threads.setdefault(tid, _Thread()), pc)

    def disarm(self, target: Target | None) -> None:
        """Stop stepping every thread and remove the breakpoints."""
        if target is not None and target.pid() is not None and self.control is not None:
            live = set(target.threads())
            for tid in list(self.threads):
                if tid in live:
                    try:
                        self.control.unstep(target, tid)
                    except Exception:
                        pass
        if self.control is not None:
            self.control.clear_breakpoints()
        self.threads.clear()
        self.returns.clear()
        self.armed = False
        self.enabled = False

    def forget_threads(self) -> None:
        """A new process: the breakpoints die with the old image; arm again at the arm point."""
        self.threads.clear()
        self.returns.clear()
        self.armed = False

    def thread_exited(self, tid: int) -> None:
        self.threads.pop(tid, None)
        self.returns.pop(tid, None)

    # -- scope -----------------------------------------------------------------------------------
    def _contains(self, pc: int) -> bool:
        scope = self.scope
        if scope is None:
            return False
        if scope.kind == "until-return":
            return any(lo <= pc < hi for lo, hi in scope.ranges)
        return scope.contains(pc)

    def stepping(self, tid: int) -> bool:
        return tid in self.threads

    # -- events ----------------------------------------------------------------------------------
    def on_step(self, target: Target, tid: int) -> StepDecision:
        """After one single-step of a thread we step: the PC is the next instruction."""
        st = self.threads.get(tid)
        if st is None or self.control is None:
            return StepDecision.RUN
        a = self._a()
        pc = target.read_register(a.pc, tid)
        if self._contains(pc):
            return self._check(target, tid, st, pc)
        return self._leave(target, tid, st, pc)

    def on_breakpoint(self, target: Target, tid: int) -> StepDecision:
        """A thread that runs freely hit an entry or return breakpoint (the PC is there)."""
        if self.by_breakpoints:
            return self._on_instruction(target, tid)
        if tid in self.threads or self.control is None or not self.armed:
            return StepDecision.RUN  # a thread we step landed on it: its trace trap decides
        a = self._a()
        pc = target.read_register(a.pc, tid)
        st: _Thread | None = None
        stack = self.returns.get(tid)
        if stack:
            sp = target.read_register(a.sp, tid)
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] == (pc, sp):
                    st = _Thread()
                    del stack[i:]
                    break
        if st is None and pc in self.entry_points:
            st = _Thread()
            self.stats.entries += 1
        if st is None:
            return StepDecision.RUN
        self.threads[tid] = st
        self.control.step(target, tid)
        return self._check(target, tid, st, pc)

    def on_unknown_trace(self, target: Target, tid: int) -> StepDecision | None:
        """A single-step trap in a thread we do not step: it inherited TF from a stepped thread
        across clone(). With --everywhere it is adopted (stepped from here on); otherwise its TF
        is cleared. None when the trap is not ours (no TF: the debugger's own step)."""
        t = archmod.trap_flags(self._a().name) if self.enabled and self.control is not None else None
        flags = target.read_register(t.register, tid) if t is not None else 0
        if t is None or not flags & t.tf_bit:
            return None
        if self._adopts_new_threads():
            return self._adopt(target, tid)  # its TF is already set: no control.step
        target.write_register(t.register, flags & ~t.tf_bit, tid)
        return StepDecision.RUN

    def on_thread_start(self, target: Target, tid: int) -> StepDecision:
        """A thread at the return of a task-creating syscall that the engine does not step
        (lldb: the clone/clone3 exit breakpoint). Where the syscall returned 0 it is the new
        thread's first stop: with --everywhere it is stepped from here on. gdb needs no such
        call: a new thread inherits TF and its first trap adopts it (on_unknown_trace); lldb
        steps by its own thread plans, which a new thread does not inherit."""
        if (tid in self.threads or self.control is None or not self.armed or self.by_breakpoints
                or not self._adopts_new_threads()):
            return StepDecision.RUN
        t = archmod.trap_flags(self._a().name)
        if t is None or target.read_register(t.syscall_ret, tid) != 0:
            return StepDecision.RUN  # the creating thread (it got the new thread's id), or a failure
        self.control.step(target, tid)
        return self._adopt(target, tid)

    def _adopts_new_threads(self) -> bool:
        return self.scope is not None and self.scope.kind == "everywhere"

    def _adopt(self, target: Target, tid: int) -> StepDecision:
        """Step a thread born after arming (--everywhere) from its current instruction, which
        has not run yet."""
        st = self.threads[tid] = _Thread()
        return self._check(target, tid, st, target.read_register(self._a().pc, tid))

    def before_task_creation(self, target: Target, tid: int, new_thread: bool = False) -> None:
        """clone/fork/vfork entry in a stepped thread: a new process must not start with TF (a
        forked child has no tracer: a trap would kill it); a new thread keeps it only with
        --everywhere, where its first trap adopts it (on_unknown_trace)."""
        if new_thread and self._adopts_new_threads():
            return
        if tid in self.threads and self.control is not None:
            self.control.unstep(target, tid)

    def after_task_creation(self, target: Target, tid: int) -> StepDecision:
        st = self.threads.get(tid)
        if st is None or self.control is None:
            return StepDecision.RUN
        self.control.step(target, tid)
        st.last = None
        pc = target.read_register(self._a().pc, tid)
        return self._check(target, tid, st, pc) if self._contains(pc) else StepDecision.STEP

    def _check(self, target: Target, tid: int, st: _Thread, pc: int) -> StepDecision:
        st.last, stop = self.checks.check(target, self._a(), tid, pc)
        return StepDecision.STOP if stop else StepDecision.STEP

    def _leave(self, target: Target, tid: int, st: _Thread, pc: int) -> StepDecision:
        assert self.control is not None
        a = self._a()
        prev = st.last
        del self.threads[tid]
        self.control.unstep(target, tid)
        if prev is not None and prev.flow == "call" and self._contains(prev.next_pc):
            # A call out of the scope: run it at full speed, step again where it returns.
            sp = target.read_register(a.sp, tid)
            self.returns.setdefault(tid, []).append((prev.next_pc, sp + 8))
            self.stats.calls_run += 1
            self.control.break_at(prev.next_pc)
            return StepDecision.RUN
        if self.scope is not None and self.until is not None and self.until[0] == tid:
            if target.read_register(a.sp, tid) > self.until[1]:
                # The frame returned: until-return is over (its trace stays).
                self.ended = f"{self.scope.label} returned after {self.stats.steps} steps"
                self.returns.pop(tid, None)
        return StepDecision.RUN

    def never_entered_message(self) -> str | None:
        """One line when the scope was armed but no thread ever entered it."""
        entered = self.stats.entries > 0 or self.stats.steps > 0
        if self.armed and not entered and self.scope is not None:
            return f"ualdbg: the step scope {self.scope.describe()} was never entered: nothing was checked"
        return None

