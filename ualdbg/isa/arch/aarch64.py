"""AArch64: plain loads and stores to normal memory tolerate misalignment in user mode (SCTLR_EL1.A
is clear on Linux); exclusive, acquire/release and atomic accesses still fault, as SIGBUS with
BUS_ADRALN and the data address (FAR) in si_addr. Finding what a strict CPU would trap needs the
single-step engine with the natural policy.

Its decoder, for the step engine: the memory operands of every load/store form capstone 5
decodes (CS_ARCH_ARM64), as `MemOperand` recipes (isa/insn.py), and their evaluation against gdb's
registers (x0..x30, sp, pc).

What a strict-alignment CPU checks, and so what the recipes carry (Arm ARM, "Alignment
support"): each element of a load/store pair (ldp/stp/ldpsw/ldnp) is its own access of the
register's size; an exclusive pair (ldxp/stxp/ldaxp/stlxp) and a compare-and-swap pair (casp)
must be aligned to their total size; a SIMD structure load/store (ld1..ld4, st1..st4, ld1r..)
is checked at its element size, so it is one recipe of the element size at the base (the lanes
after it are at multiples of that size and share its alignment). Post-index forms address the
base before the writeback; pre-index forms base + offset. Prefetches touch nothing.

The accesses arm64 traps on in user mode (exclusive, acquire/release, LSE atomics) also carry
what signal mode's fix-up needs (their data registers as gdb holds them, stxr's status
register): signal mode's decoder (`SignalDecoder`) gives only those."""
from __future__ import annotations

from collections.abc import Mapping

import capstone
from capstone import arm64

from ...core.model import Access, AccessKind
from ..cpu import Cpu, Strict
from ..cs import first_insn
from ..insn import Insn, MemOperand, RegisterUnavailable
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
    qemu="qemu-aarch64",
    # qemu 9+'s default CPU ("max") has FEAT_LSE2, under which misaligned acquire/release and
    # (in qemu 10) exclusive accesses inside 16 bytes do not fault; the Cortex-A72 of most arm64
    # machines in service (ARMv8.0) traps them.
    qemu_cpu="cortex-a72",
    triplet="aarch64-linux-gnu",
)

MASK64 = (1 << 64) - 1

# Element bytes of a vector arrangement (capstone 5's ARM64_VAS_*).
_VAS_BYTES = {
    arm64.ARM64_VAS_16B: 1, arm64.ARM64_VAS_8B: 1, arm64.ARM64_VAS_4B: 1, arm64.ARM64_VAS_1B: 1,
    arm64.ARM64_VAS_8H: 2, arm64.ARM64_VAS_4H: 2, arm64.ARM64_VAS_2H: 2, arm64.ARM64_VAS_1H: 2,
    arm64.ARM64_VAS_4S: 4, arm64.ARM64_VAS_2S: 4, arm64.ARM64_VAS_1S: 4,
    arm64.ARM64_VAS_2D: 8, arm64.ARM64_VAS_1D: 8, arm64.ARM64_VAS_1Q: 16,
}
_REG_BYTES = {"w": 4, "x": 8, "b": 1, "h": 2, "s": 4, "d": 8, "q": 16}
_ALIASES = {"fp": "x29", "lr": "x30", "xzr": "xzr", "wzr": "wzr", "wsp": "sp"}
_EXTEND = {arm64.ARM64_EXT_UXTW: "uxtw", arm64.ARM64_EXT_SXTW: "sxtw", arm64.ARM64_EXT_UXTX: "uxtx",
           arm64.ARM64_EXT_SXTX: "sxtx"}

# Read-modify-write atomics (LSE) and swaps: one access that reads and writes.
_ATOMIC_PREFIXES = ("cas", "swp", "ldadd", "ldclr", "ldeor", "ldset", "ldsmax", "ldsmin", "ldumax",
                    "ldumin", "stadd", "stclr", "steor", "stset", "stsmax", "stsmin", "stumax", "stumin")
_EXCLUSIVE_PAIRS = ("ldxp", "ldaxp", "stxp", "stlxp")
_STORE_STATUS = ("stxr", "stlxr", "stxp", "stlxp")  # the first register is the status word
_STRUCTURES = ("ld1", "ld2", "ld3", "ld4", "st1", "st2", "st3", "st4")
_NO_ACCESS = ("prfm", "prfum")


