"""SPARC V9 (64-bit Linux): every misaligned load or store traps in hardware and Linux sends
SIGBUS/BUS_ADRALN with the data address in si_addr (arch/sparc/kernel/traps_64.c, do_mna; user
accesses are not fixed up). Big-endian; a delayed-branch machine with PC and nPC. capstone 5's
SPARC decoder misses integer ldd/std and the alternate-space forms, so the load/store format
(op=3), which is all a fix-up needs, is decoded here from the manual (SPARC V9, appendix A)."""
from __future__ import annotations

from dataclasses import dataclass

import capstone

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
    prctl_nr=147,
    qemu="qemu-sparc64",
    triplet="sparc64-linux-gnu",
    capstone=(capstone.CS_ARCH_SPARC, capstone.CS_MODE_BIG_ENDIAN | capstone.CS_MODE_V9),
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


@dataclass(frozen=True)
class MemInsn:
    """One decoded SPARC load/store: how to compute its address and which register it uses."""

    fmt: MemFormat
    rd: int  # the destination (load) or source (store) register number, as encoded
    rs1: int
    rs2: int | None  # index register, or None with an immediate
    simm13: int
    asi: int | None  # immediate ASI of an alternate form; None: %asi register (i=1) or none

    @property
    def text(self) -> str:
        addr = f"%{GPRS[self.rs1]}"
        if self.rs2:  # [%rs1 + %g0] is [%rs1]
            addr += f" + %{GPRS[self.rs2]}"
        elif self.simm13:
            addr += f" {'-' if self.simm13 < 0 else '+'} {abs(self.simm13):#x}"
        mem = f"[{addr}]" + ("" if not self.fmt.alternate else (f" {self.asi:#x}" if self.asi is not None else " %asi"))
        reg = "%" + self.reg_names()[0]
        if self.fmt.kind == LOAD:
            return f"{self.fmt.name} {mem}, {reg}"
        if self.fmt.kind == CAS:
            return f"{self.fmt.name} {mem}, %{GPRS[self.rs2 or 0]}, {reg}"
        if self.fmt.kind == SWAP:
            return f"{self.fmt.name} {mem}, {reg}"
        return f"{self.fmt.name} {reg}, {mem}"

    def reg_names(self) -> list[str]:
        """The register(s) the data goes to or comes from, most significant first."""
        f = self.fmt
        if f.reg_file == "int":
            return [GPRS[self.rd & ~1], GPRS[self.rd | 1]] if f.pair else [GPRS[self.rd]]
        if f.reg_file == "float":
            return [f"f{self.rd}"]
        # Doubles and quads: bit 0 of rd is bit 5 of the register number (f32..f62).
        n = (self.rd & 0x1E) | ((self.rd & 1) << 5)
        if f.reg_file == "double":
            return [f"f{n}"] if n >= 32 else [f"f{n}", f"f{n + 1}"]
        return [f"f{n}", f"f{n + 2}"] if n >= 32 else [f"f{n + k}" for k in range(4)]


def decode(word: int) -> MemInsn | None:
    """Decode one instruction word; None unless it is a load/store this module models."""
    if word >> 30 != 3:
        return None
    fmt = _OP3.get((word >> 19) & 0x3F)
    if fmt is None:
        return None
    rd, rs1 = (word >> 25) & 0x1F, (word >> 14) & 0x1F
    if word >> 13 & 1:
        simm = word & 0x1FFF
        simm = simm - 0x2000 if simm & 0x1000 else simm
        return MemInsn(fmt, rd, rs1, None, simm, None)
    asi = (word >> 5) & 0xFF if fmt.alternate else None
    return MemInsn(fmt, rd, rs1, word & 0x1F, 0, asi)
