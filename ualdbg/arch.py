"""Per-architecture facts in one place: register names, the flag bits and signal codes the trap
engine uses, and the syscalls that create tasks or change signal masks."""
from __future__ import annotations

from dataclasses import dataclass

SIGTRAP = 5
SIGBUS = 7
SIGSEGV = 11
BUS_ADRALN = 1
ENOSYS = 38


@dataclass(frozen=True)
class ArchInfo:
    name: str
    pc: str
    sp: str
    flags: str
    ac_bit: int  # EFLAGS.AC: alignment check (PLATFORM.md)
    tf_bit: int  # EFLAGS.TF: one single-step trap after the next instruction
    syscall_nr: str  # register holding the syscall number at a syscall stop
    syscall_ret: str
    # Syscalls that copy the caller's registers (and so EFLAGS.AC) into a new task.
    task_creating_syscalls: frozenset[int]
    sigprocmask_syscall: int
    si_addr_is_data: bool  # whether SIGBUS si_addr is the data address (x86 #AC gives NULL)


X86_64 = ArchInfo(
    name="x86_64",
    pc="rip",
    sp="rsp",
    flags="eflags",
    ac_bit=0x40000,
    tf_bit=0x100,
    syscall_nr="orig_rax",
    syscall_ret="rax",
    task_creating_syscalls=frozenset({56, 57, 58, 435}),  # clone, fork, vfork, clone3
    sigprocmask_syscall=14,
    si_addr_is_data=False,
)

SYSCALL_NAMES = {56: "clone", 57: "fork", 58: "vfork", 435: "clone3", 14: "rt_sigprocmask"}

_BY_NAME = {"x86_64": X86_64, "i386:x86-64": X86_64, "x86-64": X86_64, "amd64": X86_64}


def arch_info(name: str) -> ArchInfo:
    """Map a debugger's architecture name to what ualdbg knows of it."""
    key = name.lower()
    for prefix, info in _BY_NAME.items():
        if key == prefix or key.startswith(prefix):
            return info
    raise ValueError(f"unsupported architecture {name!r}: ualdbg's trap engine knows x86_64")
