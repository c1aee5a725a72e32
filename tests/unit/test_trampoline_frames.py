"""agent/trampoline.py: how far a trampoline's straight-line code moved rsp since the last
position patch.c's context table describes (a Ctrl-C lands anywhere: tests/gdb's
test_interrupt_in_patched_code runs the whole unwinder on a real patched program)."""
from __future__ import annotations

from ualdbg.agent.trampoline import pushed_since

PUSH_RAX, PUSH_RCX, PUSHFQ, POPFQ = b"\x50", b"\x51", b"\x9c", b"\x9d"
LEA_RSP_PLUS_8 = bytes.fromhex("488d642408")  # lea rsp, [rsp + 8]
LEA_RSP_MINUS_128 = bytes.fromhex("488d642480")  # lea rsp, [rsp - 0x80]
TEST_RSP = bytes.fromhex("f644240204")  # test byte ptr [rsp + 2], 4
MOV_RSP_RBP = bytes.fromhex("4889ec")  # mov rsp, rbp


def test_pushes_pops_and_lea_are_counted() -> None:
    assert pushed_since(PUSH_RAX + PUSH_RCX, 0x1000) == 16
    assert pushed_since(PUSHFQ + TEST_RSP, 0x1000) == 8
    assert pushed_since(PUSHFQ + TEST_RSP + LEA_RSP_PLUS_8, 0x1000) == 0
    assert pushed_since(LEA_RSP_MINUS_128 + PUSH_RAX, 0x1000) == 136
    assert pushed_since(PUSHFQ + POPFQ, 0x1000) == 0
    assert pushed_since(b"", 0x1000) == 0


def test_any_other_write_of_rsp_gives_up() -> None:
    assert pushed_since(PUSH_RAX + MOV_RSP_RBP, 0x1000) is None