def reg_name(name: str) -> str:
    """The 64-bit register gdb holds for a capstone register name (w3 -> x3, fp -> x29)."""
    name = _ALIASES.get(name, name)
    if name[0] == "w" and name[1:].isdigit():
        return "x" + name[1:]
    return name


def _reg_bytes(name: str) -> int:
    name = _ALIASES.get(name, name)
    if name in ("xzr", "sp"):
        return 8
    if name == "wzr":
        return 4
    return _REG_BYTES.get(name[0], 0) if name[1:].isdigit() else 8 if name in ("fp", "lr") else 0


def _element_size(mnemonic: str, data: list[str], vas: int) -> int:
    """Bytes of one element: the mnemonic's b/h/sw suffix, else the data register's width."""
    stem = mnemonic.split(".")[0]
    if stem in ("ldrsw", "ldursw", "ldtrsw", "ldpsw"):
        return 4
    if stem.startswith(_STRUCTURES):
        return _VAS_BYTES.get(vas, 0)
    if stem.endswith("b") and stem not in ("ldrab",):  # ldrab: a pointer-authenticated ldr x
        return 1
    if stem.endswith("h"):
        return 2
    return _reg_bytes(data[0]) if data else 0


def _kind(mnemonic: str) -> AccessKind:
    if mnemonic.startswith(_ATOMIC_PREFIXES):
        return AccessKind.READ_WRITE
    return AccessKind.WRITE if mnemonic.startswith("st") else AccessKind.READ


def _flow(ci: capstone.CsInsn) -> tuple[str, int | None]:
    name = ci.mnemonic
    imm = [o.imm & MASK64 for o in ci.operands if o.type == arm64.ARM64_OP_IMM]
    target = imm[-1] if imm else None
    if name in ("bl", "blr", "blraa", "blrab", "blraaz", "blrabz"):
        return "call", target if name == "bl" else None
    if name.startswith("ret") or name == "eret":
        return "ret", None
    if name == "b":
        return "jump", target
    if name.startswith(("br", "braa", "brab")):
        return "jump", None
    if name.startswith(("b.", "cbz", "cbnz", "tbz", "tbnz")):
        return "cond", target
    if name in ("svc", "brk", "hlt", "udf"):
        return "other", None
    return "next", None


_EXCLUSIVE = ("ldxr", "ldaxr", "stxr", "stlxr", "ldxp", "ldaxp", "stxp", "stlxp")


def _traps(name: str, data: list[str]) -> str | None:
    """The accesses arm64 traps on even in user mode (SCTLR_EL1.A clear): exclusive and
    acquire/release loads ("load") and stores ("store"), LSE atomics ("atomic"); None for plain
    loads and stores, which do not trap there."""
    if not data:
        return None
    if name.startswith(("ldxr", "ldaxr", "ldar", "ldapr", "ldlar", "ldxp", "ldaxp")):
        return "load"
    if name.startswith(("stxr", "stlxr", "stxp", "stlxp", "stlr", "stllr")):
        return "store"
    if name.startswith(_ATOMIC_PREFIXES):
        return "atomic"
    return None


