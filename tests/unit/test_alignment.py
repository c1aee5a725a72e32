"""alignment.py: policy truth tables (x86 #AC as measured, natural, cache line, page) and the
fault cross-check, with instructions decoded from raw bytes."""
from __future__ import annotations

import pytest

from ualdbg.alignment import (
    POLICY_NAMES,
    AcPolicy,
    CachelinePolicy,
    NaturalPolicy,
    PagePolicy,
    Policy,
    explains_fault,
    policy_by_name,
    required_alignment,
    violations,
)
from ualdbg.decode import Decoder, Insn, accesses
from ualdbg.model import Access, AccessKind

R, W = AccessKind.READ, AccessKind.WRITE
DECODER = Decoder()


def insn(hexbytes: str) -> Insn:
    decoded = DECODER.decode(bytes.fromhex(hexbytes), 0x401000)
    assert decoded is not None
    return decoded


def acc(va: int, size: int) -> Access:
    return Access(va=va, size=size, kind=R)


@pytest.mark.parametrize(("size", "align"), [
    (1, 1), (2, 2), (4, 4), (8, 8), (10, 8), (16, 16), (32, 16), (64, 16), (512, 16),
    (6, 4), (14, 2), (28, 4), (94, 2), (108, 4),
])
def test_required_alignment(size: int, align: int) -> None:
    assert required_alignment(size) == align


# (size, offset from a 64-byte-aligned base, violates natural/AC size rule)
SIZE_TABLE = [
    (1, 1, False), (1, 63, False),
    (2, 0, False), (2, 1, True), (2, 2, False),
    (4, 2, True), (4, 4, False), (4, 8, False),
    (8, 4, True), (8, 8, False), (8, 60, True),
    (10, 8, False), (10, 4, True), (10, 2, True),  # x87 tbyte is checked at 8
    (16, 8, True), (16, 16, False), (16, 4, True),
    (32, 16, False), (32, 8, True),  # 32-byte AVX operands are checked at 16 (measured)
    (64, 16, False), (64, 32, False), (64, 1, True),
]


@pytest.mark.parametrize(("size", "offset", "bad"), SIZE_TABLE)
def test_natural_policy(size: int, offset: int, bad: bool) -> None:
    assert NaturalPolicy().violates(acc(0x10000 + offset, size), None) is bad


@pytest.mark.parametrize(("size", "offset", "bad"), SIZE_TABLE)
def test_ac_policy_plain_instruction(size: int, offset: int, bad: bool) -> None:
    assert AcPolicy().violates(acc(0x10000 + offset, size), None) is bad


@pytest.mark.parametrize(("hexbytes", "size", "va", "ac", "natural"), [
    ("0f1000", 16, 0x1008, True, True),  # movups at 8: #AC
    ("0f1000", 16, 0x1010, False, False),
    ("c5fc1000", 32, 0x1010, False, False),  # vmovups ymm at 16: fine for AC
    ("c5fc1000", 32, 0x1008, True, True),
    ("0f2800", 16, 0x1008, False, True),  # movaps: #GP, not #AC
    ("660f7f00", 16, 0x1008, False, True),  # movdqa
    ("660ffe00", 16, 0x1008, False, True),  # paddd xmm, m128: legacy SSE requires alignment
    ("c5fc2900", 32, 0x1010, False, True),  # vmovaps ymm: #GP below 32; natural holds it to 32
    ("c5fc2900", 32, 0x1020, False, False),
    ("660fe700", 16, 0x1004, False, True),  # movntdq
    ("480fc708", 16, 0x1008, False, True),  # cmpxchg16b
    ("0fae00", 512, 0x1008, False, True),  # fxsave
    ("c4e2712c00", 16, 0x1004, False, True),  # vmaskmovps load
    ("c4e2758c00", 32, 0x1002, False, True),  # vpmaskmovd ymm
    ("c4e269900488", 4, 0x1002, False, True),  # vpgatherdd lane
    ("f3a4", 1, 0x1001, False, False),  # rep movsb
    ("f348ab", 8, 0x1004, True, True),  # rep stosq
    ("db28", 10, 0x1008, False, False),  # fld tbyte at 8
    ("db28", 10, 0x1004, True, True),
    ("d928", 2, 0x1001, True, True),  # fldcw
    ("50", 8, 0x1004, True, True),  # push with rsp misaligned
])
def test_policies_with_instruction(hexbytes: str, size: int, va: int, ac: bool, natural: bool) -> None:
    decoded = insn(hexbytes)
    access = acc(va, size)
    assert AcPolicy().violates(access, decoded) is ac
    assert NaturalPolicy().violates(access, decoded) is natural


