"""AArch64 memory operands from raw instruction words (assembled with aarch64-linux-gnu-as, bytes
as in memory): the effective address, size and kind of every access, evaluated against
registers as gdb names them, and the control flow the step engine follows."""
from __future__ import annotations

import pytest

from ualdbg.core.model import AccessKind
from ualdbg.isa.alignment import NaturalPolicy
from ualdbg.isa.decode import Insn, RegisterUnavailable, accesses, decoder_for

R, W, RW = AccessKind.READ, AccessKind.WRITE, AccessKind.READ_WRITE
PC = 0x400000
DEC = decoder_for("aarch64")
REGS = {f"x{n}": 0x1000 * (n + 1) for n in range(31)} | {"sp": 0x7FF0, "pc": PC}


def insn(hexbytes: str, pc: int = PC) -> Insn:
    found = DEC.decode(bytes.fromhex(hexbytes), pc)
    assert found is not None and found.arch == "aarch64" and found.size == 4
    return found


def acc(hexbytes: str, regs: dict[str, int] | None = None) -> list[tuple[int, int, AccessKind]]:
    return [(a.va, a.size, a.kind) for a in accesses(insn(hexbytes), regs or REGS)]


X = REGS  # shorthand: X["x1"] is x1's value


@pytest.mark.parametrize("hexbytes, text, expected", [
    ("200040f9", "ldr x0, [x1]", [(X["x1"], 8, R)]),
    ("200440b9", "ldr w0, [x1, #4]", [(X["x1"] + 4, 4, R)]),
    ("208440f8", "ldr x0, [x1], #8", [(X["x1"], 8, R)]),  # post-index: the base before writeback
    ("208c40f8", "ldr x0, [x1, #8]!", [(X["x1"] + 8, 8, R)]),  # pre-index: base + offset
    ("207862f8", "ldr x0, [x1, x2, lsl #3]", [(X["x1"] + X["x2"] * 8, 8, R)]),
    ("20686238", "ldrb w0, [x1, x2]", [(X["x1"] + X["x2"], 1, R)]),
    ("20e09f78", "ldursh x0, [x1, #-2]", [(X["x1"] - 2, 2, R)]),
    ("20d05ff8", "ldur x0, [x1, #-3]", [(X["x1"] - 3, 8, R)]),
    ("2000c03d", "ldr q0, [x1]", [(X["x1"], 16, R)]),
    ("200440fd", "ldr d0, [x1, #8]", [(X["x1"] + 8, 8, R)]),
    ("2000007d", "str h0, [x1]", [(X["x1"], 2, W)]),
    ("410040bd", "ldr s1, [x2]", [(X["x2"], 4, R)]),
    ("3f0000f9", "str xzr, [x1]", [(X["x1"], 8, W)]),
    ("ff070079", "strh wzr, [sp, #2]", [(0x7FF2, 2, W)]),
    # pairs: each element is its own access of the register's size
    ("e00741a9", "ldp x0, x1, [sp, #0x10]", [(0x8000, 8, R), (0x8008, 8, R)]),
    ("fd7bbea9", "stp x29, x30, [sp, #-0x20]!", [(0x7FD0, 8, W), (0x7FD8, 8, W)]),
    ("4004c128", "ldp w0, w1, [x2], #8", [(X["x2"], 4, R), (X["x2"] + 4, 4, R)]),
    ("40044069", "ldpsw x0, x1, [x2]", [(X["x2"], 4, R), (X["x2"] + 4, 4, R)]),
    ("000400ad", "stp q0, q1, [x0]", [(X["x0"], 16, W), (X["x0"] + 16, 16, W)]),
    ("400440a8", "ldnp x0, x1, [x2]", [(X["x2"], 8, R), (X["x2"] + 8, 8, R)]),
    # exclusive / acquire-release / atomics
    ("207c5fc8", "ldxr x0, [x1]", [(X["x1"], 8, R)]),
    ("207c03c8", "stxr w3, x0, [x1]", [(X["x1"], 8, W)]),  # w3 is the status, x0 the data
    ("40847fc8", "ldaxp x0, x1, [x2]", [(X["x2"], 16, R)]),  # an exclusive pair: one 16-byte access
    ("20fcdf88", "ldar w0, [x1]", [(X["x1"], 4, R)]),
    ("20fc9fc8", "stlr x0, [x1]", [(X["x1"], 8, W)]),
    ("417ca0c8", "cas x0, x1, [x2]", [(X["x2"], 8, RW)]),
    ("410020b8", "ldadd w0, w1, [x2]", [(X["x2"], 4, RW)]),
    # SIMD structures: one access of the element size at the base
    ("0078404c", "ld1 {v0.4s}, [x0]", [(X["x0"], 4, R)]),
    ("00a8df4c", "ld1 {v0.4s, v1.4s}, [x0], #32", [(X["x0"], 4, R)]),
    ("007c824c", "st1 {v0.2d}, [x0], x2", [(X["x0"], 8, W)]),  # x2 is the post-increment, not the address
    # no data access
    ("000080f9", "prfm pldl1keep, [x0]", []),
    ("1f2003d5", "nop", []),
])
def test_operands(hexbytes: str, text: str, expected: list[tuple[int, int, AccessKind]]) -> None:
    assert insn(hexbytes).mnemonic == text.split()[0]
    assert acc(hexbytes) == expected


