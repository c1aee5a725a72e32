"""AArch64: plain loads and stores to normal memory tolerate misalignment in user mode (SCTLR_EL1.A
is clear on Linux); exclusive, acquire/release and atomic accesses still fault, as SIGBUS with
BUS_ADRALN and the data address (FAR) in si_addr. Finding what a strict CPU would trap needs the
single-step engine with the natural policy."""
from __future__ import annotations

import capstone

from .info import MECH_STEP, ArchInfo

AARCH64 = ArchInfo(
    name="aarch64",
    pc="pc",
    sp="sp",
    gdb_names=("aarch64", "arm64"),
    e_machine=183,  # EM_AARCH64
    gprs=tuple(f"x{n}" for n in range(31)),
    zero_regs=("xzr", "wzr"),
    mechanism=MECH_STEP,
    native_sigbus=7,
    si_addr="data",
    prctl_nr=167,
    qemu="qemu-aarch64",
    # qemu 9+'s default CPU ("max") has FEAT_LSE2, under which misaligned acquire/release and
    # (in qemu 10) exclusive accesses inside 16 bytes do not fault; the Cortex-A72 of most arm64
    # machines in service (ARMv8.0) traps them.
    qemu_cpu="cortex-a72",
    triplet="aarch64-linux-gnu",
    insn_module="aarch64_insn",
    capstone=(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
)
