"""isa/arch/x86_64.py: x86-64 memory-operand recipes and their evaluation, from raw instruction bytes
(assembled with GNU as, Intel syntax, at authoring time; the bytes are the test data)."""
from __future__ import annotations

import pytest

from ualdbg.core.model import AccessKind
from ualdbg.isa.arch.x86_64 import X86Decoder, effective_address
from ualdbg.isa.decode import Insn, MemOperand, RegisterUnavailable, accesses, decoder_for

R, W, RW = AccessKind.READ, AccessKind.WRITE, AccessKind.READ_WRITE
PC = 0x401000

REGS: dict[str, int] = {
    "rax": 0x10000, "rbx": 0x20000, "rcx": 3, "rdx": 0x40000, "rsi": 0x50000, "rdi": 0x60000,
    "rbp": 0x7FFE1000, "rsp": 0x7FFE0000, "r8": 0x80000, "r9": 0x90000, "r10": 0xA0000,
    "r11": 0xB0000, "r12": 0x100, "r13": 0xD0000, "r14": 0xE0000, "r15": 0xF0000,
    "rip": PC, "eflags": 0x246, "fs_base": 0x7F0000001000, "gs_base": 0x7F0000002000,
}
RAX, RBX, RSI, RDI, RSP, RBP = (REGS[r] for r in ("rax", "rbx", "rsi", "rdi", "rsp", "rbp"))

Expected = list[tuple[int, int, AccessKind, bool]]


@pytest.fixture(scope="module")
def decoder() -> X86Decoder:
    return X86Decoder()


def decode(decoder: X86Decoder, hexbytes: str, pc: int = PC) -> Insn:
    insn = decoder.decode(bytes.fromhex(hexbytes), pc)
    assert insn is not None, hexbytes
    return insn


def evaluate(decoder: X86Decoder, hexbytes: str, pc: int = PC, **regs: int) -> Expected:
    insn = decode(decoder, hexbytes, pc)
    return [(a.va, a.size, a.kind, a.implicit) for a in accesses(insn, {**REGS, **regs})]


