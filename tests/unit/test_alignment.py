"""alignment.py: policy truth tables (x86 #AC as measured on Zen 3 and on an Intel Xeon, natural,
cache line, page), the probe-output parser and the fault cross-check, with instructions decoded
from raw bytes."""
from __future__ import annotations

import pytest

from ualdbg.core.model import Access, AccessKind
from ualdbg.isa import alignment
from ualdbg.isa.alignment import (
    POLICY_NAMES,
    ZEN3_RULES,
    AcPolicy,
    AcRules,
    CachelinePolicy,
    NaturalPolicy,
    PagePolicy,
    Policy,
    ProbeError,
    ac_class,
    cpu_identity,
    explains_fault,
    policy_by_name,
    required_alignment,
    rules_from_probe,
    violations,
)
from ualdbg.isa.decode import Insn, accesses, decoder_for

R, W = AccessKind.READ, AccessKind.WRITE
DECODER = decoder_for()


ZEN3 = AcPolicy(ZEN3_RULES)
# What the acprobe measured on the Intel Xeon (family 6 model 167) these machines report: no
# 16/32/64-byte vector move is alignment-checked, everything else as on Zen 3.
INTEL_RULES = AcRules({**ZEN3_RULES.checks, "sse16": 1, "vex16": 1, "vex32": 1, "vex64": 1}, "test: Intel Xeon")
INTEL = AcPolicy(INTEL_RULES)


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
    assert ZEN3.violates(acc(0x10000 + offset, size), None) is bad
    assert INTEL.violates(acc(0x10000 + offset, size), None) is (bad and size < 16)


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
    assert ZEN3.violates(access, decoded) is ac
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
    found = violations(ZEN3, decoded, accesses(decoded, {**REGS, "rax": 0x10001}))
    assert [(a.va, a.kind, a.implicit) for a in found] == [(0x10001, R, False), (0x7FF4, W, True)]


# (instruction, access size, va, Zen 3 #AC, Intel #AC): the vector rows are where the CPUs differ
@pytest.mark.parametrize(("hexbytes", "size", "va", "zen3", "intel"), [
    ("0f1000", 16, 0x1008, True, False),  # movups xmm0, [rax] at 8 mod 16
    ("0f1000", 16, 0x1001, True, False),
    ("f30f6f00", 16, 0x1004, True, False),  # movdqu
    ("c5fa6f00", 16, 0x1008, True, False),  # vmovdqu xmm0
    ("c5fe6f00", 32, 0x1008, True, False),  # vmovdqu ymm0
    ("c5fe6f00", 32, 0x1010, False, False),
    ("62f1fe486f00", 64, 0x1008, True, False),  # vmovdqu64 zmm0
    ("f30f1000", 4, 0x1002, True, True),  # movss
    ("f20f1000", 8, 0x1004, True, True),  # movsd
    ("488b00", 8, 0x1004, True, True),  # mov rax, [rax]
    ("db28", 10, 0x1004, True, True),  # fld tbyte
    ("db28", 10, 0x1008, False, False),
    ("dd00", 8, 0x1004, True, True),  # fld qword
    ("0f2800", 16, 0x1008, False, False),  # movaps: #GP on both, never #AC
])
def test_ac_policy_per_cpu(hexbytes: str, size: int, va: int, zen3: bool, intel: bool) -> None:
    decoded = insn(hexbytes)
    assert ZEN3.violates(acc(va, size), decoded) is zen3
    assert INTEL.violates(acc(va, size), decoded) is intel


@pytest.mark.parametrize(("hexbytes", "size", "cls"), [
    ("488b00", 8, "gp8"), ("50", 8, "gp8"), ("f348ab", 8, "gp8"), ("668b00", 2, "gp2"),
    ("f30f1000", 4, "sse4"), ("f20f1000", 8, "sse8"), ("0f1000", 16, "sse16"), ("f30f6f00", 16, "sse16"),
    ("c5fa6f00", 16, "vex16"), ("c5fe6f00", 32, "vex32"), ("62f1fe486f00", 64, "vex64"),
    ("d900", 4, "x87_4"), ("dd00", 8, "x87_8"), ("db28", 10, "x87_10"),
])
def test_ac_class(hexbytes: str, size: int, cls: str) -> None:
    assert ac_class(size, insn(hexbytes)) == cls


def test_ac_class_without_instruction() -> None:
    assert [ac_class(n, None) for n in (2, 8, 10, 16, 32, 64)] == ["gp2", "gp8", "x87_10", "sse16", "vex32", "vex64"]


