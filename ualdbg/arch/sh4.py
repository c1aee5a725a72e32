"""SuperH SH-4: the kernel fixes up unaligned accesses (and can warn) unless the program asked
for prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS); then SIGBUS/BUS_ADRALN with the data address
(arch/sh/kernel/traps_32.c). Little-endian as Debian builds it; 16-bit instructions. capstone 5
has SH, but ualdbg does not model its operands."""
from __future__ import annotations

from . import MECH_PRCTL, ArchInfo

SH4 = ArchInfo(
    name="sh4",
    pc="pc",
    sp="r15",
    gdb_names=("sh4", "sh2a-or-sh4", "sh"),
    e_machine=42,  # EM_SH
    elf_class=32,
    gprs=tuple(f"r{n}" for n in range(16)),
    insn_size=2,
    mechanism=MECH_PRCTL,
    native_sigbus=7,
    si_addr="data",
    prctl_nr=172,
    qemu="qemu-sh4",
    triplet="sh4-linux-gnu",
    call_args=("r4", "r5", "r6", "r7"),
    call_ret="r0",
    return_address="pr",
    stack_align=4,
)
