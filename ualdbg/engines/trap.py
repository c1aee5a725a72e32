"""Signal mode: arm EFLAGS.AC in every thread, turn each SIGBUS/BUS_ADRALN into a Fault, and
resume by running the faulting instruction once with AC clear and TF set, re-arming at the
single-step trap that follows (one extra stop, not a debugger `stepi`); or, for a target that is
a FaultStepper (lldb), under the debugger's own single-step."""
from __future__ import annotations

import time
from collections.abc import Callable

from ..core.result import BlindSpot
from ..core.target import FaultStepper, OutOfLineTarget, SigInfo, Target, offers
from ..isa import arch as archmod
from ..isa.cpu import TrapFlags
from .faultpath import Decision, FaultPath
from .fixup import FixupEngine
from .outofline import OutOfLine
from .procfs import blocked_signals
from .stepends import StepEnds

# SIGCANCEL (32) and SIGSETXID (33): libc's pthread_sigmask and sigprocmask never let a program
# block them, so a mask holding them is one of glibc's own short critical sections (around a
# clone in pthread_create, posix_spawn), not the program's choice to block SIGBUS.
_LIBC_INTERNAL = (1 << 31) | (1 << 32)
_CLONE_THREAD = 0x10000
_SIGBUS_BIT = 1 << (archmod.SIGBUS - 1)


class BlindTally:
    """What the trap engine knows it did not see (issue 29): threads it kept disarmed because the
    program blocked SIGBUS there (a fault would kill the process), and the processes the program
    started, which the debugger does not follow (gdb detaches them)."""

    def __init__(self) -> None:
        self.events = 0
        self.threads: set[int] = set()
        self.since: dict[int, float] = {}
        self.seconds = 0.0
        self.children = 0

    def kept_disarmed(self, tid: int, mask: int) -> bool:
        """Whether a thread with this blocked-signal mask stays disarmed (SIGBUS blocked), and
        so unwatched from now unless the mask is one of libc's own short ones."""
        if not mask & _SIGBUS_BIT:
            self.stop(tid)
            return False
        if not mask & _LIBC_INTERNAL:
            self.start(tid)
        return True

    def start(self, tid: int) -> None:
        if tid not in self.since:
            self.since[tid] = time.monotonic()
            self.events += 1
            self.threads.add(tid)

    def stop(self, tid: int) -> None:
        t = self.since.pop(tid, None)
        if t is not None:
            self.seconds += time.monotonic() - t

    def stop_all(self) -> None:
        for tid in list(self.since):
            self.stop(tid)

    def count_process(self, target: Target, tid: int, nr: int, ac: TrapFlags) -> None:
        """A task-creating syscall returned in the parent: a new process (not a thread) runs
        untraced, as the debugger does not follow it (x86-64 numbers: clone, fork, vfork, clone3)."""
        try:
            ret = target.read_register(ac.syscall_ret, tid)
            if not 0 < ret < 1 << 31:
                return  # failed, or the child's side
            if nr == 56:
                flags = target.read_register("rdi", tid)  # clone(flags, ...): rdi survives the syscall
            elif nr == 435:
                flags = int.from_bytes(target.read_memory(target.read_register("rdi", tid), 8), "little")
            else:
                flags = 0  # fork, vfork
        except Exception:  # a register or memory the debugger cannot read: not counted
            return
        if not flags & _CLONE_THREAD:
            self.children += 1

    def spots(self, pid: int | None, path: str | None) -> list[BlindSpot]:
        now = time.monotonic()
        seconds = self.seconds + sum(now - t for t in self.since.values())  # open periods count so far
        who = f"{(path or '?').rsplit('/', 1)[-1]} (pid {pid})"
        out = []
        if self.events:
            n = len(self.threads)
            out.append(BlindSpot("sigbus-blocked", f"{who}: {n:,} thread{'s' if n != 1 else ''} blocked SIGBUS "
                                 f"{self.events:,} time{'s' if self.events != 1 else ''} while armed ({seconds:.3f} s "
                                 "unwatched): unaligned accesses there were not seen", self.events, threads=n,
                                 seconds=seconds, pid=pid, path=path))
        if self.children:
            out.append(BlindSpot("untraced-process", f"{who}: {self.children:,} process"
                                 f"{'es' if self.children != 1 else ''} it started ran untraced (the trap engine "
                                 "follows one process; the agent engine follows children)", self.children, pid=pid))
        return out


def change_flags(target: Target, tid: int | None, ac: TrapFlags, set_bits: int, clear_bits: int) -> None:
    """Set and clear bits of one thread's flags register (written only if it changes)."""
    old = target.read_register(ac.register, tid)
    new = (old | set_bits) & ~clear_bits
    if new != old:
        target.write_register(ac.register, new, tid)


