"""The one instruction model of ualdbg: what every decoder gives (each CPU's module of isa/arch/:
capstone for x86-64, ARM, AArch64, MIPS, RISC-V; hand-written for SPARC, Alpha, PA-RISC and
SH-4) and what the step engine, the trap engine, the agent's reader and the fix-up of strict
CPUs (engines/fixup.py) consume.

An `Insn` is one decoded instruction: its PC, length, text, control flow and its memory
operands. A `MemOperand` is a recipe for one memory access: the address as base + index *
scale + disp (x86's segments, RIP-relative and VSIB forms included), its size and read/write,
and, for a fix-up that performs the access itself, the registers the data goes to or comes
from (in address order), how a load widens them, the base register's writeback, the byte
order and an atomic's kind. `transfer` joins an instruction's recipes into the one access a
fix-up performs (ldrd, ldm, vldm: one recipe per register)."""
from __future__ import annotations

from dataclasses import replace

from ..core.model import AccessKind
from ..lazyclass import dataclass

__all__ = ["Insn", "MemOperand", "RegisterUnavailable", "Vsib", "transfer"]

_MASK64 = (1 << 64) - 1
_RSP_NAMES = frozenset({"rsp", "esp", "sp", "spl"})  # x86: the stack pointer and its slices


class RegisterUnavailable(KeyError):
    """`accesses()` needs a register the caller's register set does not hold."""


@dataclass(frozen=True)
class Vsib:
    """A VSIB operand (gather/scatter): one element per lane at base + index[lane]*scale + disp."""

    index_size: int  # bytes per index element in the index vector (4 = "d", 8 = "q")
    lanes: int  # lanes that can access memory
    mask: str | None  # the VEX mask vector register or the EVEX opmask register
    mask_elem: int  # bytes per lane in a VEX mask vector (its top bit enables the lane); 0 = k-reg


@dataclass(frozen=True)
class MemOperand:
    """How to compute one memory access of an instruction from the registers at that PC.

    EA = base' + index*scale + disp (+ bit-string offset), truncated to `addr_size`, then plus
    the fs/gs segment base. base' is the base register, except that RIP means the next
    instruction's address and RSP gets `rsp_adjust` added: a push-like implicit store goes to
    rsp - N, and `pop [rsp+d]` computes its destination after rsp has been incremented
    (Intel SDM, POP: "If the destination operand uses RSP as a base, the address is computed
    after the pop"), so its recipe carries rsp_adjust = +N.
    """

    base: str | None
    index: str | None
    scale: int
    disp: int
    segment: str | None  # 'fs' or 'gs' only: the segments whose base is not 0 in 64-bit mode
    size: int  # bytes accessed; the element size for string and VSIB operands
    kind: AccessKind
    implicit: bool  # not encoded as a ModRM operand: stack, string, xlat, maskmov
    addr_size: int = 8  # 4 with the 0x67 prefix: the EA wraps at 32 bits
    rsp_adjust: int = 0
    bit_offset: str | None = None  # bt*/bts/btr/btc [m], reg: the register holding the bit index
    vsib: Vsib | None = None
    extend: str | None = None  # AArch64 index register extension: "uxtw", "sxtw" (then << log2 scale)
    # What a fix-up needs to perform the access in signal mode (ARM, MIPS): the registers the data
    # goes to or comes from, as gdb names them, in address order (ldm, ldrd: several, each
    # `size // len(data)` bytes), and how a load widens them.
    data: tuple[str, ...] = ()
    signed: bool = False
    float_data: bool = False  # `data` are floating-point registers (the debugger moves their bits)
    align: int = 0  # the alignment the CPU checks when not `size` (ARMv7 ldrd/ldm/vldr: 4)
    writeback: int = 0  # bytes the base register moves by after the access (ARM `!`, post-index)
    exclusive: bool = False  # a load/store-exclusive (ldrex/strex, ll/sc): needs the CPU's monitor
    status: str | None = None  # strex: the register that gets 0 when the store succeeded
    # What else a fix-up needs, for the instructions of CPUs without EFLAGS.AC:
    # a READ_WRITE access it tells apart: "swap" (SPARC swap), "cas" (compare with `compare`,
    # SPARC casa/casxa), "atomic" (arm64 LSE: reported, not performed).
    rmw: str = ""
    compare: str | None = None
    # Byte order when not the target's: "big"/"little" (a SPARC ASI), "asi" (SPARC's %asi
    # register decides at run time), "unknown" (an address space that is not plain memory).
    endian: str = ""
    # (base, rm, multiplier): the base moves by rm * multiplier after the access (ARM's
    # `[rn], rm`, `[rn, rm]!`, `vld2.8 {..}, [r0], r2`).
    writeback_by: tuple[str, str, int] | None = None

    @property
    def text(self) -> str:
        """`fs:[rax + rbx*4 - 0x8]`, for reports and test failures. Offsets are relative to the
        registers before the instruction runs (rsp_adjust is folded into the displacement)."""
        terms: list[str] = []
        disp = self.disp
        if self.base is not None:
            terms.append(self.base)
            if self.base in _RSP_NAMES:
                disp += self.rsp_adjust
        if self.index is not None:
            terms.append(("+ " if terms else "") + f"{self.index}*{self.scale}")
        if self.bit_offset is not None:
            terms.append(f"+ bitoffset({self.bit_offset})")
        if disp or not terms:
            if terms:
                terms.append(f"{'-' if disp < 0 else '+'} {abs(disp):#x}")
            else:
                terms.append(f"{disp & _MASK64:#x}")
        seg = f"{self.segment}:" if self.segment else ""
        return f"{seg}[{' '.join(terms)}]"


