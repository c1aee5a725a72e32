"""x86-64: unaligned data accesses trap only with EFLAGS.AC set (#AC -> SIGBUS, BUS_ADRALN,
si_addr NULL: the VA comes from decoding); prctl(PR_SET_UNALIGN) returns EINVAL (PLATFORM.md)."""
from __future__ import annotations

import capstone

from .info import MECH_AC, ArchInfo

SYSCALL_NAMES = {56: "clone", 57: "fork", 58: "vfork", 435: "clone3", 14: "rt_sigprocmask"}

X86_64 = ArchInfo(
    name="x86_64",
    pc="rip",
    sp="rsp",
    gdb_names=("i386:x86-64", "x86-64", "x86_64", "amd64"),
    e_machine=62,
    gprs=("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"),
    insn_size=None,
    mechanism=MECH_AC,
    native_sigbus=7,
    si_addr="null",
    prctl_nr=157,
    qemu="qemu-x86_64",
    triplet="x86_64-linux-gnu",
    capstone=(capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    flags="eflags",
    ac_bit=0x40000,
    tf_bit=0x100,
    syscall_nr="orig_rax",
    syscall_ret="rax",
    task_creating_syscalls=frozenset({56, 57, 58, 435}),  # clone, fork, vfork, clone3
    sigprocmask_syscall=14,
)
