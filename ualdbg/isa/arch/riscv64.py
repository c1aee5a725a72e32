"""RISC-V 64: whether a misaligned access traps depends on the hardware and the firmware (SBI
may emulate it); when the kernel delivers SIGBUS/BUS_ADRALN, si_addr is the faulting PC, not
the data address (arch/riscv/kernel/traps.c, do_trap_load_misaligned). qemu-riscv64 performs
misaligned accesses without a trap, so under qemu the step engine with the natural policy is
how ualdbg finds them.

Its decoder: RV64GC loads, stores and atomics (compressed forms included) as recipes of the one
instruction model (isa/insn.py), from capstone 5 (CS_ARCH_RISCV with the compressed extension),
for the step engine: every misaligned access a core without misaligned support traps on, and
that the Linux kernel then emulates slowly (or, on recent kernels, sends SIGBUS for after
prctl(PR_SET_UNALIGN)). capstone gives a compressed load/store's address as separate operands
(register, displacement, base register) and an uncompressed one as a memory operand: both are
read here."""
from __future__ import annotations

from collections.abc import Mapping

import capstone
from capstone import riscv

from ...core.model import Access, AccessKind
from ..cpu import Cpu
from ..cs import first_insn
from ..insn import Insn, MemOperand, RegisterUnavailable
from .info import MECH_PRCTL, ArchInfo

RISCV64 = ArchInfo(
    name="riscv64",
    pc="pc",
    sp="sp",
    gdb_names=("riscv:rv64", "riscv"),
    e_machine=243,  # EM_RISCV
    zero_regs=("zero",),
    gprs=("zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "fp", "s1", "a0", "a1", "a2", "a3", "a4",
          "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
          "t5", "t6"),
    insn_size=None,  # 2 (compressed) or 4
    mechanism=MECH_PRCTL,
    native_sigbus=7,
    si_addr="pc",
    qemu="qemu-riscv64",
    triplet="riscv64-linux-gnu",
    step_only="qemu-riscv64 performs misaligned accesses without a trap",
)

MASK64 = (1 << 64) - 1
_R, _W, _RW = AccessKind.READ, AccessKind.WRITE, AccessKind.READ_WRITE
# mnemonic without "c." -> (bytes, kind)
_MEM = {
    "lb": (1, _R), "lbu": (1, _R), "sb": (1, _W), "lh": (2, _R), "lhu": (2, _R), "sh": (2, _W),
    "lw": (4, _R), "lwu": (4, _R), "sw": (4, _W), "ld": (8, _R), "sd": (8, _W),
    "flw": (4, _R), "fsw": (4, _W), "fld": (8, _R), "fsd": (8, _W),
    "lwsp": (4, _R), "ldsp": (8, _R), "swsp": (4, _W), "sdsp": (8, _W), "fldsp": (8, _R), "fsdsp": (8, _W),
    "flwsp": (4, _R), "fswsp": (4, _W),
}


def _mem(name: str) -> tuple[int, AccessKind] | None:
    stem = name[2:] if name.startswith("c.") else name
    if stem in _MEM:
        return _MEM[stem]
    base, _, width = stem.partition(".")
    width = width.split(".")[0]
    if base in ("lr", "sc") or base.startswith("amo"):  # lr.w, sc.d, amoadd.w.aq: naturally aligned
        size = {"w": 4, "d": 8}.get(width)
        if size is None:
            return None
        return size, _R if base == "lr" else _W if base == "sc" else _RW
    return None


def _flow(ci: capstone.CsInsn) -> tuple[str, int | None]:
    name = ci.mnemonic[2:] if ci.mnemonic.startswith("c.") else ci.mnemonic
    imm = [o.imm & MASK64 for o in ci.operands if o.type == riscv.RISCV_OP_IMM]
    regs = [ci.reg_name(o.reg) for o in ci.operands if o.type == riscv.RISCV_OP_REG]
    if name in ("jal", "jalr"):
        if regs and regs[0] in ("ra", "t0") or name == "jal" and not regs:
            return "call", imm[-1] if name == "jal" and imm else None
        if name == "jalr" and regs == ["zero", "ra"] or ci.mnemonic == "c.jr" and regs == ["ra"]:
            return "ret", None
        return "jump", imm[-1] if name == "jal" and imm else None
    if name in ("jr",):
        return ("ret" if regs == ["ra"] else "jump"), None
    if name in ("j",):
        return "jump", imm[-1] if imm else None
    if name.startswith("b") or name in ("beqz", "bnez"):
        return "cond", imm[-1] if imm else None
    if name in ("ecall", "ebreak"):
        return "other", None
    return "next", None


class RiscvDecoder:
    """capstone's RV64GC decoder with the step engine's recipes (an InsnDecoder, isa/cpu.py)."""

    arch = "riscv64"
    max_insn_len = 4

    def __init__(self) -> None:
        self._cs = capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)
        self._cs.detail = True

    def decode(self, code: bytes, pc: int, mode: str = "") -> Insn | None:
        ci = first_insn(self._cs, code, pc, MASK64)
        if ci is None:
            return None
        ops: tuple[MemOperand, ...] = ()
        exact = True
        spec = _mem(ci.mnemonic)
        if spec is not None:
            size, kind = spec
            mems = [o for o in ci.operands if o.type == riscv.RISCV_OP_MEM]
            regs = [ci.reg_name(o.reg) for o in ci.operands if o.type == riscv.RISCV_OP_REG]
            imms = [o.imm for o in ci.operands if o.type == riscv.RISCV_OP_IMM]
            if mems:
                base, disp = ci.reg_name(mems[0].mem.base), mems[0].mem.disp
            elif regs:
                base, disp = regs[-1], imms[0] if imms else 0
            else:
                base, disp, exact = None, 0, False
            if base is not None:
                ops = (MemOperand(base=base, index=None, scale=1, disp=disp, segment=None, size=size, kind=kind,
                                  implicit=False, data=tuple(regs[:1]) if not mems else ()),)
        flow, target = _flow(ci)
        return Insn(pc=ci.address, size=ci.size, mnemonic=ci.mnemonic, op_str=ci.op_str, rep=False, operands=ops,
                    flow=flow, name=ci.mnemonic, target=target, exact=exact, raw=bytes(ci.bytes), arch="riscv64")


def effective_address(op: MemOperand, regs: Mapping[str, int]) -> int:
    ea = op.disp
    if op.base is not None and op.base != "zero":
        try:
            ea += regs[op.base]
        except KeyError:
            raise RegisterUnavailable(f"register {op.base!r} is needed to evaluate the address") from None
    return ea & MASK64


def accesses(insn: Insn, regs: Mapping[str, int]) -> list[Access]:
    return [Access(va=effective_address(op, regs), size=op.size, kind=op.kind) for op in insn.operands]


# No signal mode: no decoder of its faulting loads and stores for a fix-up (docs/ARCHITECTURES.md).
CPUS = (Cpu(RISCV64, decoder=RiscvDecoder, accesses=accesses),)
