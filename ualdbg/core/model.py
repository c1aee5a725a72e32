"""Frozen records that travel through ualdbg: a fault, the accesses decoded from it, where it is
in the program. No behaviour beyond formatting."""
from __future__ import annotations

from dataclasses import field
from enum import Enum

from ..lazyclass import dataclass


class AccessKind(str, Enum):
    READ = "read"
    WRITE = "write"
    READ_WRITE = "read-write"

    def merge(self, other: AccessKind) -> AccessKind:
        return self if self is other else AccessKind.READ_WRITE


@dataclass(frozen=True)
class Access:
    """One memory operand of one instruction, evaluated against live registers."""

    va: int
    size: int
    kind: AccessKind
    implicit: bool = False  # stack push/pop/call/ret, string instruction operands


@dataclass(frozen=True)
class Module:
    """A mapped ELF object in the target's address space."""

    path: str
    base: int  # load bias: runtime address = link-time address + base
    start: int  # lowest mapped address
    end: int  # highest mapped address (exclusive)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class InlineFrame:
    function: str
    file: str | None
    line: int | None
    # The file the DWARF names, absolute (file is as a user reads it: relative to the unit's
    # compilation directory): where a fingerprint reads the line's text (ci/fingerprint.py).
    path: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SourceLoc:
    """What a PC is: module+offset always, the rest when symbols or DWARF allow."""

    pc: int
    module: str | None = None  # path of the module, None when the PC is in no known mapping
    offset: int | None = None  # PC - module load bias (the link-time address)
    function: str | None = None
    function_offset: int | None = None
    file: str | None = None
    line: int | None = None
    inlined_from: tuple[InlineFrame, ...] = ()
    path: str | None = field(default=None, compare=False)  # `file`, absolute (InlineFrame.path)

    @property
    def module_name(self) -> str | None:
        return None if self.module is None else self.module.rsplit("/", 1)[-1]

    def where(self) -> str:
        """`main+0x40 in prog` or `prog+0x1189` or `0x...`."""
        if self.function is not None:
            text = f"{self.function}+{self.function_offset or 0:#x}"
            return f"{text} in {self.module_name}" if self.module_name else text
        if self.module_name is not None and self.offset is not None:
            return f"{self.module_name}+{self.offset:#x}"
        return f"{self.pc:#x}"


@dataclass(frozen=True)
class Fault:
    """One unaligned access as an engine saw it, before symbolization."""

    seq: int
    time: float  # seconds since the trace started
    pid: int
    tid: int
    cpu: int | None
    pc: int
    va: int | None  # None when the decoder could not tell
    size: int | None
    access: AccessKind | None
    insn: str | None = None  # disassembly text, for reports
    policy: str = "ac"
    in_scope: bool = True
    # Whether a decoded operand breaks the policy: False when none does (the CPU trapped on an
    # access the decoder does not model exactly), None when the instruction could not be decoded.
    explained: bool | None = True
    # What it costs on x86 (core/cost.py: inside-line, line-split, page-split, split-lock; traps
    # on a strict CPU), and whether a SIMD register moves the data (issue 33).
    cost: str | None = None
    vector: bool = False