# (id, bytes, expected accesses as (va, size, kind, implicit))
CASES: list[tuple[str, str, Expected]] = [
    # ordinary loads, stores, read-modify-writes
    ("mov qword [rax+1], rdx", "48895001", [(RAX + 1, 8, W, False)]),
    ("mov rax, [rbp-8]", "488b45f8", [(RBP - 8, 8, R, False)]),
    ("add [rbx+rcx*4-8], rax", "4801448bf8", [(RBX + 3 * 4 - 8, 8, RW, False)]),
    ("mov eax, [rbx+rcx*8+0x10]", "8b44cb10", [(RBX + 3 * 8 + 0x10, 4, R, False)]),
    ("mov rax, [rsp+r12*2-0x7f]", "4a8b446481", [(RSP + 0x100 * 2 - 0x7F, 8, R, False)]),
    ("inc word [rax]", "66ff00", [(RAX, 2, RW, False)]),
    ("xchg [rax], rbx", "488718", [(RAX, 8, RW, False)]),
    ("lock cmpxchg [rdi], rsi (capstone: read)", "f0480fb137", [(RDI, 8, RW, False)]),
    ("lock xadd [rdi], eax", "f00fc107", [(RDI, 4, RW, False)]),
    ("lock add dword [rax], 1", "f0830001", [(RAX, 4, RW, False)]),
    ("rol [rax], cl (capstone: read)", "48d300", [(RAX, 8, RW, False)]),
    ("movzx eax, word [rsi]", "0fb706", [(RSI, 2, R, False)]),
    ("movsx rax, byte [rsi]", "480fbe06", [(RSI, 1, R, False)]),
    ("movsxd rax, dword [rsi]", "486306", [(RSI, 4, R, False)]),
    ("bt dword [rax], 3", "0fba2003", [(RAX, 4, R, False)]),
    ("bts qword [rax], rcx (rcx=3)", "480fab08", [(RAX, 8, RW, False)]),
    ("sete byte [rax]", "0f9400", [(RAX, 1, W, False)]),
    ("cmovne rax, [rbx]", "480f4503", [(RBX, 8, R, False)]),
    ("test [rax], rbx", "488518", [(RAX, 8, R, False)]),
    ("cmp dword [rax], 5", "833805", [(RAX, 4, R, False)]),
    ("movq [rax], xmm0 (capstone: read)", "660fd600", [(RAX, 8, W, False)]),
    # implicit stack operands
    ("push rax", "50", [(RSP - 8, 8, W, True)]),
    ("push imm8", "6a10", [(RSP - 8, 8, W, True)]),
    ("pushw imm16", "666a10", [(RSP - 2, 2, W, True)]),
    ("push qword [rax]", "ff30", [(RAX, 8, R, False), (RSP - 8, 8, W, True)]),
    ("push qword [rsp+8] (EA before the decrement)", "ff742408",
     [(RSP + 8, 8, R, False), (RSP - 8, 8, W, True)]),
    ("pop rax", "58", [(RSP, 8, R, True)]),
    ("pop qword [rax]", "8f00", [(RSP, 8, R, True), (RAX, 8, W, False)]),
    ("pop qword [rsp+8] (EA after the increment)", "8f442408",
     [(RSP, 8, R, True), (RSP + 8 + 8, 8, W, False)]),
    ("call rax", "ffd0", [(RSP - 8, 8, W, True)]),
    ("call rel32", "e800000000", [(RSP - 8, 8, W, True)]),
    ("call [rax]", "ff10", [(RAX, 8, R, False), (RSP - 8, 8, W, True)]),
    ("jmp [rax]", "ff20", [(RAX, 8, R, False)]),
    ("jmp [rip+0x10]", "ff2510000000", [(PC + 6 + 0x10, 8, R, False)]),
    ("ret", "c3", [(RSP, 8, R, True)]),
    ("ret 8", "c20800", [(RSP, 8, R, True)]),
    ("enter 0x10, 0", "c8100000", [(RSP - 8, 8, W, True)]),
    ("enter 0x20, 3", "c8200003", [
        (RSP - 8, 8, W, True), (RBP - 8, 8, R, True), (RSP - 16, 8, W, True),
        (RBP - 16, 8, R, True), (RSP - 24, 8, W, True), (RSP - 32, 8, W, True)]),
    ("leave", "c9", [(RBP, 8, R, True)]),
    ("pushfq", "9c", [(RSP - 8, 8, W, True)]),
    ("popfq", "9d", [(RSP, 8, R, True)]),
    # string instructions: one iteration, reads first
    ("movsb", "a4", [(RSI, 1, R, True), (RDI, 1, W, True)]),
    ("movsw", "66a5", [(RSI, 2, R, True), (RDI, 2, W, True)]),
    ("movsd (string)", "a5", [(RSI, 4, R, True), (RDI, 4, W, True)]),
    ("movsq", "48a5", [(RSI, 8, R, True), (RDI, 8, W, True)]),
    ("rep movsb", "f3a4", [(RSI, 1, R, True), (RDI, 1, W, True)]),
    ("rep stosq", "f348ab", [(RDI, 8, W, True)]),
    ("stosd", "ab", [(RDI, 4, W, True)]),
    ("lodsw", "66ad", [(RSI, 2, R, True)]),
    ("lodsq", "48ad", [(RSI, 8, R, True)]),
    ("repe cmpsb", "f3a6", [(RSI, 1, R, True), (RDI, 1, R, True)]),
    ("repne scasd", "f2af", [(RDI, 4, R, True)]),
    ("cmpsq", "48a7", [(RSI, 8, R, True), (RDI, 8, R, True)]),
    ("scasq", "48af", [(RDI, 8, R, True)]),
    ("movsb with fs: source", "64a4", [(REGS["fs_base"] + RSI, 1, R, True), (RDI, 1, W, True)]),
    ("xlatb: [rbx + al]", "d7", [(RBX + (RAX & 0xFF), 1, R, True)]),
    # x87 (capstone's sizes and access flags are wrong for several of these)
    ("fld dword", "d900", [(RAX, 4, R, False)]),
    ("fld qword", "dd00", [(RAX, 8, R, False)]),
    ("fld tbyte", "db28", [(RAX, 10, R, False)]),
    ("fstp tbyte", "db38", [(RAX, 10, W, False)]),
    ("fst qword (capstone: read)", "dd10", [(RAX, 8, W, False)]),
    ("fild word", "df00", [(RAX, 2, R, False)]),
    ("fild qword", "df28", [(RAX, 8, R, False)]),
    ("fistp dword (capstone: read)", "db18", [(RAX, 4, W, False)]),
    ("fistp qword", "df38", [(RAX, 8, W, False)]),
    ("fnstcw (capstone: read)", "d938", [(RAX, 2, W, False)]),
    ("fldcw", "d928", [(RAX, 2, R, False)]),
    ("fnstenv", "d930", [(RAX, 28, W, False)]),
    ("fnsave (capstone: 4 bytes)", "dd30", [(RAX, 108, W, False)]),
    ("frstor (capstone: write, 4 bytes)", "dd20", [(RAX, 108, R, False)]),
    # SSE / AVX
    ("movsd xmm0, qword [rax]", "f20f1000", [(RAX, 8, R, False)]),
    ("movss dword [rax], xmm1", "f30f1108", [(RAX, 4, W, False)]),
    ("addsd xmm0, qword [rax]", "f20f5800", [(RAX, 8, R, False)]),
    ("movups xmm0, [rax]", "0f1000", [(RAX, 16, R, False)]),
    ("movdqu [rax], xmm1", "f30f7f08", [(RAX, 16, W, False)]),
    ("vmovups ymm0, [rax]", "c5fc1000", [(RAX, 32, R, False)]),
    ("movaps xmm0, [rax]", "0f2800", [(RAX, 16, R, False)]),
    ("movdqa [rax], xmm0", "660f7f00", [(RAX, 16, W, False)]),
    ("vmaskmovps xmm0, xmm1, [rax]", "c4e2712c00", [(RAX, 16, R, False)]),
    ("vmaskmovps [rax], xmm1, xmm0 (capstone: read)", "c4e2712e00", [(RAX, 16, W, False)]),
    ("vpmaskmovd ymm0, ymm1, [rax]", "c4e2758c00", [(RAX, 32, R, False)]),
    ("maskmovdqu: [rdi]", "660ff7c1", [(RDI, 16, W, True)]),
    ("fxsave (capstone: 8 bytes)", "0fae00", [(RAX, 512, W, False)]),
    ("fxrstor", "0fae08", [(RAX, 512, R, False)]),
    ("cmpxchg16b", "480fc708", [(RAX, 16, RW, False)]),
    # addressing
    ("mov rax, fs:[0x28]", "64488b042528000000", [(REGS["fs_base"] + 0x28, 8, R, False)]),
    ("mov eax, gs:[rax+8]", "658b4008", [(REGS["gs_base"] + RAX + 8, 4, R, False)]),
    ("mov eax, [ebx+ecx*2-4] (0x67)", "678b444bfc", [(RBX + 3 * 2 - 4, 4, R, False)]),
    ("mov eax, [r8d] (0x67)", "67418b00", [(REGS["r8"], 4, R, False)]),
    # no memory access at all
    ("lea", "488d4308", []),
    ("nop dword [rax+rax]", "0f1f0400", []),
    ("nop word cs:[rax+rax+0]", "662e0f1f840000000000", []),
    ("prefetcht0", "0f1808", []),
    ("clflush", "0fae38", []),
]