@pytest.mark.parametrize(("va", "size", "bad"), [
    (0x1000 + 60, 8, True),  # 60..67 crosses the line at 64
    (0x1000 + 56, 8, False),  # 56..63 ends exactly at the boundary
    (0x1000 + 63, 1, False),
    (0x1000 + 63, 2, True),
    (0x1000 + 0, 64, False),
    (0x1000 + 1, 64, True),
    (0x1000 + 48, 16, False),
    (0x1000 + 56, 16, True),
    (0x1000 + 62, 4, True),
])
def test_cacheline_policy(va: int, size: int, bad: bool) -> None:
    assert CachelinePolicy().violates(acc(va, size), None) is bad


@pytest.mark.parametrize(("va", "size", "bad"), [
    (0x7000 + 4092, 8, True),
    (0x7000 + 4088, 8, False),
    (0x7000 + 4095, 2, True),
    (0x7000 + 4095, 1, False),
    (0x7000 + 60, 8, False),  # a line split is not a page split
    (0x7000, 4096, False),
    (0x7000 + 4064, 64, True),
    (0x7000 + 4032, 64, False),
    (0x7000 + 4090, 16, True),
])
def test_page_policy(va: int, size: int, bad: bool) -> None:
    assert PagePolicy().violates(acc(va, size), None) is bad


def test_line_and_page_sizes_are_parameters() -> None:
    assert CachelinePolicy(line=128).violates(acc(120, 8), None) is False
    assert CachelinePolicy(line=128).violates(acc(124, 8), None) is True
    assert PagePolicy(page=65536).violates(acc(4092, 8), None) is False


def test_policy_by_name() -> None:
    assert POLICY_NAMES == ("ac", "natural", "cacheline", "page")
    for name, cls in [("ac", AcPolicy), ("natural", NaturalPolicy),
                      ("cacheline", CachelinePolicy), ("page", PagePolicy)]:
        policy: Policy = policy_by_name(name)
        assert isinstance(policy, cls) and policy.name == name
    assert isinstance(policy_by_name(" AC "), AcPolicy)


def test_policy_by_name_rejects_unknown_names() -> None:
    with pytest.raises(ValueError) as info:
        policy_by_name("strict")
    message = str(info.value)
    assert "'strict'" in message
    assert all(name in message for name in POLICY_NAMES)


REGS = {"rax": 0x10004, "rbx": 0, "rcx": 1, "rdx": 0, "rsi": 0x20001, "rdi": 0x30004,
        "rbp": 0x7FF0, "rsp": 0x7FFC, "fs_base": 0, "gs_base": 0}


@pytest.mark.parametrize(("hexbytes", "regs", "expected"), [
    ("48895001", {}, True),  # mov [rax+1], rdx: 0x10005, 8 bytes
    ("48895001", {"rax": 0x10007}, False),
    ("50", {}, True),  # push rax with rsp % 8 == 4
    ("50", {"rsp": 0x8000}, False),
    ("f348a5", {"rsi": 0x20000}, True),  # rep movsq: rdi misaligned
    ("f348a5", {"rsi": 0x20000, "rcx": 0}, False),  # no iteration left
    ("f3a4", {}, False),  # rep movsb never
    ("0f2800", {}, False),  # movaps misaligned: #GP, so a SIGBUS is not explained
    ("488d4308", {}, False),  # lea touches nothing
    ("ff10", {"rax": 0x10000}, True),  # call [rax]: the return-address push is misaligned
])
def test_explains_fault(hexbytes: str, regs: dict[str, int], expected: bool) -> None:
    decoded = insn(hexbytes)
    assert explains_fault(decoded, accesses(decoded, {**REGS, **regs})) is expected


def test_explains_fault_cannot_tell() -> None:
    assert explains_fault(None, []) is None
    xsave = insn("0fae20")  # inexact: its area size depends on XCR0
    assert explains_fault(xsave, accesses(xsave, REGS)) is None
    far = insn("ff18")  # far call: pushes not modelled, aligned m16:32 operand
    assert explains_fault(far, accesses(far, {**REGS, "rax": 0x10000})) is None
    assert explains_fault(far, accesses(far, {**REGS, "rax": 0x10001})) is True


def test_violations_keeps_execution_order() -> None:
    decoded = insn("ff30")  # push qword [rax]: read [rax], then write [rsp-8]
    found = violations(AcPolicy(), decoded, accesses(decoded, {**REGS, "rax": 0x10001}))
    assert [(a.va, a.kind, a.implicit) for a in found] == [(0x10001, R, False), (0x7FF4, W, True)]