def _probe_output(rule: dict[str, int], skip: tuple[str, ...] = ()) -> list[str]:
    """What acprobe.c prints for a CPU that checks each class at `rule[class]` (1 = never)."""
    offsets = {"gp2": (0, 1, 2), "gp8": (0, 4, 8), "sse16": (0, 1, 4, 8, 16), "vex32": (0, 1, 8, 16, 32),
               "vex64": (0, 1, 8, 16, 32), "x87_10": (0, 2, 4, 8, 16)}
    lines = []
    for cls, offs in offsets.items():
        for kind in ("load", "store"):
            for off in offs:
                result = "skip" if cls in skip else "ac" if off % rule[cls] else "ok"
                lines.append(f"{cls} {kind} {off} {result}")
    return lines


def test_rules_from_probe_zen3_and_intel() -> None:
    zen3 = rules_from_probe(_probe_output(dict(ZEN3_RULES.checks)), "amd", "src")
    assert {k: zen3.checks[k] for k in ("gp2", "gp8", "sse16", "vex32", "vex64", "x87_10")} == \
        {"gp2": 2, "gp8": 8, "sse16": 16, "vex32": 16, "vex64": 16, "x87_10": 8}
    intel = rules_from_probe(_probe_output(dict(INTEL_RULES.checks)), "intel", "src")
    assert {k: intel.checks[k] for k in ("gp2", "gp8", "sse16", "vex32", "vex64", "x87_10")} == \
        {"gp2": 2, "gp8": 8, "sse16": 1, "vex32": 1, "vex64": 1, "x87_10": 8}
    assert intel.cpu == "intel" and intel.source == "src"
    # a CPU that checked 32-byte operands at 32 is told apart from one checking at 16
    strict = rules_from_probe(_probe_output({**ZEN3_RULES.checks, "vex32": 32}), "x", "src")
    assert strict.checks["vex32"] == 32
    assert AcPolicy(strict).violates(acc(0x1010, 32), insn("c5fe6f00")) is True


def test_rules_from_probe_leaves_out_what_it_could_not_measure() -> None:
    lines = _probe_output(dict(ZEN3_RULES.checks), skip=("vex64",))
    lines = [line.replace("vex32 store 8 ac", "vex32 store 8 gp") for line in lines]  # no rule fits a #GP
    rules = rules_from_probe(lines, "cpu", "src")
    assert "vex64" not in rules.checks and "vex32" not in rules.checks and rules.checks["sse16"] == 16
    # a class the table lacks falls back to the size rule (Zen 3's)
    assert AcPolicy(rules).violates(acc(0x1008, 64), insn("62f1fe486f00")) is True
    # loads and stores that disagree fit no alignment either
    mixed = [line.replace("sse16 store 8 ac", "sse16 store 8 ok") for line in _probe_output(dict(ZEN3_RULES.checks))]
    assert "sse16" not in rules_from_probe(mixed, "cpu", "src").checks


@pytest.mark.parametrize("bad", [["gp2 load x ok"], ["garbage"], []])
def test_rules_from_probe_rejects_bad_output(bad: list[str]) -> None:
    with pytest.raises(ProbeError):
        rules_from_probe(bad, "cpu", "src")


def test_cpu_identity_reads_the_first_cpu() -> None:
    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\n"
            "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 8\nmicrocode\t: 0x1\n\n"
            "processor\t: 1\nvendor_id\t: Other\n")
    cpu = cpu_identity(text)
    assert cpu == {"vendor": "GenuineIntel", "family": "6", "model": "167", "stepping": "8", "microcode": "0x1",
                   "name": "Intel(R) Xeon(R) Processor"}
    assert alignment.cpu_key(cpu) == "GenuineIntel_6_167_8_0x1"


def test_no_compiler_falls_back_to_zen3_with_a_note(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(alignment, "_RULES", None)
    with pytest.raises(ProbeError, match="no C compiler"):
        alignment.measure_ac_rules(tmp_path)
    rules = alignment.ac_rules()
    assert dict(rules.checks) == dict(ZEN3_RULES.checks)
    assert "Zen 3" in rules.source and "no C compiler" in rules.source
    assert alignment.ac_rules() is rules  # once per process
    assert AcPolicy().violates(acc(0x1008, 16), insn("0f1000")) is True


def test_rules_describe_where_they_come_from() -> None:
    rules = rules_from_probe(_probe_output(dict(INTEL_RULES.checks)), "Xeon (GenuineIntel family 6)",
                             "measured on this CPU", "/c/table.json")
    assert rules.describe() == "measured on this CPU (Xeon (GenuineIntel family 6)); table /c/table.json"
    assert ZEN3_RULES.describe() == "built-in rule measured on AMD Zen 3 (PLATFORM.md)"