def set_ac(target: Target, tid: int, ac: TrapFlags, on: bool) -> None:
    """Arm (set AC) or disarm one thread."""
    change_flags(target, tid, ac, ac.ac_bit if on else 0, 0 if on else ac.ac_bit)


def clear_tf(target: Target, tid: int, ac: TrapFlags) -> bool:
    """Clear TF in one thread's flags; whether it was set (False too where it cannot be read)."""
    try:
        flags = target.read_register(ac.register, tid)
    except Exception:
        return False
    if not flags & ac.tf_bit:
        return False
    target.write_register(ac.register, flags & ~ac.tf_bit, tid)
    return True


class TrapEngine:
    """Per-thread arming state of one inferior. All methods run while the target is stopped, and
    after the lifecycle has told the engine the target's architecture (`use_arch`)."""

    name = "trap"

    def __init__(self, faults: FaultPath) -> None:
        self.faults = faults
        self.active = False
        self.armed: set[int] = set()  # threads whose AC we set
        self.sigbus_blocked: set[int] = set()  # threads we keep disarmed: SIGBUS is blocked there
        self.pending: dict[int, bool] = {}  # tid -> TF was already set by the program
        self.pending_pc: dict[int, int] = {}  # tid -> PC of the fault it is stepping over (TF path)
        self.in_clone: set[int] = set()  # armed threads paused across a task-creating syscall
        self.reported: dict[int, int] = {}  # stepper targets: tid -> PC of the fault it stopped at
        self.steps = StepEnds()  # stepper targets: where the debugger's step of a fault may end
        # Threads where ualdbg cleared its own TF while the debugger single-stepped the instruction
        # (a `step` from a break stop): the kernel's TIF_SINGLESTEP sets TF again, so it is
        # scrubbed at every stop of the thread.
        self.tf_suspect: set[int] = set()
        self.arch: archmod.ArchInfo | None = None
        self.flags: TrapFlags | None = None  # x86-64's EFLAGS.AC and TF (isa/cpu.py)
        # Architectures without EFLAGS.AC (SPARC, Alpha...): the fix-up engine does the work.
        self.fixup: FixupEngine | None = None
        self.mechanism = "EFLAGS.AC"
        self.slots = OutOfLine(faults)
        self.blind = BlindTally()

    # -- arming ------------------------------------------------------------------------------
    def use_arch(self, arch: archmod.ArchInfo) -> None:
        """The target's architecture, from the lifecycle when it first meets the target (once
        per session): a CPU without EFLAGS.AC gets the fix-up engine."""
        self.arch = arch
        self.flags = archmod.trap_flags(arch.name)
        if arch.mechanism != archmod.MECH_AC:
            self.fixup = FixupEngine(arch, self.faults)
            self.mechanism = self.fixup.mechanism

    def _a(self) -> archmod.ArchInfo:
        if self.arch is None:
            raise RuntimeError("the trap engine has not been told the target's architecture")
        return self.arch

    def _ac(self) -> TrapFlags:
        """The flags this engine arms (only the AC path asks: other CPUs have a fix-up engine)."""
        if self.flags is None:
            raise RuntimeError(f"{self._a().name} has no alignment-check flag to arm")
        return self.flags

    def arm_thread(self, target: Target, tid: int) -> bool:
        """Set AC in one thread unless it has SIGBUS blocked (a fault there would make the kernel
        reset the program's SIGBUS handler and unblock the signal: PLATFORM.md)."""
        pid = target.pid()
        mask = blocked_signals(pid, tid) if pid is not None else 0
        if self.blind.kept_disarmed(tid, mask):
            self.sigbus_blocked.add(tid)
            self.armed.discard(tid)
            set_ac(target, tid, self._ac(), False)
            return False
        self.sigbus_blocked.discard(tid)
        set_ac(target, tid, self._ac(), True)
        self.armed.add(tid)
        return True

    def arm(self, target: Target, later: frozenset[int] = frozenset()) -> None:
        """Arm every thread now (at main, at start, after attach, or when asked while stopped);
        `later` ones are armed by the lifecycle when they ran their instruction (arm_thread)."""
        self.active = True
        fixup = self.fixup
        if fixup is not None:
            fixup.arm(target)
            self.armed.update(target.threads())
            return
        for tid in target.threads():
            if tid not in self.pending and tid not in later:
                self.arm_thread(target, tid)

    def disarm(self, target: Target | None) -> None:
        """Clear AC (and our TF) in every thread; forget all per-thread state."""
        self.active = False
        live = target is not None and target.pid() is not None
        if target is not None and live and self.fixup is not None:
            self.fixup.disarm(target)
        elif target is not None and live:
            self.slots.leave(target, self._a())
            ac = self._ac()
            for tid in target.threads():
                clear = ac.ac_bit
                if (tid in self.pending and not self.pending[tid]) or tid in self.tf_suspect:
                    clear |= ac.tf_bit
                change_flags(target, tid, ac, 0, clear)
        self.forget_threads()

    def forget_threads(self) -> None:
        """The process is gone or is a new image: nothing is armed until the next arm point
        (a stop before `main` in the next run must not arm it early)."""
        self.active = False
        self.blind.stop_all()
        self.pending_pc.clear()
        self.slots.reset()
        self.armed.clear()
        self.sigbus_blocked.clear()
        self.pending.clear()
        self.in_clone.clear()
        self.reported.clear()
        self.steps.clear()
        if self.fixup is not None:
            self.fixup.forget()
        self.tf_suspect.clear()

    def thread_exited(self, tid: int) -> None:
        self.blind.stop(tid)
        for group in (self.armed, self.sigbus_blocked, self.in_clone):
            group.discard(tid)
        self.pending.pop(tid, None)
        self.reported.pop(tid, None)
        self.steps.forget(tid)
        self.tf_suspect.discard(tid)

    def reconcile(self, target: Target) -> None:
        """At a user-visible stop: finish step-overs whose trap the debugger kept for itself
        (gdb's `step`/`next`/`finish` single-step without showing our catchpoint their traps),
        and arm threads that should be armed and are not (created by a path ualdbg saw no hook
        for, or that unblocked SIGBUS)."""
        a = self._a()
        if self.fixup is not None:
            return
        for tid, fault_pc in list(self.pending_pc.items()):
            if tid not in self.pending:
                del self.pending_pc[tid]
                continue
            try:
                moved = target.read_register(a.pc, tid) != fault_pc
            except Exception:
                continue
            if moved:
                tf_was_set = self.pending.pop(tid)
                del self.pending_pc[tid]
                ac = self._ac()
                clear = 0 if tf_was_set else ac.tf_bit
                arm = ac.ac_bit if (self.active and tid in self.armed) else 0
                change_flags(target, tid, ac, arm, clear)
                if clear:
                    self.tf_suspect.add(tid)
        for tid in list(self.tf_suspect):
            if tid not in self.pending:
                self.scrub_tf(target, tid)
        if not self.active:
            return
        for tid in target.threads():
            if tid not in self.armed and tid not in self.pending and tid not in self.in_clone:
                self.arm_thread(target, tid)

    # -- events --------------------------------------------------------------------------------
    def siginfo_unavailable(self, target: Target, signo: int) -> SigInfo | None:
        """No siginfo (qemu's stub): the fix-up engine needs none; the AC engine needs si_code."""
        if signo != archmod.SIGBUS or self._a().mechanism == archmod.MECH_AC:
            return None
        return SigInfo(signo, 0, None)

    def on_signal(self, target: Target, info: SigInfo | None = None) -> Decision:
        """Called at a SIGBUS or SIGTRAP stop of the current thread."""
        info = info or target.siginfo()
        if info is None:
            return Decision.NOT_OURS
        self._a()  # which engine decides (AC or fix-up) is the architecture's
        fixup = self.fixup
        if fixup is not None:
            return fixup.on_signal(target, info)
        if info.signo == archmod.SIGTRAP:
            return self._on_trap(target)
        if info.signo != archmod.SIGBUS or info.code != archmod.BUS_ADRALN:
            return Decision.NOT_OURS
        tid = target.current_tid()
        if tid not in self.armed:
            # AC was set by the program itself, or by an inheritance we did not see: not ours
            # unless we are active (then it is an unaligned access in scope of the trace).
            if not self.active:
                return Decision.NOT_OURS
        a, ac = self._a(), self._ac()
        flags = target.read_register(ac.register, tid)
        if not flags & ac.ac_bit:
            return Decision.NOT_OURS
        if offers(target, FaultStepper):
            return self._on_fault_stepper(target, tid, info, flags, target.step_over_fault)
        pc = target.read_register(a.pc, tid)
        if self.slots.in_head(pc):
            # The slot's own pushfq faulted: the program's rsp is misaligned. Clear AC from
            # here; the head's popfq keeps it clear and the tail sets it again.
            target.write_register(ac.register, flags & ~ac.ac_bit, tid)
            return Decision.RESUME
        stop = self.faults.record(target, a, tid, info)
        if not stop and offers(target, OutOfLineTarget):
            slot = self.slots.slot_for(target, a, tid, target.write_memory)
            if slot is not None:
                # One stop per fault: the slot clears AC, runs the copy, sets AC, jumps back.
                target.write_register(a.pc, slot.start, tid)
                return Decision.RESUME
        # Run the faulting instruction once with AC clear; TF makes the CPU trap right after it
        # (after ONE iteration of a rep string instruction, so k misaligned elements count k).
        self.pending[tid] = bool(flags & ac.tf_bit) and tid not in self.tf_suspect
        self.pending_pc[tid] = pc
        target.write_register(ac.register, (flags & ~ac.ac_bit) | ac.tf_bit, tid)
        return Decision.STOP if stop else Decision.RESUME

    def _on_fault_stepper(self, target: Target, tid: int, info: SigInfo, flags: int,
                          step_over_fault: Callable[[int, int | None], None]) -> Decision:
        """For targets that single-step the fault themselves (lldb: FaultStepper). A STOP leaves
        AC set: whatever the user resumes with re-runs the instruction, whose SIGBUS (the one
        reported) is stepped over uncounted. AC is clear for one instruction (one iteration of a
        rep string one: k misaligned elements count k); StepEnds checks where the step ended."""
        a = self._a()
        pc = target.read_register(a.pc, tid)
        if self.reported.pop(tid, None) != pc:
            if self.faults.record(target, a, tid, info):
                self.reported[tid] = pc
                return Decision.STOP
        self.pending[tid] = True  # True: ualdbg set no TF, so disarm must not clear it
        ac = self._ac()
        target.write_register(ac.register, flags & ~ac.ac_bit, tid)
        step_over_fault(tid, self.steps.expect(tid, pc, self.faults.insn_at(target, a, pc, tid)))
        return Decision.RESUME

    def fault_stepped(self, target: Target, tid: int) -> str | None:
        """A FaultStepper target ran the faulting instruction of `tid`: arm it again, after
        checking where its step ended (StepEnds: the line to say; a fault not to count twice)."""
        said, again = self.steps.ended(tid, target.read_register(self._a().pc, tid))
        if self.pending.pop(tid, None) is None:
            return None
        if again is not None:
            self.reported[tid] = again
        if self.active and tid in self.armed:
            set_ac(target, tid, self._ac(), True)
        return said

    def scrub_tf(self, target: Target, tid: int) -> bool:
        """Clear a TF the kernel re-set after ualdbg cleared its own (see `tf_suspect`)."""
        return clear_tf(target, tid, self._ac())

    def _on_trap(self, target: Target) -> Decision:
        tid = target.current_tid()
        if tid not in self.pending:
            if tid in self.tf_suspect and self.scrub_tf(target, tid):
                return Decision.RESUME
            return Decision.NOT_OURS
        tf_was_set = self.pending.pop(tid)
        self.pending_pc.pop(tid, None)
        ac = self._ac()
        clear = 0 if tf_was_set else ac.tf_bit
        if clear:
            self.tf_suspect.add(tid)
        if self.active and tid in self.armed:
            change_flags(target, tid, ac, ac.ac_bit, clear)
        else:
            change_flags(target, tid, ac, 0, clear)
        # A program that single-steps itself (TF already set) still gets its own SIGTRAP.
        return Decision.NOT_OURS if tf_was_set else Decision.RESUME

    def on_syscall(self, target: Target, tid: int | None = None, nr: int | None = None,
                   entry: bool | None = None) -> None:
        """At entry and exit of clone/fork/vfork/clone3 and rt_sigprocmask: gdb's catchpoint
        (the current thread; the syscall and the side read from its registers), lldb's site
        breakpoints (which know both)."""
        if not self.active or self.fixup is not None:
            return
        ac = self._ac()
        if tid is None:
            tid = target.current_tid()
        if nr is None:
            nr = target.read_register(ac.syscall_nr, tid)
        if entry is None:
            entry = target.read_register(ac.syscall_ret, tid) == (-archmod.ENOSYS & 0xFFFFFFFFFFFFFFFF)
        if nr in ac.task_creating_syscalls:
            if entry:
                self.before_task_creation(target, tid)
            else:
                self.after_task_creation(target, tid)
                self.blind.count_process(target, tid, nr, ac)
        elif nr == ac.sigprocmask_syscall and not entry:
            self.after_mask_change(target, tid)

    def before_task_creation(self, target: Target, tid: int) -> None:
        """New tasks copy the caller's flags: start them unarmed (a new pthread runs libc with
        signals blocked before its start routine; a forked child is not traced)."""
        if self.active and tid in self.armed:
            set_ac(target, tid, self._ac(), False)
            self.in_clone.add(tid)

    def after_task_creation(self, target: Target, tid: int) -> None:
        if tid in self.in_clone:
            self.in_clone.discard(tid)
            if self.active:
                set_ac(target, tid, self._ac(), True)

    def after_mask_change(self, target: Target, tid: int) -> None:
        """The last syscall a new pthread makes before its start routine restores its mask;
        a program that blocks SIGBUS must not run armed: re-decide at every mask change."""
        if self.active and tid not in self.pending and tid not in self.in_clone:
            self.arm_thread(target, tid)

