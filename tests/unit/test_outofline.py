"""Out-of-line slots: layout, eligibility, and moving a stopped thread back out of a slot."""
from __future__ import annotations

import struct

from ualdbg.engines.outofline import HEAD, JMP_ABS, TAIL, Slot, SlotPool, build, eligible
from ualdbg.isa.decode import decoder_for

PC = 0x555555555190
DEC = decoder_for()


def test_slot_clears_ac_runs_the_copy_sets_ac_and_jumps_back_aligned() -> None:
    insn = DEC.decode(bytes.fromhex("48830001"), PC)  # add qword ptr [rax], 1
    assert insn is not None and eligible(insn)
    for at in (0x1000, 0x1003, 0x1005):
        code = build(insn, at)
        assert code.startswith(HEAD + insn.raw + TAIL)
        jmp = code.index(JMP_ABS, len(HEAD + insn.raw + TAIL))
        target_at = at + jmp + len(JMP_ABS)
        assert target_at % 8 == 0  # read with AC set: must be aligned
        assert struct.unpack("<Q", code[jmp + len(JMP_ABS):])[0] == PC + 4


def test_control_flow_rep_and_rip_relative_take_the_tf_path() -> None:
    for hexcode in ("c3", "e800000000", "f348a5", "488b0500100000"):  # ret, call, rep movsq, mov rax,[rip+x]
        insn = DEC.decode(bytes.fromhex(hexcode), PC)
        assert insn is not None and not eligible(insn), hexcode


def test_unwind_a_thread_stopped_in_a_slot() -> None:
    slot = Slot(start=0x1000, pc=PC, size=4, resume=PC + 4, end=0x1000 + len(HEAD) + 4 + len(TAIL) + 14)
    rsp = 0x7FFF0000
    assert slot.unwind(0x1000, rsp) == (PC, rsp)  # nothing done yet
    assert slot.unwind(0x1000 + 9, rsp - 0x88) == (PC, rsp)  # inside the head, flags pushed
    assert slot.unwind(slot.insn, rsp) == (PC, rsp)  # the copy has not run
    assert slot.unwind(slot.tail, rsp) == (PC + 4, rsp)  # the copy ran
    assert slot.unwind(slot.tail + 16, rsp - 0x88) == (PC + 4, rsp)  # at popfq in the tail
    assert slot.unwind(slot.tail + 25, rsp) == (PC + 4, rsp)


def test_pool_hands_out_one_slot_per_pc_within_its_regions() -> None:
    pool = SlotPool()
    pool.regions = [[0x2000, 0x2000 + 100]]
    pool.spans = [(0x2000, 0x2064)]
    written: list[tuple[int, bytes]] = []
    insn = DEC.decode(bytes.fromhex("48830001"), PC)
    assert insn is not None
    a = pool.slot_for(insn, lambda addr, data: written.append((addr, data)))
    b = pool.slot_for(insn, lambda addr, data: written.append((addr, data)))
    assert a is b and len(written) == 1 and pool.covers(a.start) and pool.locate(a.start + 3) is a
    other = DEC.decode(bytes.fromhex("48830001"), PC + 0x40)
    assert other is not None and pool.slot_for(other, lambda addr, data: None) is None  # region full
