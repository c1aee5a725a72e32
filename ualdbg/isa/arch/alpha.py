"""Alpha: the kernel fixes up unaligned loads and stores silently (and logs them) unless the
program asked for prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS); then SIGBUS/BUS_ADRALN with the
data address in si_addr (arch/alpha/kernel/traps.c, do_entUnaUser). Little-endian. capstone 5
has no Alpha (capstone 6.0.0a11's gets displacements and FP registers wrong: measured in
docs/ARCHITECTURES.md): the memory format (opcode, ra, rb, 16-bit displacement) is decoded
here, into the one instruction model (isa/insn.py)."""
from __future__ import annotations

from functools import partial

from ...core.model import AccessKind
from ..cpu import CallConvention, Cpu, Strict, WordDecoder
from ..insn import Insn, MemOperand
from .info import MECH_PRCTL, ArchInfo

GPRS = ("v0", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "s0", "s1", "s2", "s3", "s4", "s5", "fp",
        "a0", "a1", "a2", "a3", "a4", "a5", "t8", "t9", "t10", "t11", "ra", "t12", "at", "gp", "sp", "zero")

ALPHA = ArchInfo(
    name="alpha",
    pc="pc",
    sp="sp",
    gdb_names=("alpha",),
    e_machine=0x9026,  # EM_ALPHA (the unofficial number Linux uses)
    gprs=GPRS,
    zero_regs=("zero",),
    mechanism=MECH_PRCTL,
    native_sigbus=10,
    si_addr="data",
    qemu="qemu-alpha",
    triplet="alpha-linux-gnu",
)
# pv (t12): a callee computes its gp from it
CALL = CallConvention(args=("a0", "a1", "a2", "a3", "a4", "a5"), ret="v0", return_address="ra", target="t12")

CALLSYS = 0x00000083  # call_pal callsys: v0 = number, a0..a5 = arguments, a3 != 0 on error


# Opcodes that can trap on misalignment (ldq_u/stq_u ignore the low bits; ldbu/stb are bytes).
# ldl sign-extends; lds/ldt are the float loads (lds converts the S format: left undecoded).
_OPS = {
    0x0C: ("ldwu", 2, "load", False, False), 0x0D: ("stw", 2, "store", False, False),
    0x28: ("ldl", 4, "load", True, False), 0x29: ("ldq", 8, "load", False, False),
    0x2C: ("stl", 4, "store", False, False), 0x2D: ("stq", 8, "store", False, False),
    0x23: ("ldt", 8, "load", False, True), 0x27: ("stt", 8, "store", False, True),
}


def decode(word: int, pc: int = 0) -> Insn | None:
    """A load or store that can fault on alignment, else None."""
    spec = _OPS.get(word >> 26)
    if spec is None:
        return None
    disp = word & 0xFFFF
    disp = disp - 0x10000 if disp & 0x8000 else disp
    name, size, kind, signed, flt = spec
    ra, rb = (word >> 21) & 0x1F, (word >> 16) & 0x1F
    reg = f"f{ra}" if flt else GPRS[ra]
    op = MemOperand(base=GPRS[rb], index=None, scale=1, disp=disp, segment=None, size=size,
                    kind=AccessKind.READ if kind == "load" else AccessKind.WRITE, implicit=False, addr_size=8,
                    data=(reg,), signed=signed, float_data=flt)
    return Insn(pc=pc, size=4, mnemonic=name, op_str=f"{'$' if flt else ''}{reg}, {disp}({GPRS[rb]})", rep=False,
                operands=(op,), flow="next", name=name, raw=word.to_bytes(4, "little"), arch="alpha")


CPUS = (Cpu(ALPHA, strict=Strict(partial(WordDecoder, ALPHA.name, decode, 4, "little"), call=CALL)),)
