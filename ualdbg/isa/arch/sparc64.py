"""SPARC V9 (64-bit Linux): every misaligned load or store traps in hardware and Linux sends
SIGBUS/BUS_ADRALN with the data address in si_addr (arch/sparc/kernel/traps_64.c, do_mna; user
accesses are not fixed up). Big-endian; a delayed-branch machine with PC and nPC. capstone 5's
SPARC decoder misses integer ldd/std and the alternate-space forms, so the load/store format
(op=3), which is all a fix-up needs, is decoded here from the manual (SPARC V9, appendix A),
into the one instruction model (isa/insn.py). Measured against capstone: docs/ARCHITECTURES.md."""
from __future__ import annotations

from functools import partial

from ...core.model import AccessKind
from ...lazyclass import dataclass
from ..cpu import Cpu, Strict, WordDecoder
from ..insn import Insn, MemOperand
from .info import MECH_NATIVE, ArchInfo

GPRS = ("g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7",
        "o0", "o1", "o2", "o3", "o4", "o5", "sp", "o7",
        "l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7",
        "i0", "i1", "i2", "i3", "i4", "i5", "fp", "i7")

SPARC64 = ArchInfo(
    name="sparc64",
    pc="pc",
    sp="sp",
    gdb_names=("sparc:v9", "sparc64", "sparcv9"),
    e_machine=43,  # EM_SPARCV9
    endian="big",
    gprs=GPRS,
    zero_regs=("g0",),
    npc="npc",
    insn_size=4,
    mechanism=MECH_NATIVE,
    native_sigbus=10,
    si_addr="data",
    qemu="qemu-sparc64",
    triplet="sparc64-linux-gnu",
)

# Kinds of memory instruction.
LOAD, STORE, SWAP, CAS = "load", "store", "swap", "cas"


@dataclass(frozen=True)
class MemFormat:
    name: str
    size: int
    kind: str
    signed: bool = False
    reg_file: str = "int"  # "int", "float" (single fN), "double" (even fN pairs), "quad"
    pair: bool = False  # ldd/std: two 32-bit words in an even/odd register pair
    alternate: bool = False  # the *a forms: an address space identifier selects byte order


# op3 of the op=3 (load/store) format. Left out: ldstub (1 byte, never misaligned), prefetch,
# ldfsr/stfsr and the block/quad-load ASIs (rare in user code; decoded as unknown).
_OP3: dict[int, MemFormat] = {
    0x00: MemFormat("lduw", 4, LOAD), 0x01: MemFormat("ldub", 1, LOAD), 0x02: MemFormat("lduh", 2, LOAD),
    0x03: MemFormat("ldd", 8, LOAD, pair=True), 0x04: MemFormat("stw", 4, STORE), 0x05: MemFormat("stb", 1, STORE),
    0x06: MemFormat("sth", 2, STORE), 0x07: MemFormat("std", 8, STORE, pair=True),
    0x08: MemFormat("ldsw", 4, LOAD, signed=True), 0x09: MemFormat("ldsb", 1, LOAD, signed=True),
    0x0A: MemFormat("ldsh", 2, LOAD, signed=True), 0x0B: MemFormat("ldx", 8, LOAD),
    0x0E: MemFormat("stx", 8, STORE), 0x0F: MemFormat("swap", 4, SWAP),
    0x20: MemFormat("ldf", 4, LOAD, reg_file="float"), 0x22: MemFormat("ldqf", 16, LOAD, reg_file="quad"),
    0x23: MemFormat("lddf", 8, LOAD, reg_file="double"), 0x24: MemFormat("stf", 4, STORE, reg_file="float"),
    0x26: MemFormat("stqf", 16, STORE, reg_file="quad"), 0x27: MemFormat("stdf", 8, STORE, reg_file="double"),
}
for _op3, _f in list(_OP3.items()):
    if _op3 < 0x10:  # lduwa..swapa are op3 + 0x10; ldfa..stdfa are op3 + 0x10 of the float ones
        _OP3[_op3 + 0x10] = MemFormat(_f.name + "a", _f.size, _f.kind, _f.signed, _f.reg_file, _f.pair, True)
    elif _op3 >= 0x20:
        _OP3[_op3 + 0x10] = MemFormat(_f.name + "a", _f.size, _f.kind, _f.signed, _f.reg_file, _f.pair, True)
_OP3[0x3C] = MemFormat("casa", 4, CAS, alternate=True)
_OP3[0x3E] = MemFormat("casxa", 8, CAS, alternate=True)

# Address space identifiers a user program uses for plain memory (big- and little-endian).
ASI_BIG = frozenset({0x80, 0x81, 0x82, 0x83})  # ASI_P, ASI_S, ASI_PNF, ASI_SNF
ASI_LITTLE = frozenset({0x88, 0x89, 0x8A, 0x8B})  # ..._L