def operands(ci: capstone.CsInsn) -> tuple[tuple[MemOperand, ...], bool]:
    """The memory operand recipes of one capstone instruction, and whether they are exact."""
    name = ci.mnemonic
    if name.startswith(_NO_ACCESS):
        return (), True
    ops = list(ci.operands)
    mem_at = next((i for i, o in enumerate(ops) if o.type == arm64.ARM64_OP_MEM), None)
    data = [ci.reg_name(o.reg) for o in ops[:mem_at] if o.type == arm64.ARM64_OP_REG]
    vas = next((o.vas for o in ops[:mem_at] if o.type == arm64.ARM64_OP_REG and o.vas), 0)
    status = None
    if name.startswith(_STORE_STATUS) and data:
        status, data = reg_name(data[0]), data[1:]
    kind = _kind(name)
    if mem_at is None:
        # ldr/ldrsw/ldr (SIMD) literal: PC-relative, the address is capstone's immediate.
        if name.startswith("ldr") and data and ops and ops[-1].type == arm64.ARM64_OP_IMM:
            size = _element_size(name, data, 0)
            return (MemOperand(base=None, index=None, scale=1, disp=ops[-1].imm & MASK64, segment=None,
                               size=size, kind=AccessKind.READ, implicit=False),), size > 0
        return (), True
    mem = ops[mem_at].mem
    traps = _traps(name, data)
    base = reg_name(ci.reg_name(mem.base)) if mem.base else None
    index = ci.reg_name(mem.index) if mem.index else None
    extend = _EXTEND.get(ops[mem_at].ext)
    scale = 1 << ops[mem_at].shift.value if index is not None and ops[mem_at].shift.type == arm64.ARM64_SFT_LSL else 1
    size = _element_size(name, data, vas)
    if size <= 0:
        return (), False
    exact = not name.startswith(_STRUCTURES) and base is not None

    def recipe(disp: int, nbytes: int) -> MemOperand:
        if traps is None:
            return MemOperand(base=base, index=index, scale=scale, disp=disp, segment=None, size=nbytes,
                              kind=kind, implicit=False, extend=extend)
        # What signal mode performs (or reports): the data registers as gdb holds them, stxr's
        # status register; an LSE atomic is reported, not performed.
        atomic = traps == "atomic"
        return MemOperand(base=base, index=index, scale=scale, disp=disp, segment=None, size=nbytes,
                          kind=kind, implicit=False, extend=extend,
                          data=(reg_name(data[-1]),) if atomic else tuple(reg_name(r) for r in data),
                          status=status, exclusive=name.startswith(_EXCLUSIVE), rmw="atomic" if atomic else "")

    if name.startswith(_EXCLUSIVE_PAIRS) or name.startswith("casp"):
        return (recipe(mem.disp, size * 2),), exact
    if name.startswith(("ldp", "stp", "ldnp", "stnp", "ldpsw", "ldiapp", "stilp")):
        return (recipe(mem.disp, size), recipe(mem.disp + size, size)), exact
    return (recipe(mem.disp, size),), exact


class Aarch64Decoder:
    """capstone's ARM64 decoder with the step engine's recipes (an InsnDecoder, isa/cpu.py)."""

    arch = "aarch64"
    max_insn_len = 4

    def __init__(self) -> None:
        self._cs = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        self._cs.detail = True

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        ci = first_insn(self._cs, code, pc, MASK64)
        if ci is None:
            return None
        mems, exact = operands(ci)
        flow, target = _flow(ci)
        return Insn(pc=ci.address, size=4, mnemonic=ci.mnemonic, op_str=ci.op_str, rep=False,
                    operands=mems, flow=flow, name=ci.mnemonic, target=target, exact=exact,
                    raw=bytes(ci.bytes), arch="aarch64")


def _read(regs: Mapping[str, int], name: str) -> int:
    if name in ("xzr", "wzr"):
        return 0
    full = reg_name(name)
    try:
        value = regs[full]
    except KeyError:
        raise RegisterUnavailable(f"register {full!r} is needed to evaluate [{name}]") from None
    return value & (0xFFFFFFFF if name[0] == "w" else MASK64)


def effective_address(op: MemOperand, regs: Mapping[str, int]) -> int:
    ea = op.disp
    if op.base is not None:
        ea += _read(regs, op.base)
    if op.index is not None:
        value = _read(regs, op.index)
        if op.extend == "sxtw":
            value = value - (1 << 32) if value >> 31 & 1 else value
        elif op.extend == "uxtw":
            value &= 0xFFFFFFFF
        ea += value * op.scale
    return ea & MASK64


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    return [Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]


class SignalDecoder(Aarch64Decoder):
    """For the fix-up of signal mode: the instruction at `pc` when it is one arm64 traps on in
    user mode (its recipe names its data registers), else None: plain loads and stores do not
    trap there."""

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        insn = super().decode(code, pc, mode)
        if insn is None or not insn.operands or not insn.operands[0].data:
            return None
        return insn


CPUS = (Cpu(AARCH64, decoder=Aarch64Decoder, accesses=accesses, strict=Strict(SignalDecoder)),)