@pytest.mark.parametrize(("hexbytes", "expected"), [(h, e) for _, h, e in CASES],
                         ids=[name for name, _, _ in CASES])
def test_accesses(decoder: X86Decoder, hexbytes: str, expected: Expected) -> None:
    assert evaluate(decoder, hexbytes) == expected


@pytest.mark.parametrize(("hexbytes", "rep"), [
    ("f3a4", True), ("f348ab", True), ("f3a6", True), ("f2af", True), ("a4", False),
    ("48a5", False),
    ("f20f1000", False),  # SSE movsd carries an f2 prefix: not a rep
    ("f3c3", False),  # "repz ret"
])
def test_rep_flag(decoder: X86Decoder, hexbytes: str, rep: bool) -> None:
    assert decode(decoder, hexbytes).rep is rep


def test_rep_with_zero_count_touches_nothing(decoder: X86Decoder) -> None:
    assert evaluate(decoder, "f348ab", rcx=0) == []
    assert evaluate(decoder, "f348ab", rcx=1) == [(RDI, 8, W, True)]
    # 0x67: the count is ecx, so a zero low half means no iteration
    assert evaluate(decoder, "67f348ab", rcx=1 << 32) == []


def test_rip_relative_uses_next_instruction(decoder: X86Decoder) -> None:
    insn = decode(decoder, "8b0500010000", pc=0x555555554000)
    assert insn.size == 6 and insn.next_pc == 0x555555554006
    (op,) = insn.operands
    assert op.base == "rip" and op.disp == 0x100
    # the caller's rip is ignored: the recipe is tied to the instruction's own address
    assert effective_address(insn, op, {**REGS, "rip": 0}) == 0x555555554106


def test_eip_relative_with_0x67_wraps_at_32_bits(decoder: X86Decoder) -> None:
    assert evaluate(decoder, "678b0510000000", pc=0x555555554000) == [
        ((0x555555554007 + 0x10) & 0xFFFFFFFF, 4, R, False)]


