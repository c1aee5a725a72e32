"""The table of CPUs: one module per architecture declares its `Cpu`s (isa/cpu.py: its facts as
an ArchInfo, register names as gdb names them, the program counter, signal numbers, what SIGBUS's
si_addr means, byte order, the qemu-user binary; its decoder; its signal mode), collected here by
explicit import, and how to tell the architecture of a target (the debugger's name for it, or an
ELF's e_machine). How to add a CPU: docs/ARCHITECTURE.md."""
from __future__ import annotations

from typing import Literal

from ..cpu import Cpu, Strict, TrapFlags
from . import aarch64, alpha, arm, hppa, mips, riscv64, sh4, sparc64, x86_64
from .aarch64 import AARCH64
from .alpha import ALPHA
from .arm import ARMEL, ARMHF
from .hppa import HPPA
from .info import (
    BUS_ADRALN,
    ENOSYS,
    MECH_AC,
    MECH_NATIVE,
    MECH_PRCTL,
    MECH_STEP,
    PR_GET_UNALIGN,
    PR_SET_UNALIGN,
    PR_UNALIGN_NOPRINT,
    PR_UNALIGN_SIGBUS,
    SIGBUS,
    SIGSEGV,
    SIGTRAP,
    ArchInfo,
)
from .mips import MIPS, MIPS64EL, MIPSEL
from .riscv64 import RISCV64
from .sh4 import SH4
from .sparc64 import SPARC64
from .x86_64 import SYSCALL_NAMES, X86_64

# In the order arch_info tries gdb's names: armhf before armel (gdb names ARMv7 "armv7", and
# armel's prefix "arm" would take it too), mips64el before mips and mipsel (whose prefix "mips"
# would take "mips:isa64r2" too): each module lists its own in that order.
CPUS: dict[str, Cpu] = {cpu.name: cpu for cpu in (*x86_64.CPUS, *sparc64.CPUS, *alpha.CPUS, *hppa.CPUS, *sh4.CPUS,
                                                  *aarch64.CPUS, *riscv64.CPUS, *arm.CPUS, *mips.CPUS)}
ARCHES: dict[str, ArchInfo] = {name: cpu.info for name, cpu in CPUS.items()}
# Names users type for --arch, besides ualdbg's own.
ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "sparc": "sparc64", "sparcv9": "sparc64",
           "parisc": "hppa", "pa-risc": "hppa", "sh": "sh4", "arm64": "aarch64", "riscv": "riscv64",
           "armv7": "armhf", "arm": "armhf", "armv5": "armel", "mipseb": "mips", "mips32": "mips",
           "mips32el": "mipsel", "mips64": "mips64el", "mipsn64": "mips64el"}

__all__ = [
    "AARCH64", "ALPHA", "ARCHES", "ARMEL", "ARMHF", "CPUS", "MIPS", "MIPS64EL", "MIPSEL", "ArchInfo", "BUS_ADRALN", "Cpu",
    "ENOSYS", "HPPA", "MECH_AC", "MECH_NATIVE", "MECH_PRCTL", "MECH_STEP", "PR_GET_UNALIGN", "PR_SET_UNALIGN",
    "PR_UNALIGN_NOPRINT", "PR_UNALIGN_SIGBUS", "RISCV64", "SH4", "SIGBUS", "SIGSEGV", "SIGTRAP",
    "SPARC64", "SYSCALL_NAMES", "X86_64", "arch_by_name", "arch_info", "elf_arch", "strict", "trap_flags",
]


def strict(arch: str) -> Strict | None:
    """Signal mode's decoder and facts for this architecture, where it fixes faults up; None:
    it has none (x86-64 traps by EFLAGS.AC: `trap_flags`; RISC-V: the step engine only)."""
    cpu = CPUS.get(arch)
    return cpu.strict if cpu is not None else None


def trap_flags(arch: str) -> TrapFlags | None:
    """The flags register signal mode arms and the step engine single-steps with (x86-64's
    EFLAGS.AC and TF), None where the architecture has none."""
    cpu = CPUS.get(arch)
    return cpu.trap_flags if cpu is not None else None


def arch_info(name: str) -> ArchInfo:
    """Map a debugger's architecture name (gdb: `sparc:v9a`, `i386:x86-64`; lldb: `x86_64`) to
    what ualdbg knows of it. gdb names both byte orders of MIPS alike (`mips:isa32r2`): its
    adapter adds the byte order it shows (`mips:isa32r2/el`), which picks mips or mipsel."""
    key = name.lower()
    key, _, order = key.partition("/")
    if key in ARCHES:
        return ARCHES[key]
    endian = {"el": "little", "eb": "big"}.get(order)
    for info in ARCHES.values():
        if any(key == p or key.startswith(p) for p in info.gdb_names) and endian in (None, info.endian):
            return info
    raise ValueError(f"unsupported architecture {name!r}: ualdbg knows {', '.join(ARCHES)}")


def arch_by_name(name: str) -> ArchInfo:
    """An architecture as a user names it on the command line (`--arch sparc64`)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in ARCHES:
        raise ValueError(f"--arch {name}: unknown architecture; known: {', '.join(sorted(ARCHES))}")
    return ARCHES[key]


def elf_arch(path: str) -> ArchInfo | None:
    """The architecture an ELF file is built for (e_machine), None when ualdbg does not know it
    or the file is no ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    found = [a for a in ARCHES.values() if a.e_machine == machine]
    if len(found) <= 1:
        return found[0] if found else None
    # One e_machine, several of ualdbg's architectures (EM_ARM: armhf, armel; EM_MIPS: mips,
    # mipsel): the class, the byte order and the flags tell them apart.
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return None
    flags_at = 48 if head[4] == 2 else 36
    flags = int.from_bytes(head[flags_at:flags_at + 4], order) if len(head) >= flags_at + 4 else 0
    for info in found:
        if info.elf_class == (64 if head[4] == 2 else 32) and info.endian == order and (
                info.e_flags is None or flags & info.e_flags[0] == info.e_flags[1]):
            return info
    return None
