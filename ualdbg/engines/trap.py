"""Signal mode: arm EFLAGS.AC in every thread, turn each SIGBUS/BUS_ADRALN into a Fault, and
resume by running the faulting instruction once with AC clear and TF set, re-arming at the
single-step trap that follows (one extra stop, not a debugger `stepi`); or, for a target that is
a FaultStepper (lldb), under the debugger's own single-step."""
from __future__ import annotations

from collections.abc import Callable

from ..core.target import FaultStepper, OutOfLineTarget, SigInfo, Target, offers
from ..isa import arch as archmod
from .faultpath import Decision, FaultPath
from .fixup import FixupEngine
from .outofline import OutOfLine
from .procfs import sigbus_blocked


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
        # Threads where ualdbg cleared its own TF: if the debugger was single-stepping the same
        # instruction (the user's `step` from a break stop), the kernel still has TIF_SINGLESTEP
        # and sets TF again as the program's own at the next PTRACE_SINGLESTEP, where no
        # PTRACE_CONT will ever clear it. Such a TF is scrubbed at every stop of the thread.
        self.tf_suspect: set[int] = set()
        self.arch: archmod.ArchInfo | None = None
        # Architectures without EFLAGS.AC (SPARC, Alpha...): the fix-up engine does the work.
        self.fixup: FixupEngine | None = None
        self.mechanism = "EFLAGS.AC"
        self.slots = OutOfLine(faults)

    # -- arming ------------------------------------------------------------------------------
    def use_arch(self, arch: archmod.ArchInfo) -> None:
        """The target's architecture, from the lifecycle when it first meets the target (once
        per session): a CPU without EFLAGS.AC gets the fix-up engine."""
        self.arch = arch
        if arch.mechanism != archmod.MECH_AC:
            self.fixup = FixupEngine(arch, self.faults)
            self.mechanism = self.fixup.mechanism

    def _a(self) -> archmod.ArchInfo:
        if self.arch is None:
            raise RuntimeError("the trap engine has not been told the target's architecture")
        return self.arch

    def _set_flags(self, target: Target, tid: int | None, set_bits: int, clear_bits: int) -> None:
        name = self._a().flags
        old = target.read_register(name, tid)
        new = (old | set_bits) & ~clear_bits
        if new != old:
            target.write_register(name, new, tid)

    def arm_thread(self, target: Target, tid: int) -> bool:
        """Set AC in one thread unless it has SIGBUS blocked (a fault there would make the kernel
        reset the program's SIGBUS handler and unblock the signal: PLATFORM.md)."""
        pid = target.pid()
        if pid is not None and sigbus_blocked(pid, tid):
            self.sigbus_blocked.add(tid)
            self.armed.discard(tid)
            self._set_flags(target, tid, 0, self._a().ac_bit)
            return False
        self.sigbus_blocked.discard(tid)
        self._set_flags(target, tid, self._a().ac_bit, 0)
        self.armed.add(tid)
        return True

    def arm(self, target: Target) -> None:
        """Arm every thread now (at main, at start, after attach, or when asked while stopped)."""
        self.active = True
        fixup = self.fixup
        if fixup is not None:
            fixup.arm(target)
            self.armed.update(target.threads())
            return
        for tid in target.threads():
            if tid not in self.pending:
                self.arm_thread(target, tid)

    def disarm(self, target: Target | None) -> None:
        """Clear AC (and our TF) in every thread; forget all per-thread state."""
        self.active = False
        live = target is not None and target.pid() is not None
        if target is not None and live and self.fixup is not None:
            self.fixup.disarm(target)
        elif target is not None and live:
            self.slots.leave(target, self._a())
            a = self._a()
            for tid in target.threads():
                clear = a.ac_bit
                if (tid in self.pending and not self.pending[tid]) or tid in self.tf_suspect:
                    clear |= a.tf_bit
                self._set_flags(target, tid, 0, clear)
        self.forget_threads()

    def forget_threads(self) -> None:
        """The process is gone or is a new image: nothing is armed until the next arm point
        (a stop before `main` in the next run must not arm it early)."""
        self.active = False
        self.pending_pc.clear()
        self.slots.reset()
        self.armed.clear()
        self.sigbus_blocked.clear()
        self.pending.clear()
        self.in_clone.clear()
        self.reported.clear()
        if self.fixup is not None:
            self.fixup.forget()
        self.tf_suspect.clear()

    def thread_exited(self, tid: int) -> None:
        for group in (self.armed, self.sigbus_blocked, self.in_clone):
            group.discard(tid)
        self.pending.pop(tid, None)
        self.reported.pop(tid, None)
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
                clear = 0 if tf_was_set else a.tf_bit
                arm = a.ac_bit if (self.active and tid in self.armed) else 0
                self._set_flags(target, tid, arm, clear)
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
        """What to go on when the debugger has no siginfo (qemu's gdb stub): the fix-up engine
        decodes the instruction and needs none; the AC engine needs si_code and gives up."""
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
        a = self._a()
        flags = target.read_register(a.flags, tid)
        if not flags & a.ac_bit:
            return Decision.NOT_OURS
        if offers(target, FaultStepper):
            return self._on_fault_stepper(target, tid, info, flags, target.step_over_fault)
        pc = target.read_register(a.pc, tid)
        if self.slots.in_head(pc):
            # The slot's own pushfq faulted: the program's rsp is misaligned. Clear AC from
            # here; the head's popfq keeps it clear and the tail sets it again.
            target.write_register(a.flags, flags & ~a.ac_bit, tid)
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
        self.pending[tid] = bool(flags & a.tf_bit) and tid not in self.tf_suspect
        self.pending_pc[tid] = pc
        target.write_register(a.flags, (flags & ~a.ac_bit) | a.tf_bit, tid)
        return Decision.STOP if stop else Decision.RESUME

    def _on_fault_stepper(self, target: Target, tid: int, info: SigInfo, flags: int,
                          step_over_fault: Callable[[int], None]) -> Decision:
        """The second resume strategy, for targets that single-step the fault themselves (lldb:
        see FaultStepper). A STOP leaves AC set, so whatever the user resumes with (continue,
        step-over, finish, step-inst) re-executes the instruction and faults again in the same
        thread at the same PC before anything else runs: that SIGBUS is the reported one, stepped
        over without counting it twice. AC is clear for exactly one instruction (one iteration of
        a rep string instruction, so k misaligned elements still count k)."""
        a = self._a()
        pc = target.read_register(a.pc, tid)
        if self.reported.pop(tid, None) != pc:
            if self.faults.record(target, a, tid, info):
                self.reported[tid] = pc
                return Decision.STOP
        self.pending[tid] = True  # True: ualdbg set no TF, so disarm must not clear it
        target.write_register(a.flags, flags & ~a.ac_bit, tid)
        step_over_fault(tid)
        return Decision.RESUME

    def fault_stepped(self, target: Target, tid: int) -> None:
        """A FaultStepper target ran the faulting instruction of `tid`: arm it again."""
        if self.pending.pop(tid, None) is None:
            return
        if self.active and tid in self.armed:
            self._set_flags(target, tid, self._a().ac_bit, 0)

    def scrub_tf(self, target: Target, tid: int) -> bool:
        """Clear a TF the kernel re-set after ualdbg cleared its own (see `tf_suspect`)."""
        a = self._a()
        try:
            flags = target.read_register(a.flags, tid)
        except Exception:
            return False
        if not flags & a.tf_bit:
            return False
        target.write_register(a.flags, flags & ~a.tf_bit, tid)
        return True

    def _on_trap(self, target: Target) -> Decision:
        tid = target.current_tid()
        if tid not in self.pending:
            if tid in self.tf_suspect and self.scrub_tf(target, tid):
                return Decision.RESUME
            return Decision.NOT_OURS
        tf_was_set = self.pending.pop(tid)
        self.pending_pc.pop(tid, None)
        a = self._a()
        clear = 0 if tf_was_set else a.tf_bit
        if clear:
            self.tf_suspect.add(tid)
        if self.active and tid in self.armed:
            self._set_flags(target, tid, a.ac_bit, clear)
        else:
            self._set_flags(target, tid, 0, clear)
        # A program that single-steps itself (TF already set) still gets its own SIGTRAP.
        return Decision.NOT_OURS if tf_was_set else Decision.RESUME

    def on_syscall(self, target: Target, tid: int | None = None, nr: int | None = None,
                   entry: bool | None = None) -> None:
        """At entry and exit of clone/fork/vfork/clone3 and rt_sigprocmask: gdb's catchpoint
        (the current thread; the syscall and the side read from its registers), lldb's site
        breakpoints (which know both)."""
        if not self.active or self.fixup is not None:
            return
        a = self._a()
        if tid is None:
            tid = target.current_tid()
        if nr is None:
            nr = target.read_register(a.syscall_nr, tid)
        if entry is None:
            entry = target.read_register(a.syscall_ret, tid) == (-archmod.ENOSYS & 0xFFFFFFFFFFFFFFFF)
        if nr in a.task_creating_syscalls:
            if entry:
                self.before_task_creation(target, tid)
            else:
                self.after_task_creation(target, tid)
        elif nr == a.sigprocmask_syscall and not entry:
            self.after_mask_change(target, tid)

    def before_task_creation(self, target: Target, tid: int) -> None:
        """New tasks copy the caller's flags: start them unarmed (a new pthread runs libc with
        signals blocked before its start routine; a forked child is not traced)."""
        if self.active and tid in self.armed:
            self._set_flags(target, tid, 0, self._a().ac_bit)
            self.in_clone.add(tid)

    def after_task_creation(self, target: Target, tid: int) -> None:
        if tid in self.in_clone:
            self.in_clone.discard(tid)
            if self.active:
                self._set_flags(target, tid, self._a().ac_bit, 0)

    def after_mask_change(self, target: Target, tid: int) -> None:
        """The last syscall a new pthread makes before its start routine restores its mask;
        a program that blocks SIGBUS must not run armed: re-decide at every mask change."""
        if self.active and tid not in self.pending and tid not in self.in_clone:
            self.arm_thread(target, tid)