def test_subregister_base_is_masked_and_ea_wraps(decoder: X86Decoder) -> None:
    # [eax + 4] with rax = 0xdead_beef_ffff_fffe: eax = 0xfffffffe, + 4 wraps to 2
    assert evaluate(decoder, "678b4004", rax=0xDEADBEEFFFFFFFFE) == [(2, 4, R, False)]


def test_64bit_ea_wraps_at_2_64(decoder: X86Decoder) -> None:
    assert evaluate(decoder, "488b45f8", rbp=4) == [((4 - 8) & (2**64 - 1), 8, R, False)]


def test_fs_segment_is_added_after_32bit_truncation(decoder: X86Decoder) -> None:
    # mov eax, fs:[eax] : 64 67 8b 00
    assert evaluate(decoder, "64678b00", rax=0x1_0000_0010) == [
        (REGS["fs_base"] + 0x10, 4, R, False)]


def test_other_segment_overrides_have_base_zero(decoder: X86Decoder) -> None:
    insn = decode(decoder, "26488b00")  # mov rax, es:[rax]
    assert insn.operands[0].segment is None
    assert evaluate(decoder, "26488b00") == [(RAX, 8, R, False)]


@pytest.mark.parametrize(("rcx", "delta"), [(3, 0), (200, 24), (-1, -8), (-65, -16)])
def test_bit_string_offset_register(decoder: X86Decoder, rcx: int, delta: int) -> None:
    # bts qword [rax], rcx addresses [rax + 8*(rcx >> 6)], rcx signed
    assert evaluate(decoder, "480fab08", rcx=rcx & (2**64 - 1)) == [(RAX + delta, 8, RW, False)]


def test_bit_string_offset_16bit(decoder: X86Decoder) -> None:
    # bt word [rax], cx : 66 0f a3 08 ; cx = 0xfff0 = -16 -> one word back
    assert evaluate(decoder, "660fa308", rcx=0xFFF0) == [(RAX - 2, 2, R, False)]


def test_missing_register_raises_keyerror(decoder: X86Decoder) -> None:
    insn = decode(decoder, "48895001")
    with pytest.raises(RegisterUnavailable):
        accesses(insn, {"rbx": 0})
    with pytest.raises(KeyError):  # RegisterUnavailable is a KeyError
        accesses(decode(decoder, "64488b042528000000"), {})


def test_gather_is_marked_and_needs_vector_registers(decoder: X86Decoder) -> None:
    insn = decode(decoder, "c4e269900488")  # vpgatherdd xmm0, [rax + xmm1*4], xmm2
    assert insn.vsib and not insn.masked
    (op,) = insn.operands
    assert op.index == "xmm1" and op.size == 4 and op.kind is R and op.vsib is not None
    assert op.vsib.lanes == 4 and op.vsib.mask == "xmm2"
    assert accesses(insn, REGS) == []  # no index vector: the lanes are unknown

    def dwords(*values: int) -> int:
        return sum((v & 0xFFFFFFFF) << (32 * i) for i, v in enumerate(values))

    regs = {**REGS, "xmm1": dwords(0, 1, -1, 3),
            "xmm2": dwords(-1, -1, 0, -1)}  # lane 2 disabled (top bit clear)
    got = [(a.va, a.size, a.kind) for a in accesses(insn, regs)]
    assert got == [(RAX, 4, R), (RAX + 4, 4, R), (RAX + 12, 4, R)]
    # a wider alias of the index register works too, and no mask means every lane
    no_mask = {k: v for k, v in regs.items() if k not in ("xmm1", "xmm2")}
    no_mask["ymm1"] = dwords(0, 1, -1, 3, 9, 9, 9, 9)
    assert [a.va for a in accesses(insn, no_mask)] == [RAX, RAX + 4, RAX - 4, RAX + 12]


def test_gather_qword_index_lanes(decoder: X86Decoder) -> None:
    insn = decode(decoder, "c4e26d910488")  # vpgatherqd xmm0, [rax + ymm1*4], xmm2
    (op,) = insn.operands
    assert op.size == 4 and op.vsib is not None
    assert op.vsib.index_size == 8 and op.vsib.lanes == 4


@pytest.mark.parametrize(("hexbytes", "masked"), [
    ("c4e2712c00", True), ("c4e2712e00", True), ("c4e2758c00", True), ("660ff7c1", True),
    ("0f1000", False),
    ("62f17e496f00", True),  # vmovdqu32 zmm0 {k1}, [rax]
])
def test_masked_moves_are_marked(decoder: X86Decoder, hexbytes: str, masked: bool) -> None:
    insn = decode(decoder, hexbytes)
    assert insn.masked is masked and not insn.vsib