def reg_names(fmt: MemFormat, rd: int) -> list[str]:
    """The register(s) the data goes to or comes from, most significant first."""
    if fmt.reg_file == "int":
        return [GPRS[rd & ~1], GPRS[rd | 1]] if fmt.pair else [GPRS[rd]]
    if fmt.reg_file == "float":
        return [f"f{rd}"]
    # Doubles and quads: bit 0 of rd is bit 5 of the register number (f32..f62).
    n = (rd & 0x1E) | ((rd & 1) << 5)
    if fmt.reg_file == "double":
        return [f"f{n}"] if n >= 32 else [f"f{n}", f"f{n + 1}"]
    return [f"f{n}", f"f{n + 2}"] if n >= 32 else [f"f{n + k}" for k in range(4)]


def _data(fmt: MemFormat, names: list[str]) -> tuple[str, ...]:
    """The data registers as gdb moves them: integer registers (ldd/std: the pair), a single
    fN, a double as gdb's dN (f0..f30 pairs; f32..f62 are doubles already), a quad as qN."""
    if fmt.reg_file == "double":
        return (names[0],) if len(names) == 1 else ("d" + names[0][1:],)
    if fmt.reg_file == "quad":
        return ("q" + names[0][1:],)
    return tuple(names)


def _endian(fmt: MemFormat, asi: int | None) -> str:
    """The byte order an alternate-space form names ("asi": the %asi register decides)."""
    if not fmt.alternate:
        return ""
    if asi is None:
        return "asi"
    return "big" if asi in ASI_BIG else "little" if asi in ASI_LITTLE else "unknown"


def asi_endian(asi: int) -> str | None:
    """The byte order of the %asi register's address space; None: not plain memory."""
    return "big" if asi in ASI_BIG else "little" if asi in ASI_LITTLE else None


_KIND = {LOAD: AccessKind.READ, STORE: AccessKind.WRITE, SWAP: AccessKind.READ_WRITE, CAS: AccessKind.READ_WRITE}


def decode(word: int, pc: int = 0) -> Insn | None:
    """Decode one instruction word; None unless it is a load/store this module models."""
    if word >> 30 != 3:
        return None
    fmt = _OP3.get((word >> 19) & 0x3F)
    if fmt is None:
        return None
    rd, rs1 = (word >> 25) & 0x1F, (word >> 14) & 0x1F
    rs2: int | None
    if word >> 13 & 1:
        simm = word & 0x1FFF
        simm = simm - 0x2000 if simm & 0x1000 else simm
        rs2, asi = None, None
    else:
        simm, rs2 = 0, word & 0x1F
        asi = (word >> 5) & 0xFF if fmt.alternate else None
    names = reg_names(fmt, rd)
    addr = f"%{GPRS[rs1]}"
    if rs2:  # [%rs1 + %g0] is [%rs1]
        addr += f" + %{GPRS[rs2]}"
    elif simm:
        addr += f" {'-' if simm < 0 else '+'} {abs(simm):#x}"
    mem = f"[{addr}]" + ("" if not fmt.alternate else (f" {asi:#x}" if asi is not None else " %asi"))
    reg = "%" + names[0]
    if fmt.kind == CAS:
        # casa [rs1] asi, rs2, rd: the address is rs1 alone; rs2 is compared with memory
        ops = f"{mem}, %{GPRS[rs2 or 0]}, {reg}"
        op = MemOperand(base=GPRS[rs1], index=None, scale=1, disp=0, segment=None, size=fmt.size,
                        kind=AccessKind.READ_WRITE, implicit=False, addr_size=8, data=(GPRS[rd],), rmw="cas",
                        compare=GPRS[rs2 or 0], endian=_endian(fmt, asi))
    else:
        ops = f"{reg}, {mem}" if fmt.kind == STORE else f"{mem}, {reg}"
        op = MemOperand(base=GPRS[rs1], index=GPRS[rs2] if rs2 is not None else None, scale=1, disp=simm,
                        segment=None, size=fmt.size, kind=_KIND[fmt.kind], implicit=False, addr_size=8,
                        data=_data(fmt, names), signed=fmt.signed, float_data=fmt.reg_file != "int",
                        rmw="swap" if fmt.kind == SWAP else "", endian=_endian(fmt, asi))
    return Insn(pc=pc, size=4, mnemonic=fmt.name, op_str=ops, rep=False, operands=(op,), flow="next",
                name=fmt.name, raw=word.to_bytes(4, "big"), arch="sparc64")


# Signal mode only: the CPU traps every misaligned access, and a fix-up performs it.
CPUS = (Cpu(SPARC64, strict=Strict(partial(WordDecoder, SPARC64.name, decode, 4, "big"))),)
