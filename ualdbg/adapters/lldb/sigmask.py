"""No breakpoint trap in a thread that has SIGTRAP blocked, under lldb. Such a trap makes the
kernel (force_sig_info_to_task) reset the program's SIGTRAP handler to SIG_DFL for the whole
process and unblock SIGTRAP in that thread. glibc blocks every signal around clone3
(pthread_create, posix_spawn) and tgkill (pthread_kill), and at a thread's end; the clone3
breakpoints, the exit breakpoints of those rt_sigprocmask calls and lldb's single-step past each
would all do it (gdb's `catch syscall` stops without a trap). So glibc's own SIG_BLOCKs (the
constant made in its code; never the program's pthread_sigmask) block their set without SIGTRAP:
the program's SIGTRAP stays deliverable, as it was, for the few instructions until glibc
restores the mask it saved or the thread ends."""
from __future__ import annotations

from typing import Any

import lldb  # type: ignore[import-not-found]

from ...engines.procfs import blocked_signals
from ...isa.arch import SIGTRAP
from .interp import warn
from .target import LldbTarget

_SIG_BLOCK = 0
_TRAP_BIT = 1 << (SIGTRAP - 1)


class SigtrapSwaps:
    """The rt_sigprocmask calls in flight whose set ualdbg changed, per thread: until each one's
    exit breakpoint, what to put back."""

    def __init__(self) -> None:
        # tid -> (its exit breakpoint, what to put back there: ("rsi", value) or (address, bytes))
        self.set_swaps: dict[int, tuple[int, tuple[Any, Any]]] = {}

    def opened(self, thread: lldb.SBThread) -> None:
        """At the entry of glibc's rt_sigprocmask(SIG_BLOCK, set, oldset, 8), when it would
        block SIGTRAP: with an `oldset`, the set minus SIGTRAP goes into that buffer and rsi
        points there (the kernel reads the new set before it writes the old one, so the buffer
        ends as the program expects; rsi, which the compiler may still count on, comes back at
        the exit); without one, the set (glibc's own buffer) loses SIGTRAP until the exit."""
        process = thread.GetProcess()
        target = LldbTarget(process, thread)
        tid = int(thread.GetThreadID())
        how, nset, oset, size = (target.read_register(r, tid) for r in ("rdi", "rsi", "rdx", "r10"))
        if how != _SIG_BLOCK or not nset or size != 8 or blocked_signals(int(process.GetProcessID()), tid) & _TRAP_BIT:
            return
        raw = target.read_memory(nset, 8)
        if len(raw) != 8 or not int.from_bytes(raw, "little") & _TRAP_BIT:
            return
        stripped = (int.from_bytes(raw, "little") & ~_TRAP_BIT).to_bytes(8, "little")
        exit_pc = thread.GetFrameAtIndex(0).GetPC() + 2
        err = lldb.SBError()
        if oset:
            process.WriteMemory(oset, stripped, err)
            if err.Success():
                target.write_register("rsi", oset, tid)
                self.set_swaps[tid] = (exit_pc, ("rsi", nset))
            return
        section = lldb.SBAddress(nset, process.GetTarget()).GetSection()
        if section.IsValid() and not section.GetPermissions() & lldb.ePermissionsWritable:
            return  # a constant other threads may read meanwhile: left alone
        # Another thread in the same syscall on the same set holds its true bytes.
        raw = next((undo[1] for _pc, undo in self.set_swaps.values() if undo[0] == nset), raw)
        process.WriteMemory(nset, stripped, err)
        if err.Success():
            self.set_swaps[tid] = (exit_pc, (nset, raw))

    def _undo_swap(self, process: lldb.SBProcess, thread: lldb.SBThread, exit_pc: int, undo: tuple[Any, Any]) -> None:
        """Put back rsi while the thread is still at the syscall or its exit (elsewhere it is no
        longer the value the code counts on); the set's bytes whenever the thread lives."""
        where, what = undo
        if not thread.IsValid():
            return  # gone: its buffer may be another thread's by now
        if where == "rsi":
            if thread.GetFrameAtIndex(0).GetPC() in (exit_pc, exit_pc - 2):
                LldbTarget(process, thread).write_register("rsi", what, int(thread.GetThreadID()))
        elif not any(other[0] == where for _pc, other in self.set_swaps.values()):  # the last one out
            err = lldb.SBError()
            process.WriteMemory(where, what, err)

    def closed(self, thread: lldb.SBThread) -> None:
        """An exit breakpoint: put back what `opened` changed at this syscall's entry."""
        swap = self.set_swaps.pop(int(thread.GetThreadID()), None)
        if swap is not None:
            self._undo_swap(thread.GetProcess(), thread, *swap)

    def settle(self, process: lldb.SBProcess, leaving: bool) -> None:
        """At a stop the user sees, and before ualdbg lets go (`leaving`): finish the swaps of
        threads that are at their exit without its callback having run; when leaving, undo
        those of threads still at the entry (no breakpoint will be there to finish them)."""
        for tid, (exit_pc, undo) in list(self.set_swaps.items()):
            thread = process.GetThreadByID(tid) if process.IsValid() else lldb.SBThread()
            pc = thread.GetFrameAtIndex(0).GetPC() if thread.IsValid() else None
            if pc == exit_pc - 2 and not leaving:
                continue  # it has not made the syscall yet
            del self.set_swaps[tid]
            self._undo_swap(process, thread, exit_pc, undo)

    def settle_safely(self, process: lldb.SBProcess) -> None:
        """Before ualdbg lets go (`off`, a detach): every swap undone, whatever happens."""
        if not self.set_swaps:
            return
        try:
            if process.IsValid() and process.GetState() == lldb.eStateStopped:
                self.settle(process, leaving=True)
        except Exception as exc:
            warn(None, f"restoring a register: {exc}")
        self.set_swaps.clear()