@pytest.mark.parametrize(("hexbytes", "gp_align"), [
    ("0f2800", 16),  # movaps
    ("660f7f00", 16),  # movdqa
    ("c5fc2900", 32),  # vmovaps ymm
    ("660fe700", 16),  # movntdq
    ("480fc708", 16),  # cmpxchg16b
    ("0fae00", 16),  # fxsave
    ("0fae20", 64),  # xsave
    ("660ffe00", 16),  # paddd xmm0, m128 (legacy SSE)
    ("0f1000", 0),  # movups
    ("f30f7f08", 0),  # movdqu
    ("c5fdfe00", 0),  # vpaddd ymm0, ymm0, m256 (VEX: no alignment requirement)
    ("f20f1000", 0),  # movsd m64
])
def test_alignment_enforcing_instructions(decoder: X86Decoder, hexbytes: str, gp_align: int) -> None:
    assert decode(decoder, hexbytes).gp_align == gp_align


def test_xsave_is_inexact(decoder: X86Decoder) -> None:
    insn = decode(decoder, "0fae20")
    assert not insn.exact and insn.operands[0].kind is W and insn.operands[0].size >= 576


def test_far_call_through_memory(decoder: X86Decoder) -> None:
    insn = decode(decoder, "ff18")  # call m16:32 (capstone reports "call" with 8 bytes)
    assert insn.flow == "call" and not insn.exact
    assert [(op.size, op.kind) for op in insn.operands] == [(6, R)]
    assert decode(decoder, "48ff18").operands[0].size == 10


@pytest.mark.parametrize(("hexbytes", "flow", "target"), [
    ("eb00", "jump", PC + 2),
    ("7400", "cond", PC + 2),
    ("e200", "cond", PC + 2),  # loop
    ("e300", "cond", PC + 2),  # jrcxz
    ("e800000000", "call", PC + 5),
    ("ffd0", "call", None),
    ("ff20", "jump", None),
    ("c3", "ret", None),
    ("c20800", "ret", None),
    ("0f05", "other", None),  # syscall
    ("0f0b", "other", None),  # ud2
    ("cc", "other", None),  # int3
    ("48895001", "next", None),
    ("f3a4", "next", None),
])
def test_flow(decoder: X86Decoder, hexbytes: str, flow: str, target: int | None) -> None:
    insn = decode(decoder, hexbytes)
    assert (insn.flow, insn.target) == (flow, target)


@pytest.mark.parametrize("hexbytes", [
    "",  # nothing
    "06",  # push es: invalid in 64-bit mode
    "48",  # a lone REX prefix
    "488b",  # truncated
    "ffff",  # ff /7: undefined
    "66" * 15 + "90",  # 16 bytes: longer than any x86 instruction
])
def test_undecodable_gives_none(decoder: X86Decoder, hexbytes: str) -> None:
    assert decoder.decode(bytes.fromhex(hexbytes), PC) is None


def test_decode_reads_at_most_15_bytes(decoder: X86Decoder) -> None:
    insn = decoder.decode(bytes.fromhex("48895001" + "90" * 40), PC)
    assert insn is not None and insn.size == 4 and X86Decoder.max_insn_len == 15


def test_insn_text_and_identity(decoder: X86Decoder) -> None:
    insn = decode(decoder, "48895001")
    assert insn.text == "mov qword ptr [rax + 1], rdx"
    assert insn.pc == PC and insn.size == 4 and insn.mnemonic == "mov" and insn.raw == bytes.fromhex("48895001")
    assert decode(decoder, "c3").text == "ret"
    assert decode(decoder, "f348ab").name == "stosq"


def test_recipe_is_frozen_and_reusable(decoder: X86Decoder) -> None:
    insn = decode(decoder, "50")
    (op,) = insn.operands
    assert isinstance(op, MemOperand) and op.base == "rsp" and op.rsp_adjust == -8 and op.implicit
    assert op.text == "[rsp - 0x8]"
    with pytest.raises(AttributeError):
        op.size = 4  # type: ignore[misc]
    assert [a.va for a in accesses(insn, {**REGS, "rsp": 0x1003})] == [0x0FFB]
    assert [a.va for a in accesses(insn, {**REGS, "rsp": 0x2000})] == [0x1FF8]


def test_unknown_arch_is_refused() -> None:
    with pytest.raises(ValueError, match="x86_64"):
        decoder_for("sparc64")
