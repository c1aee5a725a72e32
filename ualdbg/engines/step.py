"""Step mode inside a debugger: single-step the instructions of a scope (a function, a range, the
current function until it returns, everywhere), check every memory operand of each one against
the alignment policy BEFORE it executes, and record it (trace) or stop there (break). Calls that
leave the scope run at full speed to a return breakpoint; entering the scope is a breakpoint at
each range start. The adapters only provide the debugger primitives (StepControl)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from ..core.model import Module
from ..core.target import LiveThreads, SigInfo, Target, offers
from ..isa import arch as archmod
from ..isa.alignment import policy_by_name
from ..isa.decode import Insn, RegisterUnavailable, accesses
from ..symbols.demangle import frame_name
from ..symbols.elfindex import elf_index
from ..symbols.maps import ModuleMap
from .scope import ScopeError, StepScope, resolve_scope

if TYPE_CHECKING:
    from .recorder import FaultRecorder

TRAP_TRACE = 2  # si_code of a single-step trap


class StepDecision(Enum):
    STEP = "step"  # keep single-stepping this thread
    RUN = "run"  # let this thread run at full speed (out of scope, or not ours)
    STOP = "stop"  # a user-visible stop before the offending instruction (break)


class StepControl(Protocol):
    """What the step engine needs from a debugger beyond the Target: thin primitives."""

    # A debugger that cannot make breakpoints while it decides a stop (lldb) gets the return
    # breakpoints of every call in the scope when the engine arms.
    eager_returns: bool

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


@dataclass(frozen=True)
class ScopeRequest:
    """What the user typed: resolved to runtime ranges once the process exists."""

    functions: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()
    everywhere: bool = False
    until_return: bool = False

    def describe(self) -> str:
        if self.everywhere:
            return "everywhere"
        return ", ".join(self.functions + self.ranges) or "?"


@dataclass
class _Thread:
    last: Insn | None = None  # the instruction checked last (it ran, or is about to)


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


@dataclass
class StepEngine:
    """Per-process state of step mode. All methods run while the target is stopped."""

    session: FaultRecorder
    name: str = "step"
    enabled: bool = False  # the user chose this engine (armed now or at the arm point)
    armed: bool = False  # entry breakpoints placed in this process
    request: ScopeRequest = field(default_factory=ScopeRequest)
    scope: StepScope | None = None
    control: StepControl | None = None
    threads: dict[int, _Thread] = field(default_factory=dict)  # threads being single-stepped
    returns: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # tid -> (return pc, sp after)
    entry_points: frozenset[int] = frozenset()
    stats: StepStats = field(default_factory=StepStats)
    ended: str | None = None  # until-return: why stepping ended
    until: tuple[int, int] | None = None  # until-return: (tid, rsp); the frame is gone above it
    reported_unentered: bool = False
    # No trap flag to single-step with (arm64 under qemu-user's gdb stub): a breakpoint on every
    # instruction of the scope instead, each checked before it runs when it is hit.
    by_breakpoints: bool = False
    policy_given: bool = False  # --policy was typed; else the default follows the target's arch

    # -- configuration ---------------------------------------------------------------------------
    def configure(self, request: ScopeRequest, policy: str | None, arch: str = "x86_64") -> None:
        """Check what can be checked before the process exists; raise ScopeError (one line)."""
        name = policy or ("ac" if arch.startswith(("x86", "i386", "amd64")) else "natural")
        try:
            self.session.policy = policy_by_name(name)
        except ValueError as exc:
            raise ScopeError(str(exc)) from None
        self.policy_given = policy is not None
        self.request = request
        self.enabled = True
        self.armed = False
        self.scope = None
        self.ended = None
        self.reported_unentered = False
        self.stats = StepStats()

    def check_static(self, program: str | None) -> None:
        """Before `run`: the functions must exist in the program file (libraries load later:
        stop first, e.g. at main, to name a library's function)."""
        if self.request.functions and program:
            resolve_scope([Module(program, 0, 0, 0)], functions=self.request.functions,
                          range_text=self.request.ranges)
        elif self.request.ranges:
            resolve_scope([], range_text=self.request.ranges)

    def describe(self) -> str:
        what = self.scope.describe() if self.scope is not None else self.request.describe()
        return f"{what}, policy {self.session.policy.name}"

    # -- arming ----------------------------------------------------------------------------------
    def _arch(self, target: Target) -> archmod.ArchInfo:
        return self.session.arch_of(target)

    def arm(self, target: Target, control: StepControl, tid: int | None = None) -> None:
        """Resolve the scope in this process, place the entry breakpoints, and start stepping a
        thread that is already in scope (stopped at main with `--in main`, or `--until-return`)."""
        self.control = control
        a = self._arch(target)
        self.by_breakpoints = archmod.trap_flags(a.name) is None
        if not self.policy_given:
            # Configured before the process existed (gdb-multiarch before `target remote`).
            self.session.policy = policy_by_name("ac" if a.mechanism == archmod.MECH_AC else "natural")
        if self.by_breakpoints and (self.request.until_return or self.request.everywhere):
            raise ScopeError(f"on {a.name} the step engine puts a breakpoint on each instruction of the scope: "
                             "give it --in FUNC or --range LO,HI (not --until-return or --everywhere)")
        if self.request.until_return:
            self.scope = self._current_function(target, tid)
        else:
            mm = self.session.module_map(target)
            if mm is None and (self.request.functions or self.request.everywhere):
                raise ScopeError("cannot read the process's memory map (/proc/PID/maps)")
            self.scope = self._resolve(mm)
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
            for addr in sorted(self.call_returns(target)):
                control.break_at(addr)
        if tid is None and self.scope.kind == "until-return":
            tid = target.current_tid()
        for t in ([tid] if tid is not None else target.threads()):
            if t in self.threads:
                continue
            pc = target.read_register(self._arch(target).pc, t)
            if self._contains(pc):
                if self.scope.kind == "until-return":
                    self.until = (t, target.read_register(self._arch(target).sp, t))
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
        step = a.insn_size or 4
        for lo, hi in self.scope.ranges:
            if a.insn_size is None:
                addrs = self._starts(target, a, lo, hi)  # RISC-V's 2- and 4-byte instructions
            else:
                addrs = list(range(lo - lo % step + (step if lo % step else 0), hi, step))
            for addr in addrs:
                if addr not in self.entry_points:  # those have theirs already
                    control.break_at(addr)
        for t in ([tid] if tid is not None else target.threads()):
            pc = target.read_register(a.pc, t)
            if self._contains(pc):
                st = self.threads.setdefault(t, _Thread())
                self._check(target, t, st, pc)

    def _starts(self, target: Target, a: archmod.ArchInfo, lo: int, hi: int) -> list[int]:
        """The instruction addresses of [lo, hi), decoded linearly from lo (a function's entry)."""
        from ..isa.decode import decoder_for

        if self.session.decoder.arch != a.name:
            self.session.decoder = decoder_for(a.name)
        decoder = self.session.decoder
        code = target.read_memory(lo, hi - lo)
        mode_at = self._arm_modes(target, a, lo)
        out, off = [], 0
        while off < len(code):
            mode = mode_at(lo + off) if mode_at is not None else ""
            if mode == "data":  # an ARM literal pool: no instruction, no breakpoint
                off += 2
                continue
            out.append(lo + off)
            insn = decoder.decode(code[off:off + 4], lo + off, mode)
            off += insn.size if insn is not None and insn.size > 0 else 2
            if insn is not None and mode == "thumb" and insn.name.startswith("it") and len(insn.raw) == 2:
                # No breakpoint inside an IT block (gdb would move it to the IT, a second stop
                # there): the IT's check covers the block (_check_it_block).
                for _ in range(4 - ((insn.raw[0] & 0xF) & -(insn.raw[0] & 0xF)).bit_length() + 1):
                    nxt = decoder.decode(code[off:off + 4], lo + off, mode)
                    off += nxt.size if nxt is not None and nxt.size > 0 else 2
        return out

    def _arm_modes(self, target: Target, a: archmod.ArchInfo, addr: int) -> Callable[[int], str] | None:
        """32-bit ARM: the instruction set at each address of the module holding `addr`, from
        its mapping symbols or its function symbols' bit 0 (elfindex.arm_modes); where no
        symbol says, what Debian's gcc emits by default (Thumb-2 on armhf, ARM on armel). A
        breakpoint hit decodes by the CPSR's T bit all the same (FaultRecorder.insn_at)."""
        if not a.modes:
            return None
        default = a.default_mode
        module, _ = self.session.module_of(target, addr)
        index = elf_index(module.path) if module is not None else None
        if index is None or module is None:
            return lambda pc: default
        base = module.base
        return lambda pc: index.arm_mode_at(pc - base) or default

    def _on_instruction(self, target: Target, tid: int) -> StepDecision:
        """A breakpoint of `_arm_by_breakpoints` (or an entry) was hit: check the instruction."""
        if self.control is None or not self.armed:
            return StepDecision.RUN
        pc = target.read_register(self._arch(target).pc, tid)
        if not self._contains(pc):
            return StepDecision.RUN
        if pc in self.entry_points:
            self.stats.entries += 1
        return self._check(target, tid, self.threads.setdefault(tid, _Thread()), pc)

    def _resolve(self, mm: ModuleMap | None) -> StepScope:
        """The program's own functions first: looking a name up in a library that lacks it
        walks all of that library's DWARF (libc's takes a minute), so libraries only for names
        the program does not define."""
        r = self.request
        if mm is None:
            return resolve_scope([], range_text=r.ranges)
        if r.functions and mm.main is not None:
            try:
                return resolve_scope([mm.main], functions=r.functions, range_text=r.ranges)
            except ScopeError:
                pass
        return resolve_scope(mm, functions=r.functions, range_text=r.ranges, everywhere=r.everywhere)

    def call_returns(self, target: Target) -> set[int]:
        """The return addresses of the calls in the scope's ranges (decoded once, linearly)."""
        out: set[int] = set()
        assert self.scope is not None
        decoder = self.session.decoder
        for lo, hi in self.scope.ranges:
            code = target.read_memory(lo, hi - lo)
            off = 0
            while off < len(code):
                insn = decoder.decode(code[off:off + decoder.max_insn_len], lo + off)
                if insn is None or insn.size <= 0:
                    off += 1
                    continue
                if insn.flow == "call" and self._contains(insn.next_pc):
                    out.add(insn.next_pc)
                off += insn.size
        return out

    def _current_function(self, target: Target, tid: int | None) -> StepScope:
        t = tid if tid is not None else target.current_tid()
        pc = target.read_register(self._arch(target).pc, t)
        module, _ = self.session.module_of(target, pc)
        index = elf_index(module.path) if module is not None else None
        sym = index.symbol_at(pc - module.base) if (index is not None and module is not None) else None
        if sym is None or module is None:
            raise ScopeError(f"--until-return: no function symbol covers the PC {pc:#x}")
        lo = sym.start + module.base
        return StepScope("until-return", frame_name(sym.name, symbol=True), ((lo, lo + max(sym.size, 1)),))

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
        a = self._arch(target)
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
        a = self._arch(target)
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
        t = archmod.trap_flags(self._arch(target).name)
        if not self.enabled or self.control is None or t is None:
            return None
        flags = target.read_register(t.register, tid)
        if not flags & t.tf_bit:
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
        t = archmod.trap_flags(self._arch(target).name)
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
        return self._check(target, tid, st, target.read_register(self._arch(target).pc, tid))

    def before_task_creation(self, target: Target, tid: int, new_thread: bool = False) -> None:
        """clone/fork/vfork entry in a stepped thread: a new process must not start with TF (a
        forked child has no tracer: a trap would kill it); a new thread keeps it only with
        --everywhere, where its first trap adopts it (on_unknown_trace)."""
        if new_thread and self.scope is not None and self.scope.kind == "everywhere":
            return
        if tid in self.threads and self.control is not None:
            self.control.unstep(target, tid)

    def after_task_creation(self, target: Target, tid: int) -> StepDecision:
        st = self.threads.get(tid)
        if st is None or self.control is None:
            return StepDecision.RUN
        self.control.step(target, tid)
        st.last = None
        pc = target.read_register(self._arch(target).pc, tid)
        return self._check(target, tid, st, pc) if self._contains(pc) else StepDecision.STEP

    def reconcile(self, target: Target) -> StepDecision:
        """At a user-visible stop: a thread we step that the user moved with the debugger's own
        stepi/next is checked where it is now (its next instruction has not run)."""
        decision = StepDecision.RUN
        # threads() leaves out the threads running in gdb's non-stop mode: alive all the same.
        live = set(target.live_threads() if offers(target, LiveThreads) else target.threads())
        for tid in list(self.threads):
            if tid not in live:
                self.thread_exited(tid)
        return decision

    # -- the check -------------------------------------------------------------------------------
    def _check(self, target: Target, tid: int, st: _Thread, pc: int) -> StepDecision:
        s = self.session
        self.stats.steps += 1
        insn = s.insn_at(target, pc, tid)
        st.last = insn
        # An instruction recorded here that then traps too (ARMv7's ldrd, MIPS's lw): the signal
        # engine performs it without counting it a second time (FixupEngine.reported).
        reported = s.fixup_reported()
        if reported is not None and reported.get(tid) == pc:
            del reported[tid]
        if insn is not None and insn.mode == "thumb" and insn.name.startswith("it"):
            return self._check_it_block(target, tid, insn, reported)
        if insn is None or not insn.operands:
            return StepDecision.STEP
        from .recorder import LazyRegisters

        try:
            found = accesses(insn, LazyRegisters(target, tid))
        except (RegisterUnavailable, KeyError):
            found = []
        if not any(s.policy.violates(acc, insn) for acc in found):
            return StepDecision.STEP
        self.stats.faults += 1
        stop = s.record_fault(target, tid, SigInfo(archmod.SIGTRAP, TRAP_TRACE, None))
        if reported is not None:
            reported[tid] = pc
        return StepDecision.STOP if stop else StepDecision.STEP

    def _check_it_block(self, target: Target, tid: int, it: Insn, reported: dict[int, int] | None) -> StepDecision:
        """A Thumb-2 IT instruction: gdb puts no breakpoint inside its block (it moves one there
        to the IT), so the block's instructions are checked here, before any of them runs, each
        recorded at its own PC. One whose address or condition depends on an earlier
        instruction of the block cannot be computed ahead: counted in `stats.unchecked`."""
        from ..isa.arch import arm
        from .recorder import LazyRegisters

        s = self.session
        regs = LazyRegisters(target, tid)
        try:
            block = arm.it_block(s.decoder, it, target.read_memory(it.next_pc, 16), regs)
        except (RegisterUnavailable, KeyError):
            return StepDecision.STEP
        stop = False
        for insn, found in block:
            if found is None:
                self.stats.unchecked += 1
                continue
            acc = next((acc for acc in found if s.policy.violates(acc, insn)), None)
            if acc is None:
                continue
            self.stats.faults += 1
            stop |= s.record_fault(target, tid, SigInfo(archmod.SIGTRAP, TRAP_TRACE, None),
                                   decoded=(insn, acc, True), pc=insn.pc)
            if reported is not None:
                reported[tid] = insn.pc
        return StepDecision.STOP if stop else StepDecision.STEP

    def _leave(self, target: Target, tid: int, st: _Thread, pc: int) -> StepDecision:
        assert self.control is not None
        a = self._arch(target)
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

    def entered(self) -> bool:
        return self.stats.entries > 0 or self.stats.steps > 0

    def never_entered_message(self) -> str | None:
        """One line when the scope was armed but no thread ever entered it."""
        if self.armed and not self.entered() and self.scope is not None:
            return f"ualdbg: the step scope {self.scope.describe()} was never entered: nothing was checked"
        return None


def describe_ranges(ranges: Sequence[tuple[int, int]] | Iterable[tuple[int, int]]) -> str:
    return ", ".join(f"{lo:#x}-{hi:#x}" for lo, hi in ranges)
