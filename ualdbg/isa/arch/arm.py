"""32-bit ARM Linux: armhf (ARMv7-A, Thumb-2, VFPv3-D16, hard-float ABI; Debian `armhf`) and
armel (ARMv5TE, soft-float; Debian `armel`). Little-endian. ARMv7 lets plain ldr/str/ldrh/strh
through at any address in user mode (SCTLR.A clear) but raises an alignment fault for
ldrd/strd, ldm/stm, vldr/vstr and vldm/vstm that are not word-aligned, for ldrex/strex and
friends that are not naturally aligned, and for vld1..vld4/vst1..vst4 whose alignment hint
(`[r0:64]`) is not met. Linux fixes the non-exclusive ones up (arch/arm/mm/alignment.c, counted in
/proc/cpu/alignment; SIGBUS only when `echo 4 > /proc/cpu/alignment`); qemu-user performs no
fix-up and delivers SIGBUS/BUS_ADRALN with the data address, so under qemu the CPU "traps by
itself". ARMv5 CPUs and Cortex-M trap (or, ARMv5, rotate) plain misaligned ldr too: the step
engine's natural policy shows those (qemu lets them through, even as arm926)."""
from __future__ import annotations

from .info import MECH_NATIVE, ArchInfo

GPRS = tuple(f"r{n}" for n in range(13)) + ("sp", "lr", "pc")
CPSR_T = 1 << 5  # Thumb state

_COMMON = dict(
    pc="pc",
    sp="sp",
    e_machine=40,  # EM_ARM
    elf_class=32,
    gprs=GPRS,
    insn_size=None,  # 4 in ARM state, 2 or 4 in Thumb state
    mechanism=MECH_NATIVE,
    native_sigbus=7,
    si_addr="data",
    prctl_nr=172,
    call_args=("r0", "r1", "r2", "r3"),
    call_ret="r0",
    return_address="lr",
    stack_align=8,
    insn_module="arm_insn",
    modes=("arm", "thumb"),
    mode_reg="cpsr",
    mode_bit=CPSR_T,
)

ARMHF = ArchInfo(name="armhf", gdb_names=("armv7", "armv8", "armv6t2"), e_flags=(0x400, 0x400), qemu="qemu-arm",
                 triplet="arm-linux-gnueabihf", default_mode="thumb", **_COMMON)  # type: ignore[arg-type]
ARMEL = ArchInfo(name="armel", gdb_names=("armv5", "armv4", "armv6", "arm"), e_flags=(0x400, 0), qemu="qemu-arm",
                 triplet="arm-linux-gnueabi", default_mode="arm", **_COMMON)  # type: ignore[arg-type]
