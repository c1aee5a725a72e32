"""The one instruction model (ualdbg/isa/insn.py): every decoder signal mode uses gives an Insn
whose recipe names the data registers the fix-up moves; `transfer` joins an instruction's
recipes into the one access the fix-up performs; what the word alone does not say (SH's
FPSCR.SZ) refines it."""
from __future__ import annotations

import pytest

from ualdbg.core.model import AccessKind
from ualdbg.isa.arch import CPUS, aarch64, sh4, strict
from ualdbg.isa.decode import decoder_for
from ualdbg.isa.insn import Insn, MemOperand, transfer

# One faulting load per architecture with a signal mode, as its decoder reads it from memory.
WORDS = {
    "sparc64": ("c25a0009", "ldx [%o0 + %o1], %g1", ("g1",)),
    "alpha": ("000030a0", "ldl t0, 0(a0)", ("t0",)),
    "hppa": ("0f48109c", "ldw 4(r26),ret0", ("ret0",)),
    "sh4": ("4260", "mov.l @r4,r0", ("r0",)),
    "aarch64": ("03fcdfc8", "ldar x3, [x0]", ("x3",)),
    "mips": ("8c820003", "lw $v0, 3($a0)", ("v0",)),
    "mipsel": ("0300828c", "lw $v0, 3($a0)", ("v0",)),
    "mips64el": ("0300828c", "lw $v0, 3($a0)", ("v0",)),
    "armhf": ("d020c2e1", "ldrd r2, r3, [r2]", ("r2", "r3")),
    "armel": ("d020c2e1", "ldrd r2, r3, [r2]", ("r2", "r3")),
}


def test_every_signal_mode_architecture_is_covered() -> None:
    assert set(WORDS) == {name for name, cpu in CPUS.items() if cpu.strict is not None}
    assert strict("x86_64") is None and strict("riscv64") is None


@pytest.mark.parametrize("arch", sorted(WORDS))
def test_each_decoder_gives_the_model_with_its_data_registers(arch: str) -> None:
    raw, text, data = WORDS[arch]
    s = strict(arch)
    assert s is not None
    insn = s.decoder().decode(bytes.fromhex(raw), 0x1000, "")
    assert isinstance(insn, Insn) and insn.pc == 0x1000 and insn.text == text
    op = transfer(insn)
    assert isinstance(op, MemOperand) and op.data == data and op.kind is AccessKind.READ


def test_transfer_joins_consecutive_recipes_and_keeps_one_alone() -> None:
    dec = decoder_for("armhf")
    ldm = dec.decode(bytes.fromhex("0300b2e8"), 0x8000)  # ldm r2!, {r0, r1}
    assert ldm is not None and len(ldm.operands) == 2
    op = transfer(ldm)
    assert op is not None
    assert (op.base, op.size, op.data, op.align, op.writeback) == ("r2", 8, ("r0", "r1"), 4, 8)
    lw = decoder_for("mips").decode(bytes.fromhex("8c820003"), 0x1000)
    assert lw is not None and transfer(lw) is lw.operands[0]


def test_transfer_is_none_without_data_registers() -> None:
    x86 = decoder_for("x86_64").decode(bytes.fromhex("8b4701"), 0x1000)  # mov eax, [rdi + 1]
    assert x86 is not None and x86.operands and transfer(x86) is None
    ldr = decoder_for("aarch64").decode((0xF9400000).to_bytes(4, "little"), 0x1000)  # ldr x0, [x0]
    assert ldr is not None and ldr.operands and transfer(ldr) is None  # a plain load: no trap on arm64


SIGNAL = aarch64.SignalDecoder()


def test_arm64_signal_decoder_is_the_step_decoder_filtered() -> None:
    stxr = SIGNAL.decode((0xC8027C20).to_bytes(4, "little"), 0)  # stxr w2, x0, [x1]
    assert stxr is not None
    op = stxr.operands[0]
    assert (op.data, op.status, op.exclusive, op.kind) == (("x0",), "x2", True, AccessKind.WRITE)
    casp = SIGNAL.decode((0x48207C82).to_bytes(4, "little"), 0)  # casp x0, x1, x2, x3, [x4]
    assert casp is not None and casp.operands[0].rmw == "atomic" and casp.operands[0].size == 16
    assert SIGNAL.decode((0xF9400000).to_bytes(4, "little"), 0) is None  # ldr x0, [x0]


def test_sh4_fmov_with_fpscr_sz_is_a_pair_not_performed() -> None:
    insn = sh4.decode(0xF41B)  # fmov.s fr1,@-r4
    assert insn is not None
    same = sh4.refine(insn, insn.operands[0], 0)
    assert same == (insn, insn.operands[0])
    pair, op = sh4.refine(insn, insn.operands[0], sh4.FPSCR_SZ)
    assert (pair.text, op.size, op.disp, op.writeback, op.data) == ("fmov fr1,@-r4", 8, -8, -8, ())