def test_index_register_extension_sign_and_zero() -> None:
    regs = dict(REGS, x2=0xFFFFFFFF_FFFFFFFE)  # w2 = -2 as sxtw, 0xfffffffe as uxtw
    assert acc("20d862b8", regs) == [((X["x1"] - 8) & (1 << 64) - 1, 4, R)]  # ldr w0, [x1, w2, sxtw #2]
    assert acc("204862b8", regs) == [(X["x1"] + 0xFFFFFFFE, 4, R)]  # ldr w0, [x1, w2, uxtw]


def test_literal_loads_are_pc_relative() -> None:
    assert acc("40000058") == [(PC + 8, 8, R)]  # ldr x0, .+8
    assert acc("40000018") == [(PC + 8, 4, R)]  # ldr w0, .+8
    assert acc("40000098") == [(PC + 8, 4, R)]  # ldrsw x0, .+8


def test_natural_policy_on_pairs_checks_each_element_at_its_size() -> None:
    policy = NaturalPolicy()
    i = insn("4004c128")  # ldp w0, w1, [x2], #8
    at4 = [policy.violates(a, i) for a in accesses(i, dict(REGS, x2=0x1004))]
    assert at4 == [False, False]  # 4-aligned elements: a strict CPU takes it
    assert [policy.violates(a, i) for a in accesses(i, dict(REGS, x2=0x1002))] == [True, True]
    x = insn("40847fc8")  # ldaxp x0, x1, [x2]: aligned to 16
    assert [policy.violates(a, x) for a in accesses(x, dict(REGS, x2=0x1008))] == [True]


def test_flow() -> None:
    assert (insn("c0035fd6").flow, insn("c0035fd6").mnemonic) == ("ret", "ret")
    bl = insn("02000094")  # bl .+8
    assert (bl.flow, bl.target, bl.next_pc) == ("call", PC + 8, PC + 4)
    assert insn("00003fd6").flow == "call"  # blr x0
    b = insn("02000014")  # b .+8
    assert (b.flow, b.target) == ("jump", PC + 8)
    assert (insn("400000b4").flow, insn("400000b4").target) == ("cond", PC + 8)  # cbz x0, .+8
    assert insn("1f2003d5").flow == "next"


def test_missing_register_is_reported() -> None:
    with pytest.raises(RegisterUnavailable):
        accesses(insn("200040f9"), {"x0": 0})


def test_fp_and_lr_are_x29_and_x30() -> None:
    # ldr x0, [x29, #16] is printed with capstone's alias fp
    assert acc("a00b40f9") == [(X["x29"] + 16, 8, R)]
