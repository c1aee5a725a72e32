"""PA-RISC (32-bit Linux userland): the kernel fixes up unaligned accesses unless the program
asked for prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS); then SIGBUS/BUS_ADRALN with the data address
(regs->ior) in si_addr (arch/parisc/kernel/unaligned.c). Big-endian. No capstone support."""
from __future__ import annotations

from . import MECH_PRCTL, ArchInfo

HPPA = ArchInfo(
    name="hppa",
    pc="pcoqh",
    sp="sp",
    gdb_names=("hppa",),
    e_machine=15,  # EM_PARISC
    elf_class=32,
    endian="big",
    gprs=("r0", "r1", "rp", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
          "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26", "dp",
          "ret0", "ret1", "sp", "r31"),
    npc="pcoqt",  # the PC queue: head and tail, both advanced (like SPARC's nPC)
    mechanism=MECH_PRCTL,
    native_sigbus=10,
    si_addr="data",
    prctl_nr=172,
    qemu="qemu-hppa",
    triplet="hppa-linux-gnu",
    call_args=("r26", "r25", "r24", "r23"),
    call_ret="ret0",
    return_address="rp",
    stack_align=64,
)
