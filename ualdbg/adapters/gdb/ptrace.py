"""Register writes by ptrace(2) itself, for a debugger that is this process and traces natively.

gdb's Python runs in the thread that ptraces the inferior, so it may call ptrace directly. A
register store through gdb (`$rip = X`) costs ~60-90 us: gdb finds the frame the value belongs to
(running the unwinders), stores the whole register set and tells its observers. PTRACE_POKEUSER
is one system call; the debugger's register cache is then flushed so it reads the truth again.
Only for x86-64 Linux (the layout of `struct user_regs_struct` below); anything else, or a
failing call, answers False and the caller falls back to the debugger's own path."""
from __future__ import annotations

import ctypes
import os

PTRACE_POKEUSER = 6

# struct user_regs_struct (x86-64, <sys/user.h>): the offset of each register in `struct user`.
X86_64_USER_REGS = {name: 8 * i for i, name in enumerate((
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi",
    "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs"))}


class RegisterPoker:
    """PTRACE_POKEUSER for the registers of one architecture's user area."""

    def __init__(self) -> None:
        self.offsets = X86_64_USER_REGS if os.uname().machine == "x86_64" else {}
        self._ptrace = None
        if self.offsets:
            try:
                libc = ctypes.CDLL("libc.so.6", use_errno=True)
                fn = libc.ptrace
                fn.restype = ctypes.c_long
                fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
                self._ptrace = fn
            except (OSError, AttributeError):
                self.offsets = {}

    def covers(self, names: object) -> bool:
        return self._ptrace is not None and all(n in self.offsets for n in names)  # type: ignore[attr-defined]

    def poke(self, tid: int, values: dict[str, int]) -> bool:
        """Write the registers of a stopped tracee thread; False if any write failed."""
        if self._ptrace is None:
            return False
        for name, value in values.items():
            off = self.offsets.get(name)
            if off is None or self._ptrace(PTRACE_POKEUSER, tid, off, value & 0xFFFFFFFFFFFFFFFF) != 0:
                return False
        return True
