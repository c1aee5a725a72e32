"""RISC-V 64: whether a misaligned access traps depends on the hardware and the firmware (SBI
may emulate it); when the kernel delivers SIGBUS/BUS_ADRALN, si_addr is the faulting PC, not
the data address (arch/riscv/kernel/traps.c, do_trap_load_misaligned). qemu-riscv64 performs
misaligned accesses without a trap, so under qemu the step engine with the natural policy is
how ualdbg finds them (arch/riscv_insn.py decodes RV64GC, compressed forms included)."""
from __future__ import annotations

from .info import MECH_PRCTL, ArchInfo

RISCV64 = ArchInfo(
    name="riscv64",
    pc="pc",
    sp="sp",
    gdb_names=("riscv:rv64", "riscv"),
    e_machine=243,  # EM_RISCV
    zero_regs=("zero",),
    gprs=("zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "fp", "s1", "a0", "a1", "a2", "a3", "a4",
          "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
          "t5", "t6"),
    insn_size=None,  # 2 (compressed) or 4
    mechanism=MECH_PRCTL,
    native_sigbus=7,
    si_addr="pc",
    prctl_nr=167,
    qemu="qemu-riscv64",
    triplet="riscv64-linux-gnu",
    insn_module="riscv_insn",
    step_only="qemu-riscv64 performs misaligned accesses without a trap",
)