@dataclass(frozen=True)
class Insn:
    """A decoded instruction: what it is, where control goes, and its memory operand recipes."""

    pc: int
    size: int
    mnemonic: str  # as capstone prints it, prefixes included ("rep movsq", "lock cmpxchg")
    op_str: str
    rep: bool  # a rep/repe/repne string instruction: `operands` describe one iteration
    operands: tuple[MemOperand, ...]
    flow: str  # 'next' | 'jump' | 'call' | 'ret' | 'cond' | 'other'
    name: str = ""  # capstone's canonical instruction name, without prefixes ("movsq")
    target: int | None = None  # destination of a direct jump/call/conditional branch
    exact: bool = True  # False: the instruction touches memory this decoder does not fully model
    vsib: bool = False  # gather/scatter (never raises #AC)
    masked: bool = False  # masked move (vmaskmov*, vpmaskmov*, maskmovdqu, AVX-512 {k}) (no #AC)
    gp_align: int = 0  # misalignment to this many bytes raises #GP (SIGSEGV), not #AC
    raw: bytes = b""
    arch: str = "x86_64"  # whose registers `operands` name (accesses() evaluates per architecture)
    mode: str = ""  # ARM: "arm" or "thumb", the instruction set it was decoded in

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.op_str}".rstrip()

    @property
    def next_pc(self) -> int:
        return (self.pc + self.size) & _MASK64


def successors(insn: Insn) -> frozenset[int] | None:
    """Where one single-step of `insn` can end: the next instruction, a direct branch's target,
    the instruction itself again for a rep string one (one iteration per step). None when the
    decoder cannot say (a return, an indirect branch): engines/trap.py checks a debugger's step
    against it."""
    nxt = insn.next_pc
    if insn.flow in ("next", "other"):
        return frozenset({nxt, insn.pc} if insn.rep else {nxt})
    if insn.target is None:
        return None
    if insn.flow == "cond":
        return frozenset({nxt, insn.target})
    if insn.flow in ("jump", "call"):
        return frozenset({insn.target})
    return None


def transfer(insn: Insn) -> MemOperand | None:
    """The one access a fix-up performs for `insn`: its recipe, or its recipes joined when
    there are several consecutive ones of one kind and size (ldrd, ldm, vldm, vldN: one per
    register or element), with their data registers in address order, their writebacks
    summed and the alignment the CPU checks; None when a recipe has no data registers (the
    decoder could not say what the instruction moves: not performed)."""
    ops = [op for op in insn.operands if op.data]
    if not ops or len(ops) != len(insn.operands) or ops[0].base is None:
        return None
    if len(ops) == 1:
        return ops[0]
    first = ops[0]
    for k, later in enumerate(ops[1:], 1):
        if (later.base, later.index, later.scale, later.kind, later.size) != (
                first.base, first.index, first.scale, first.kind, first.size) or later.disp != first.disp + k * first.size:
            return None
    return replace(first, size=first.size * len(ops), data=tuple(r for o in ops for r in o.data),
                   writeback=sum(o.writeback for o in ops), align=first.align or first.size)
