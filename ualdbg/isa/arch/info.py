"""What ualdbg knows of one architecture (ArchInfo: the facts every CPU has), and the numbers
every architecture shares: signals as the engines name them, prctl(2), how an unaligned access
becomes a stop. Each architecture's module fills one ArchInfo into its `Cpu` (isa/cpu.py, with
its decoder and its signal mode's own facts); the package puts them in one table."""
from __future__ import annotations

from ...lazyclass import dataclass

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
    qemu: str | None = None  # the qemu-user binary that runs its programs
    # The CPU qemu-user emulates unless the user's QEMU_CPU says otherwise: None for qemu's own.
    qemu_cpu: str | None = None
    triplet: str | None = None  # the GNU triplet of its cross toolchain (Debian package names)
    # Several instruction sets (ARM, Thumb): their names (the one with `mode_bit` clear first),
    # the register and bit that select one, which a load into the PC also sets from the loaded
    # address's bit 0 (interworking, ARMv5T and later), and the one the distribution's compiler
    # emits where no symbol says (Debian: Thumb-2 on armhf, ARM on armel).
    modes: tuple[str, ...] = ()
    mode_reg: str | None = None
    mode_bit: int = 0
    default_mode: str = ""
    # Floating-point registers are 64 bits wide and a single lives in the low word of one
    # (MIPS64's FR=1): a 4-byte float access moves those bits, the upper word kept.
    fpr64: bool = False
    # Why only the step engine can trace its programs under qemu-user (the emulator performs
    # misaligned accesses without a trap); None where signal mode can.
    step_only: str | None = None

    @property
    def si_addr_is_data(self) -> bool:
        """Whether SIGBUS si_addr is the data address (x86 #AC gives NULL, riscv the PC)."""
        return self.si_addr == "data"

    def mode(self, mode_value: int) -> str:
        """The instruction set a thread runs, from the value of its `mode_reg` ("arm" or
        "thumb"); "" where the architecture has one."""
        if not self.modes:
            return ""
        return self.modes[1] if mode_value & self.mode_bit else self.modes[0]

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
