"""The CPU plug-in contract: what one module of isa/arch/ declares for each CPU it knows (a `Cpu`:
its ArchInfo, its decoder into the one instruction model, the evaluation of that model against
its registers, its signal mode), and the `InsnDecoder` protocol every decoder meets. The modules
are collected by explicit import into one table (isa/arch/__init__.py); how to add a CPU:
docs/ARCHITECTURE.md, "How to add a CPU"."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from ..core.model import Access
from ..lazyclass import dataclass
from .arch.info import ArchInfo
from .insn import Insn, MemOperand

__all__ = ["CallConvention", "Cpu", "Evaluate", "InsnDecoder", "Strict", "TrapFlags", "WordDecoder"]


@runtime_checkable
class InsnDecoder(Protocol):
    """Decodes one instruction at a time into the one instruction model (insn.py). Made once per
    target and reused (a capstone handle is not free); callers cache the `Insn` per PC."""

    @property
    def arch(self) -> str:
        """The ArchInfo.name whose registers its recipes name (`Insn.arch`)."""
        ...

    @property
    def max_insn_len(self) -> int:
        """How many bytes at the PC `decode` needs to see a whole instruction."""
        ...

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        """The instruction at the start of `code` (read at `pc`), or None when it is none this
        decoder gives (undecodable; a signal-mode decoder: no access the CPU traps). `mode`: the
        instruction set at `pc` where the CPU has several (32-bit ARM: "thumb" when the CPSR's T
        bit is set), else ""."""
        ...


# The accesses an instruction makes when it runs with these registers (as gdb names them);
# RegisterUnavailable (a KeyError) when one it needs is missing.
Evaluate = Callable[[Insn, Mapping[str, int]], "list[Access]"]
# the delayed branch's word, its address, a register reader -> where it goes (None: not emulated)
Continuation = Callable[[int, int, Callable[[str], int]], "int | None"]
# the instruction, its transfer, a register reader -> what the word alone does not say
Refine = Callable[[Insn, MemOperand, Callable[[str], int]], "tuple[Insn, MemOperand]"]


@dataclass(frozen=True)
class WordDecoder:
    """A hand-written decoder of fixed-size instruction words (SPARC, Alpha, PA-RISC, SH-4) as an
    InsnDecoder: `word(value, pc)` decodes one word read in the CPU's byte order."""

    arch: str
    word: Callable[[int, int], Insn | None]
    width: int
    order: str

    @property
    def max_insn_len(self) -> int:
        return self.width

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        if len(code) < self.width:
            return None
        return self.word(int.from_bytes(code[:self.width], self.order), pc)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CallConvention:
    """The C calling convention, for calling prctl in the program by redirecting a thread (signal
    mode's arming on Alpha, PA-RISC and SH-4: engines/fixup.py)."""

    args: tuple[str, ...] = ()
    ret: str = ""
    return_address: str = ""  # the register a call leaves its return address in
    target: str | None = None  # a register that must hold the callee's address (Alpha pv, MIPS t9)
    stack_align: int = 16
    stack_grows_up: bool = False  # PA-RISC: the free stack is above sp, the live frames below


@dataclass(frozen=True)
class Strict:
    """Signal mode on a CPU that traps a misaligned access (SPARC, Alpha, PA-RISC, SH-4, arm64's
    exclusive and acquire/release forms, MIPS, 32-bit ARM): the decoder that turns the faulting
    instruction into the one instruction model and what the fix-up (engines/fixup.py) needs
    beside it. Which decoder each CPU keeps, and why: docs/ARCHITECTURES.md, "Decoders"."""

    decoder: Callable[[], InsnDecoder]  # makes the decoder (once per engine)
    # a delayed branch: is this word one (the faulting instruction after it is its slot), and
    # where does it go
    delay_slot: tuple[Callable[[int], bool], Continuation] | None = None
    nop: tuple[int, int] | None = None  # the `nop` a fault in a slot resumes through: (word, bytes)
    # gdb single-steps it in software (a breakpoint after the instruction): running the `nop`
    # as a slot goes where a taken branch goes, so the step must stop there too
    software_step: bool = False
    refine: Refine | None = None  # what the instruction word alone does not say (SH's FPSCR.SZ)
    call: CallConvention = CallConvention()


@dataclass(frozen=True)
class TrapFlags:
    """Signal mode by a flags register (x86: EFLAGS.AC makes a misaligned access raise #AC, and
    EFLAGS.TF single-steps, PLATFORM.md): the register and its bits the trap engine sets and
    clears, the step engine's single-step bit, and the syscalls whose stops they follow (a new
    task copies the caller's flags; a mask change may block SIGBUS)."""

    register: str
    ac_bit: int
    tf_bit: int
    syscall_nr: str  # the register holding the syscall number at a syscall stop
    syscall_ret: str  # ... and its result (-ENOSYS at the entry)
    task_creating_syscalls: frozenset[int]
    sigprocmask_syscall: int


@dataclass(frozen=True)
class Cpu:
    """One CPU as ualdbg knows it, declared by its module of isa/arch/."""

    info: ArchInfo
    # The decoder of every instruction, for the step engine (and, on x86-64, the trap engine and
    # the agent's reader), with the evaluation of its recipes; None where only signal mode
    # decodes (SPARC, Alpha, PA-RISC and SH-4: `strict`).
    decoder: Callable[[], InsnDecoder] | None = None
    accesses: Evaluate | None = None
    strict: Strict | None = None  # signal mode by fixing each fault up
    trap_flags: TrapFlags | None = None  # signal mode by a flags register (x86-64)

    @property
    def name(self) -> str:
        return self.info.name
