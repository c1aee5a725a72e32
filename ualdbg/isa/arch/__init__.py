"""Per-architecture facts in one place: what ualdbg knows of each instruction set (register
names as gdb names them, the program counter, signal numbers and codes, what SIGBUS's si_addr
means, byte order, prctl numbers, the qemu-user binary), one module per architecture, and how
to tell the architecture of a target (the debugger's name for it, or an ELF's e_machine)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Signal numbers as gdb's catchpoints and ualdbg's engines name them (gdb's own numbering, which
# is x86's). A target's native numbers differ (SIGBUS is 10 on SPARC, Alpha and PA-RISC): they
# are `ArchInfo.native_sigbus`, for reading a native siginfo.
SIGTRAP = 5
SIGBUS = 7
SIGSEGV = 11
BUS_ADRALN = 1
ENOSYS = 38

# prctl(2): the same numbers on every Linux architecture (include/uapi/linux/prctl.h).
PR_GET_UNALIGN = 5
PR_SET_UNALIGN = 6
PR_UNALIGN_NOPRINT = 1
PR_UNALIGN_SIGBUS = 2

# How unaligned accesses become SIGBUS stops on each architecture.
MECH_AC = "ac"  # x86: EFLAGS.AC, #AC -> SIGBUS, si_addr NULL
MECH_NATIVE = "native"  # the CPU traps and Linux sends SIGBUS (SPARC): nothing to arm
MECH_PRCTL = "prctl"  # the kernel fixes up silently unless prctl(PR_SET_UNALIGN, SIGBUS)
MECH_STEP = "step"  # plain accesses never trap in user mode (arm64): single-step + policy


@dataclass(frozen=True)
class ArchInfo:
    name: str  # ualdbg's and the JSON document's name: x86_64, sparc64, alpha, hppa, sh4, aarch64
    pc: str
    sp: str
    gdb_names: tuple[str, ...] = ()  # prefixes of gdb's architecture names for it
    e_machine: int = 0  # ELF e_machine
    # ELF e_flags bits that tell this architecture from another with the same e_machine, class
    # and byte order (mask, value): armhf's hard-float ABI flag.
    e_flags: tuple[int, int] | None = None
    elf_class: int = 64
    endian: str = "little"
    gprs: tuple[str, ...] = ()  # general registers by number, as gdb names them
    zero_regs: tuple[str, ...] = ()  # registers that read as zero and ignore writes
    npc: str | None = None  # SPARC: the next PC (delayed branches), advanced with the PC
    # The register the PC is written through when gdb's `pc` is read-only (PA-RISC: the PC
    # queue's head, whose low bits are the privilege level and are kept as read).
    pc_write: str | None = None
    insn_size: int | None = 4  # fixed instruction size; None when variable
    mechanism: str = MECH_NATIVE
    native_sigbus: int = 7
    si_addr: str = "data"  # what SIGBUS/BUS_ADRALN's si_addr is: "data", "pc" or "null"
    prctl_nr: int | None = None  # the prctl syscall's number
    qemu: str | None = None  # the qemu-user binary that runs its programs
    # The CPU qemu-user emulates unless the user's QEMU_CPU says otherwise: None for qemu's own.
    qemu_cpu: str | None = None
    triplet: str | None = None  # the GNU triplet of its cross toolchain (Debian package names)
    capstone: tuple[int, int] | None = None  # (CS_ARCH_*, CS_MODE_*) when capstone decodes it
    # The C calling convention, for calling prctl in the inferior by redirecting a thread.
    call_args: tuple[str, ...] = ()
    call_ret: str = ""
    return_address: str = ""  # the register a call leaves its return address in
    call_target: str | None = None  # a register that must hold the callee's address (Alpha pv)
    stack_align: int = 16
    stack_grows_up: bool = False  # PA-RISC: the free stack is above sp, the live frames below
    # x86 only: the trap engine's flag bits and the syscalls it follows.
    flags: str = ""
    ac_bit: int = 0  # EFLAGS.AC: alignment check (PLATFORM.md)
    tf_bit: int = 0  # EFLAGS.TF: one single-step trap after the next instruction
    syscall_nr: str = ""  # register holding the syscall number at a syscall stop
    syscall_ret: str = ""
    # Syscalls that copy the caller's registers (and so EFLAGS.AC) into a new task.
    task_creating_syscalls: frozenset[int] = frozenset()
    sigprocmask_syscall: int = -1

    @property
    def si_addr_is_data(self) -> bool:
        """Whether SIGBUS si_addr is the data address (x86 #AC gives NULL, riscv the PC)."""
        return self.si_addr == "data"

    @property
    def pc_writable(self) -> str:
        return self.pc_write or self.pc

    def host_signo(self, signo: int) -> int:
        """A signal number as the target's siginfo has it (SIGBUS is 10 on SPARC, Alpha and
        PA-RISC) in the numbering ualdbg compares with: SIGBUS -> 7, the target's own 7
        (SIGEMT there) -> -7, the others (SIGSEGV, SIGTRAP, SIGILL, SIGFPE) unchanged."""
        if self.native_sigbus == SIGBUS:
            return signo
        if signo == self.native_sigbus:
            return SIGBUS
        return -signo if signo == SIGBUS else signo

    @property
    def sysroot(self) -> str | None:
        """Where Debian's cross packages put the target's libraries (qemu -L, gdb sysroot)."""
        return f"/usr/{self.triplet}" if self.triplet else None


from .aarch64 import AARCH64  # noqa: E402
from .alpha import ALPHA  # noqa: E402
from .arm import ARMEL, ARMHF  # noqa: E402
from .hppa import HPPA  # noqa: E402
from .mips import MIPS, MIPS64EL, MIPSEL  # noqa: E402
from .riscv64 import RISCV64  # noqa: E402
from .sh4 import SH4  # noqa: E402
from .sparc64 import SPARC64  # noqa: E402
from .x86_64 import SYSCALL_NAMES, X86_64  # noqa: E402

# armhf before armel: gdb names ARMv7 "armv7", and armel's prefix "arm" would take it too;
# mips64el before mips and mipsel, whose prefix "mips" would take "mips:isa64r2" too.
ARCHES: dict[str, ArchInfo] = {a.name: a for a in (X86_64, SPARC64, ALPHA, HPPA, SH4, AARCH64, RISCV64, ARMHF,
                                                   ARMEL, MIPS64EL, MIPS, MIPSEL)}
# Names users type for --arch, besides ualdbg's own.
ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "sparc": "sparc64", "sparcv9": "sparc64",
           "parisc": "hppa", "pa-risc": "hppa", "sh": "sh4", "arm64": "aarch64", "riscv": "riscv64",
           "armv7": "armhf", "arm": "armhf", "armv5": "armel", "mipseb": "mips", "mips32": "mips",
           "mips32el": "mipsel", "mips64": "mips64el", "mipsn64": "mips64el"}

__all__ = [
    "AARCH64", "ALPHA", "ARCHES", "ARMEL", "ARMHF", "MIPS", "MIPS64EL", "MIPSEL", "ArchInfo", "BUS_ADRALN", "ENOSYS", "HPPA", "MECH_AC",
    "MECH_NATIVE", "MECH_PRCTL", "MECH_STEP", "PR_GET_UNALIGN", "PR_SET_UNALIGN",
    "PR_UNALIGN_NOPRINT", "PR_UNALIGN_SIGBUS", "RISCV64", "SH4", "SIGBUS", "SIGSEGV", "SIGTRAP",
    "SPARC64", "SYSCALL_NAMES", "X86_64", "arch_by_name", "arch_info", "elf_arch",
]


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
