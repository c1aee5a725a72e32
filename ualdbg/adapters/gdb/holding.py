"""The threads of gdb's process as ualdbg must reach them: in non-stop mode, the running threads
held stopped for the length of one command (threadhold.py does the holding) and the SIGTRAPs it
sent to hold them, which gdb reports later and ualdbg swallows; and, at `off`, the threads whose
alignment fault gdb has yet to report."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import gdb  # type: ignore[import-not-found]

from ...engines.step import TRAP_TRACE
from ...isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP
from .console import warn
from .signals import SignalHandles
from .target import GdbTarget
from .threadhold import SI_TKILL, ThreadHolder


class Holding:
    """The held threads of one gdb and the SIGTRAPs that held them."""

    def __init__(self, target: GdbTarget, signals: SignalHandles) -> None:
        self.target = target
        self.signals = signals
        # Non-stop mode: SIGTRAPs ualdbg sent to hold running threads (threadhold.py) that gdb
        # has yet to report, per thread: the SIGTRAP catchpoint swallows them, even after `off`.
        self.kicks: dict[int, int] = {}

    @contextmanager
    def hold_running(self, only: set[int] | None = None) -> Iterator[None]:
        """Non-stop mode: hold every running thread stopped for the length of one command
        (`off`, `break`, `trace start|stop`, a detach), so the engines reach every thread's
        flags at once, as in all-stop mode; the threads go on when gdb collects the stops
        (threadhold.py). Nothing to do in all-stop mode, where a command runs with every
        thread stopped."""
        inf = gdb.selected_inferior()
        running = [int(t.ptid[1]) for t in inf.threads() if t.is_valid() and t.is_running()] if inf.pid else []
        running = [tid for tid in running if only is None or tid in only]
        holder = ThreadHolder(inf.pid) if running else None
        if holder is not None and (self.target.remote() or not holder.usable()):
            gdb.write(f"ualdbg: {len(running)} running thread(s) cannot be reached here (not a native x86-64 "
                      "process): `interrupt -a` first\n", gdb.STDERR)
            holder = None
        held = self.target.held
        try:
            if holder is not None:
                for tid in running:
                    if holder.kick(tid) and holder.wait_stopped(tid):
                        info = holder.stop_info(tid)
                        if (info is not None and info.is_kick()) or holder.trap_pending(tid):
                            self.kicks[tid] = self.kicks.get(tid, 0) + 1
                        held[tid] = holder
                    elif holder.state(tid) is not None:
                        warn(f"thread {tid} did not stop for ualdbg (uninterruptible?): its flags are unchanged")
            yield
        finally:
            if held:
                held.clear()
                gdb.execute("maint flush register-cache", to_string=True)

    def is_kick(self) -> bool:
        """The current SIGTRAP is one ualdbg sent to hold the thread (tgkill from gdb)."""
        try:
            si = gdb.parse_and_eval("$_siginfo")
            return (int(si["si_code"]) == SI_TKILL
                    and int(si["_sifields"]["_kill"]["si_pid"]) == os.getpid())
        except gdb.error:
            return False

    def expects_kick(self, tid: int) -> bool:
        return tid in self.kicks and self.is_kick()

    def swallow_kick(self, tid: int) -> int:
        """The condition's answer to one of ualdbg's SIGTRAPs: resume, without the signal."""
        left = self.kicks.get(tid, 1) - 1
        if left > 0:
            self.kicks[tid] = left
        else:
            self.kicks.pop(tid, None)
        self.signals.set_pass(SIGTRAP, False)
        return 0

    def unreported_alignment_faults(self) -> set[int]:
        """Threads (other than the current one) whose last stop is an #AC SIGBUS gdb has not
        reported yet: in all-stop mode, a thread that faulted while gdb was stopping everything
        for another thread's event keeps its SIGBUS pending, and gdb reports it at the next
        resume, after `off` has cleared that thread's AC. The caller has a stopped thread."""
        return self._unreported(SIGBUS, BUS_ADRALN)

    def unreported_step_traps(self) -> set[int]:
        """Threads (other than the current one) whose last stop is a single-step trap gdb has not
        reported yet: the trap after a fault ran with AC clear and TF set, pending as a fault
        is (unreported_alignment_faults) when `off` runs."""
        return self._unreported(SIGTRAP, TRAP_TRACE)

    def _unreported(self, signo: int, code: int) -> set[int]:
        found: set[int] = set()
        cur = gdb.selected_thread()
        if cur is None:
            return found
        try:
            for t in gdb.selected_inferior().threads():
                if t == cur or not t.is_valid():
                    continue
                held = self.target.held.get(int(t.ptid[1]))
                if held is not None:  # non-stop: a running thread ualdbg holds stopped
                    stop = held.stop_info(int(t.ptid[1]))
                    if stop is not None and stop.signo == signo and stop.code == code:
                        found.add(int(t.ptid[1]))
                    continue
                t.switch()
                try:
                    si = gdb.parse_and_eval("$_siginfo")
                    if int(si["si_signo"]) == signo and int(si["si_code"]) == code:
                        found.add(int(t.ptid[1]))
                except gdb.error:
                    pass
        finally:
            cur.switch()
        return found
