"""Hold a running thread of a process this process ptraces, without the debugger's event loop.

gdb in non-stop mode (`set non-stop on`) leaves the other threads running while one is stopped,
and a running thread's registers can neither be read nor written. `ualdbg off`, `break` and a
detach must still change EFLAGS in every thread, at once (a detached thread left with AC set
dies at its next unaligned access). gdb's `interrupt` only reports the stop later, from its event
loop, which a command cannot run. So the thread gets a SIGTRAP by tgkill(2) from gdb's own
process, which stops it for its tracer (gdb); the registers are then read and written by ptrace
(gdb's Python runs in the thread that ptraces the inferior: ualdbg/adapters/gdb/ptrace.py), and the stop is
left for gdb to collect: ualdbg's SIGTRAP catchpoint recognises it (SI_TKILL from gdb's pid) and
resumes the thread without giving the program the signal. Linux x86-64 only."""
from __future__ import annotations

import ctypes
import os
import time

from ...lazyclass import dataclass
from .ptrace import X86_64_USER_REGS, RegisterPoker

SIGTRAP = 5
SI_TKILL = -6  # si_code of a signal sent by tgkill(2)
SYS_TGKILL = 234  # x86-64
PTRACE_PEEKUSER = 3
PTRACE_GETSIGINFO = 0x4202


@dataclass(frozen=True)
class StopInfo:
    """What a held thread is stopped with, from PTRACE_GETSIGINFO."""

    signo: int
    code: int
    sender: int  # si_pid (a kill/tgkill); meaningless for a fault

    def is_kick(self) -> bool:
        """The SIGTRAP ualdbg sent from this (gdb's) process."""
        return self.signo == SIGTRAP and self.code == SI_TKILL and self.sender == os.getpid()


class ThreadHolder:
    """tgkill + wait for the tracing stop + ptrace register access for threads of `pid`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.poker = RegisterPoker()
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._ptrace = libc.ptrace
        self._ptrace.restype = ctypes.c_long
        self._ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

    def usable(self) -> bool:
        return self.poker.covers(("eflags", "rip"))

    def _status(self, tid: int) -> str | None:
        try:
            with open(f"/proc/{self.pid}/task/{tid}/status") as f:
                return f.read()
        except OSError:
            return None

    def state(self, tid: int) -> str | None:
        """The thread's scheduler state letter (`t`: stopped by its tracer), None when gone."""
        try:
            with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            return None
        return text[text.rfind(")") + 2:][:1] or None

    def trap_pending(self, tid: int) -> bool:
        """Whether a SIGTRAP waits in the thread's own pending set (ours, not yet delivered)."""
        text = self._status(tid) or ""
        for line in text.splitlines():
            if line.startswith("SigPnd:"):
                return bool(int(line.split()[1], 16) & (1 << (SIGTRAP - 1)))
        return False

    def kick(self, tid: int) -> bool:
        """Send the thread our SIGTRAP; False when it is gone."""
        return self._syscall(SYS_TGKILL, self.pid, tid, SIGTRAP) == 0

    def wait_stopped(self, tid: int, timeout: float = 5.0) -> bool:
        """Until the thread is in a tracing stop (ours or one it reached first); False when it
        exited or did not stop in time (uninterruptible sleep)."""
        deadline = time.monotonic() + timeout
        delay = 0.0002
        while True:
            state = self.state(tid)
            if state is None or state in ("Z", "X"):
                return False
            if state == "t":
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def stop_info(self, tid: int) -> StopInfo | None:
        buf = ctypes.create_string_buffer(128)
        if self._ptrace(PTRACE_GETSIGINFO, tid, None, buf) != 0:
            return None  # a group-stop or an event stop without siginfo
        raw = buf.raw
        return StopInfo(int.from_bytes(raw[0:4], "little", signed=True), int.from_bytes(raw[8:12], "little", signed=True),
                        int.from_bytes(raw[16:20], "little", signed=True))

    def read(self, tid: int, name: str) -> int:
        off = X86_64_USER_REGS.get(name)
        if off is None:
            raise KeyError(f"register {name} cannot be read from a running thread")
        ctypes.set_errno(0)
        value = self._ptrace(PTRACE_PEEKUSER, tid, off, None)
        if value == -1 and ctypes.get_errno() != 0:
            raise OSError(ctypes.get_errno(), f"ptrace(PEEKUSER) of thread {tid}")
        return value & 0xFFFFFFFFFFFFFFFF

    def write(self, tid: int, values: dict[str, int]) -> None:
        if not self.poker.poke(tid, values):
            raise OSError(f"ptrace(POKEUSER) of thread {tid} failed")
