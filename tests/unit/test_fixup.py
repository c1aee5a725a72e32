"""The fix-up engine against a fake SPARC/Alpha target (no debugger, no qemu): decoding the
faulting load/store, recording it once, performing it in the target's byte order, advancing
PC/nPC, stopping AT the instruction when breaking, and arming Alpha's prctl by redirecting a
thread into prctl and back."""
from __future__ import annotations

import pytest

from ualdbg.core.model import AccessKind
from ualdbg.core.target import FloatMover, MemoryWriter, RegisterBatch, SigInfo, SymbolLookup, Target
from ualdbg.engines.faultpath import Decision
from ualdbg.engines.session import Session
from ualdbg.isa.arch import BUS_ADRALN, PR_GET_UNALIGN, PR_SET_UNALIGN, PR_UNALIGN_SIGBUS, SH4, SIGBUS, SIGTRAP, sh4

TEXT = 0x100000
DATA = 0x300000
NO_SIGINFO = SigInfo(SIGBUS, 0, None)  # what qemu's gdb stub gives: the decode decides

# SPARC V9 encodings (checked against GNU as): op=3 | rd<<25 | op3<<19 | rs1<<14 | i<<13 | simm13
def sparc(op3: int, rd: int, rs1: int, simm: int | None = None, rs2: int = 0, asi: int = 0) -> bytes:
    word = 3 << 30 | rd << 25 | op3 << 19 | rs1 << 14
    word |= (1 << 13 | simm & 0x1FFF) if simm is not None else (asi << 5 | rs2)
    return word.to_bytes(4, "big")


G1, O0, O1, O2, O3, I0 = 1, 8, 9, 10, 11, 24


class FakeTarget(Target, MemoryWriter, RegisterBatch, SymbolLookup):
    debugger = "fake"

    def __init__(self, arch: str, insn: bytes, regs: dict[str, int]) -> None:
        self._arch = arch
        self.regs = {"pc": TEXT, "npc": TEXT + 4, **regs}
        self.mem = bytearray(0x100)
        self.code = {TEXT: insn}
        self.writes: list[tuple[int, bytes]] = []
        self.symbols: dict[str, int] = {}

    def pid(self) -> int:
        return 1

    def arch(self) -> str:
        return self._arch

    def current_tid(self) -> int:
        return 7

    def threads(self) -> list[int]:
        return [7]

    def read_register(self, name: str, tid: int | None = None) -> int:
        return self.regs.get(name, 0)

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        self.regs[name] = value

    def write_registers(self, values: dict[str, int], tid: int | None = None) -> None:
        self.regs.update(values)

    def read_memory(self, addr: int, size: int) -> bytes:
        if addr in self.code:
            return self.code[addr][:size]
        return bytes(self.mem[addr - DATA:addr - DATA + size])

    def write_memory(self, addr: int, data: bytes) -> None:
        self.writes.append((addr, data))
        self.mem[addr - DATA:addr - DATA + len(data)] = data

    def siginfo(self) -> SigInfo | None:
        return None

    def maps_text(self) -> str | None:
        return None

    # SymbolLookup, for prctl's arming; no InferiorCalls: the engine redirects the thread
    def symbol_address(self, name: str) -> int | None:
        return self.symbols.get(name)


class FloatMovingTarget(FakeTarget, FloatMover):
    """A FloatMover (as gdb is): the debugger copies float registers to and from memory."""

    def __init__(self, arch: str, insn: bytes, regs: dict[str, int]) -> None:
        super().__init__(arch, insn, regs)
        self.moves: list[tuple[str, int, int, bool]] = []

    def move_float(self, reg: str, addr: int, size: int, store: bool, tid: int | None = None) -> None:
        self.moves.append((reg, addr, size, store))


def tracing(target: FakeTarget) -> Session:
    s = Session("fake")
    s.mode.tracing = True
    s.lifecycle.arm_now(target)
    return s


def test_sparc_ldx_loads_big_endian_and_advances_pc_and_npc() -> None:
    t = FakeTarget("sparc:v9a", sparc(0x0B, G1, O0, rs2=O1), {"o0": DATA, "o1": 1})
    t.mem[1:9] = bytes.fromhex("0102030405060708")
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert t.regs["g1"] == 0x0102030405060708
    assert (t.regs["pc"], t.regs["npc"]) == (TEXT + 4, TEXT + 8)
    f = s.buffer.records[-1]
    assert (f.va, f.size, f.access, f.insn) == (DATA + 1, 8, AccessKind.READ, "ldx [%o0 + %o1], %g1")
    assert s.buffer.total == 1 and s.engine.arch is not None and s.engine.arch.name == "sparc64"


def test_sparc_store_in_a_delay_slot_goes_to_npc() -> None:
    # stw %g1, [%i0 + 2]: the instruction sits in a branch's delay slot, nPC is the target.
    t = FakeTarget("sparc:v9a", sparc(0x04, G1, I0, simm=2), {"i0": DATA, "g1": 0xFFFFFFFF_AABBCCDD})
    t.regs["npc"] = TEXT + 0x40
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert t.writes == [(DATA + 2, bytes.fromhex("aabbccdd"))]
    assert (t.regs["pc"], t.regs["npc"]) == (TEXT + 0x40, TEXT + 0x44)
    assert s.buffer.records[-1].access is AccessKind.WRITE


def test_sparc_signed_halfword_negative_displacement_and_pairs() -> None:
    t = FakeTarget("sparc:v9a", sparc(0x0A, O1, O0, simm=-1), {"o0": DATA + 4})  # ldsh [%o0 - 1], %o1
    t.mem[3:5] = b"\xff\xfe"
    s = tracing(t)
    s.stops.fault(t, NO_SIGINFO)
    assert t.regs["o1"] == (-2) & (1 << 64) - 1
    # ldd [%o0], %o2: two 32-bit words into %o2 (high) and %o3
    t2 = FakeTarget("sparc:v9a", sparc(0x03, O2, O0, simm=0), {"o0": DATA + 4})
    t2.mem[4:12] = bytes.fromhex("1122334455667788")
    s2 = tracing(t2)
    assert s2.stops.fault(t2, NO_SIGINFO) is Decision.RESUME
    assert (t2.regs["o2"], t2.regs["o3"]) == (0x11223344, 0x55667788)
    assert s2.buffer.records[-1].size == 8


def test_sparc_cas_compares_and_swaps_atomically_for_the_program() -> None:
    # casa [%o0] 0x80, %o1, %o2: memory == %o1 -> memory = %o2; %o2 = old memory
    t = FakeTarget("sparc:v9a", sparc(0x3C, O2, O0, rs2=O1, asi=0x80), {"o0": DATA + 2, "o1": 5, "o2": 9})
    t.mem[2:6] = (5).to_bytes(4, "big")
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert bytes(t.mem[2:6]) == (9).to_bytes(4, "big") and t.regs["o2"] == 5
    assert s.buffer.records[-1].access is AccessKind.READ_WRITE


def test_aligned_or_unknown_or_other_signals_are_not_ours() -> None:
    t = FakeTarget("sparc:v9a", sparc(0x0B, G1, O0, simm=0), {"o0": DATA + 8})  # aligned ldx
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.NOT_OURS
    assert s.stops.fault(t, SigInfo(SIGTRAP, 0, None)) is Decision.NOT_OURS
    t.code[TEXT] = bytes.fromhex("81c3e008")  # retl: no memory access
    assert s.stops.fault(t, NO_SIGINFO) is Decision.NOT_OURS
    assert s.buffer.total == 0 and t.regs["pc"] == TEXT


def test_float_registers_are_recorded_then_left_to_the_program() -> None:
    t = FakeTarget("sparc:v9a", sparc(0x23, 2, O0, simm=0), {"o0": DATA + 4})  # lddf [%o0], %f2
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.NOT_OURS
    assert s.buffer.total == 1 and t.regs["pc"] == TEXT
    assert s.engine.fixup is not None and "floating-point" in s.engine.fixup.not_emulated[TEXT]


def test_break_stops_at_the_instruction_then_performs_it_once() -> None:
    t = FakeTarget("sparc:v9a", sparc(0x00, O1, O0, simm=0), {"o0": DATA + 1})  # lduw [%o0], %o1
    t.mem[1:5] = bytes.fromhex("deadbeef")
    s = Session("fake")
    s.mode.breaking = True
    s.lifecycle.arm_now(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.STOP
    assert t.regs["pc"] == TEXT and "o1" not in t.regs  # stopped AT it, not performed
    # the user's `continue` re-executes it: the same trap again, performed, not counted twice
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert t.regs["o1"] == 0xDEADBEEF and t.regs["pc"] == TEXT + 4 and s.buffer.total == 1


def alpha(op: int, ra: int, rb: int, disp: int) -> bytes:
    return (op << 26 | ra << 21 | rb << 16 | disp & 0xFFFF).to_bytes(4, "little")


def test_alpha_ldl_sign_extends_little_endian_and_pc_plus_4() -> None:
    t = FakeTarget("alpha:ev4", alpha(0x28, 1, 16, -3), {"a0": DATA + 4})  # ldl t0, -3(a0)
    del t.regs["npc"]
    t.mem[1:5] = (0x80000001).to_bytes(4, "little")
    s = Session("fake")  # not armed through prctl here: that is the next test
    s.mode.tracing = True
    assert s.stops.fault(t, SigInfo(SIGBUS, BUS_ADRALN, DATA + 1)) is Decision.RESUME
    assert t.regs["t0"] == 0xFFFFFFFF80000001 and t.regs["pc"] == TEXT + 4
    f = s.buffer.records[-1]
    assert (f.va, f.size, f.insn) == (DATA + 1, 4, "ldl t0, -3(a0)")


def test_alpha_arms_prctl_by_redirecting_the_thread_and_restores_it() -> None:
    """At the arm point (no inferior calls there): the thread goes into prctl with its return
    address at the arm point; each return brings it back there, the registers come back."""
    prctl, main = 0x4000100000, TEXT
    t = FakeTarget("alpha:ev4", b"", {"sp": DATA + 0x80, "a0": 3, "a1": 0x999, "ra": 0x1234, "t12": main})
    del t.regs["npc"]
    t.symbols["prctl"] = prctl
    before = dict(t.regs)
    s = Session("fake")
    s.mode.tracing = True
    s.lifecycle.arm_now(t)  # first call: PR_GET_UNALIGN into a stack slot
    fix = s.engine.fixup
    assert fix is not None
    assert (t.regs["pc"], t.regs["t12"], t.regs["ra"], t.regs["a0"]) == (prctl, prctl, main, PR_GET_UNALIGN)
    scratch = t.regs["a1"]
    assert scratch < before["sp"] and t.regs["sp"] < scratch
    t.mem[scratch - DATA:scratch - DATA + 4] = (1).to_bytes(4, "little")  # the kernel writes NOPRINT
    t.regs.update(pc=main, v0=0)
    s.lifecycle.arm_now(t)  # back at main: second call, PR_SET_UNALIGN SIGBUS
    assert (t.regs["pc"], t.regs["a0"], t.regs["a1"]) == (prctl, PR_SET_UNALIGN, PR_UNALIGN_SIGBUS)
    t.regs.update(pc=main, v0=0)
    s.lifecycle.arm_now(t)
    assert fix.prctl is not None and fix.prctl.state == "armed" and fix.prctl.saved_unalign == 1
    assert {k: t.regs[k] for k in before} == before


def test_alpha_without_prctl_says_so() -> None:
    t = FakeTarget("alpha:ev4", b"", {"sp": DATA + 0x80})
    s = Session("fake")
    s.mode.tracing = True
    with pytest.raises(RuntimeError, match="no `prctl`"):
        s.lifecycle.arm_now(t)


def test_arm64_ldar_is_performed_ldxr_is_left_to_the_program() -> None:
    ldar = (0xC8DFFC03).to_bytes(4, "little")  # ldar x3, [x0]
    t = FakeTarget("aarch64", ldar, {"x0": DATA + 3})
    del t.regs["npc"]
    t.mem[3:11] = (0x1122334455667788).to_bytes(8, "little")
    s = Session("fake")
    s.mode.tracing = True
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert t.regs["x3"] == 0x1122334455667788 and t.regs["pc"] == TEXT + 4
    t.code[TEXT + 4] = (0xC85F7C00).to_bytes(4, "little")  # ldxr x0, [x0]
    assert s.stops.fault(t, NO_SIGINFO) is Decision.NOT_OURS  # recorded, not performed
    assert s.buffer.total == 2 and t.regs["pc"] == TEXT + 4
    assert s.engine.fixup is not None and "exclusive monitor" in s.engine.fixup.not_emulated[TEXT + 4]
    t.code[TEXT + 4] = (0xF9400000).to_bytes(4, "little")  # ldr x0, [x0]: never traps on arm64
    assert s.stops.fault(t, NO_SIGINFO) is Decision.NOT_OURS and s.buffer.total == 2


def test_sparc_lddf_goes_through_the_debuggers_float_move() -> None:
    # ldd [%g1], %f8 (lddf rd=8): the pair f8:f9 is gdb's d8; performed by the target's move_float
    t = FloatMovingTarget("sparc:v9a", sparc(0x23, 8, G1, simm=0), {"g1": DATA + 1})
    moves = t.moves
    s = tracing(t)
    assert s.stops.fault(t, NO_SIGINFO) is Decision.RESUME
    assert moves == [("d8", DATA + 1, 8, False)] and t.regs["pc"] == TEXT + 4
    t.code[TEXT + 4] = sparc(0x27, 1, G1, simm=8)  # std %f32, [%g1 + 8]
    s.stops.fault(t, NO_SIGINFO)
    assert moves[-1] == ("f32", DATA + 9, 8, True)


# PA-RISC 1.1 words as GNU as (hppa-linux-gnu-as 2.40) assembles them; None: not decoded
# (bytes cannot be misaligned; ,ma/,mb/ldwm update the base register).
HPPA_WORDS = [
    (0x0F48109C, "ldw 4(r26),ret0", 4, ("r26",), 4),
    (0x0FD11093, "ldw -8(sp),r19", 4, ("sp",), -8),
    (0x0F591280, "stw r25,0(r26)", 4, ("r26",), 0),
    (0x0E93125D, "sth r19,-2(r20)", 2, ("r20",), -2),
    (0x0C6C1044, "ldh 6(r3),r4", 2, ("r3",), 6),
    (0x0ED50097, "ldw r21(r22),r23", 4, ("r22", "r21"), 0),
    (0x0ED52097, "ldw,s r21(r22),r23", 4, ("r22", "r21", "r21", "r21", "r21"), 0),
    (0x4B5C00C8, "ldw 100(r26),ret0", 4, ("r26",), 100),
    (0x6A933E71, "stw r19,-200(r20)", 4, ("r20",), -200),
    (0x446407D0, "ldh 1000(r3),r4", 2, ("r3",), 1000),
    (0x27401044, "fldw 0(r26),fr4R", 4, ("r26",), 0),
    (0x27501245, "fstw fr5R,8(r26)", 4, ("r26",), 8),
    (0x2F501006, "fldd 8(r26),fr6", 8, ("r26",), 8),
    (0x27481004, "fldw 4(r26),fr4", 4, ("r26",), 4),
    (0x27430004, "fldw r3(r26),fr4", 4, ("r26", "r3"), 0),
    (0x2F501026, None, 0, (), 0),  # fldd,ma
    (0x0F4810BC, None, 0, (), 0),
    (0x0F42101C, None, 0, (), 0),
    (0x4FC30080, None, 0, (), 0),
]


@pytest.mark.parametrize(("word", "text", "size", "addr", "disp"), HPPA_WORDS)
def test_hppa_decodes_the_loads_and_stores_that_can_be_misaligned(word: int, text: str | None, size: int,
                                                                  addr: tuple[str, ...], disp: int) -> None:
    from ualdbg.isa.arch import hppa

    insn = hppa.decode(word)
    if text is None:
        assert insn is None
        return
    assert insn is not None and len(insn.operands) == 1
    op = insn.operands[0]
    # the registers summed into the address: the base, and the index `scale` times
    summed = (op.base,) + ((op.index,) * op.scale if op.index is not None else ())
    assert (insn.text, op.size, summed, op.disp, op.endian) == (text, size, addr, disp, "")


def hppa_target(insn: int, regs: dict[str, int], kind: type[FakeTarget] = FakeTarget) -> FakeTarget:
    """gdb's `pc` on PA-RISC is the PC queue's head without its privilege bits (3 in user mode);
    only pcoqh/pcoqt can be written."""
    t = kind("hppa1.1", insn.to_bytes(4, "big"), {"pcoqh": TEXT | 3, "pcoqt": (TEXT + 4) | 3, **regs})
    del t.regs["npc"]
    t.mem = bytearray(0x1000)
    return t


def test_hppa_ldw_in_a_delay_slot_loads_big_endian_and_moves_the_pc_queue() -> None:
    t = hppa_target(0x0F48109C, {"r26": DATA + 1, "pcoqt": 0x2000 | 3})  # ldw 4(r26),ret0; next: 0x2000
    t.mem[5:9] = (0x80000001).to_bytes(4, "big")
    s = Session("fake")  # not armed through prctl here: the redirect test below does that
    s.mode.tracing = True
    assert s.stops.fault(t, SigInfo(SIGBUS, BUS_ADRALN, DATA + 5)) is Decision.RESUME
    assert t.regs["ret0"] == 0x80000001  # PA-RISC loads zero-extend
    assert (t.regs["pcoqh"], t.regs["pcoqt"]) == (0x2003, 0x2007)
    f = s.buffer.records[-1]
    assert (f.va, f.size, f.insn) == (DATA + 5, 4, "ldw 4(r26),ret0")


def test_hppa_sth_writes_big_endian() -> None:
    t = hppa_target(0x0E93125D, {"r20": DATA + 5, "r19": 0x12345678})  # sth r19,-2(r20)
    s = Session("fake")  # not armed through prctl here: the redirect test below does that
    s.mode.tracing = True
    assert s.stops.fault(t, SigInfo(SIGBUS, BUS_ADRALN, DATA + 3)) is Decision.RESUME
    assert t.writes == [(DATA + 3, b"\x56\x78")]
    assert (t.regs["pcoqh"], t.regs["pcoqt"]) == ((TEXT + 4) | 3, (TEXT + 8) | 3)


def test_hppa_redirect_into_prctl_uses_the_stack_above_sp_and_the_pc_queue() -> None:
    """PA-RISC's stack grows up: the live frames are below sp, the free space above it."""
    prctl = 0x40100000
    t = hppa_target(0, {"sp": DATA + 0x40, "r26": 3, "r25": 0x999, "rp": 0x1234})
    t.symbols["prctl"] = prctl
    before = dict(t.regs)
    s = Session("fake")
    s.mode.tracing = True
    s.lifecycle.arm_now(t)
    assert (t.regs["pcoqh"], t.regs["pcoqt"]) == (prctl | 3, (prctl + 4) | 3)
    assert t.regs["rp"] == TEXT | 3 and t.regs["r26"] == PR_GET_UNALIGN
    scratch = t.regs["r25"]
    assert before["sp"] < scratch < t.regs["sp"] and t.regs["sp"] % 64 == 0
    t.mem[scratch - DATA:scratch - DATA + 4] = (1).to_bytes(4, "big")
    t.regs.update(pc=TEXT, pcoqh=TEXT | 3, ret0=0)
    s.lifecycle.arm_now(t)
    assert (t.regs["r26"], t.regs["r25"]) == (PR_SET_UNALIGN, PR_UNALIGN_SIGBUS)
    t.regs.update(pc=TEXT, pcoqh=TEXT | 3, ret0=0)
    s.lifecycle.arm_now(t)
    fix = s.engine.fixup
    assert fix is not None and fix.prctl is not None and fix.prctl.state == "armed" and fix.prctl.saved_unalign == 1
    assert {k: t.regs[k] for k in before} == before


def test_hppa_fldd_moves_both_halves_as_floats() -> None:
    """gdb holds PA-RISC's double fr6 as two 32-bit registers, fr6 (the high word, first in
    memory) and fr6R: each is copied as one C float."""
    t = hppa_target(0x2F501006, {"r26": DATA + 1}, FloatMovingTarget)  # fldd 8(r26),fr6
    assert isinstance(t, FloatMovingTarget)
    moves = t.moves
    s = Session("fake")
    s.mode.tracing = True
    assert s.stops.fault(t, SigInfo(SIGBUS, BUS_ADRALN, DATA + 9)) is Decision.RESUME
    assert moves == [("fr6", DATA + 9, 4, False), ("fr6R", DATA + 13, 4, False)]
    assert (t.regs["pcoqh"], t.regs["pcoqt"]) == ((TEXT + 4) | 3, (TEXT + 8) | 3)
    f = s.buffer.records[-1]
    assert (f.va, f.size, f.insn) == (DATA + 9, 8, "fldd 8(r26),fr6")


# -- SH-4 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("word, text, size, kind, disp, update", [
    (0x6042, "mov.l @r4,r0", 4, "load", 0, 0),
    (0x6146, "mov.l @r4+,r1", 4, "load", 0, 4),
    (0x2146, "mov.l r4,@-r1", 4, "store", -4, -4),
    (0x2141, "mov.w r4,@r1", 2, "store", 0, 0),
    (0x04DE, "mov.l @(r0,r13),r4", 4, "load", 0, 0),
    (0x1F23, "mov.l r2,@(12,r15)", 4, "store", 12, 0),
    (0x8513, "mov.w @(6,r1),r0", 2, "load", 6, 0),
    (0xC605, "mov.l @(20,gbr),r0", 4, "load", 20, 0),
    (0xF41B, "fmov.s fr1,@-r4", 4, "store", -4, -4),
])
def test_sh4_decodes_the_moves_that_can_be_misaligned(word: int, text: str, size: int, kind: str, disp: int,
                                                      update: int) -> None:
    m = sh4.decode(word)
    assert m is not None and len(m.operands) == 1
    op = m.operands[0]
    access = AccessKind.READ if kind == "load" else AccessKind.WRITE
    assert (m.text, op.size, op.kind, op.disp, op.writeback) == (text, size, access, disp, update)


def test_sh4_leaves_bytes_pc_relative_loads_and_branches_alone() -> None:
    # mov.b (cannot be misaligned), mov.l @(disp,PC) (aligned by construction), rts, nop
    assert [sh4.decode(w) for w in (0x6040, 0xD104, 0x000B, 0x0009)] == [None] * 4


def test_sh4_delayed_branches_and_where_they_go() -> None:
    regs = {"sr": 1, "pr": 0x1000, "r1": 0x40}
    read = regs.__getitem__
    at = 0x400600
    assert all(sh4.is_delayed_branch(w) for w in (0x000B, 0xA001, 0xB001, 0x8D01, 0x8F01, 0x0123, 0x0103, 0x412B, 0x410B))
    assert not any(sh4.is_delayed_branch(w) for w in (0x8901, 0x8B01, 0x0009, 0x6042))  # bt/bf have no slot
    assert sh4.branch_continuation(0x000B, at, read) == 0x1000  # rts
    assert sh4.branch_continuation(0xAFFE, at, read) == at  # bra .-0: pc + 4 - 4
    assert sh4.branch_continuation(0x8D02, at, read) == at + 8  # bt/s, T set: taken
    assert sh4.branch_continuation(0x8F02, at, read) == at + 4  # bf/s, T set: falls through past the slot
    assert sh4.branch_continuation(0x0123, at, read) == at + 4 + 0x40  # braf r1
    assert sh4.branch_continuation(0x412B, at, read) == 0x40  # jmp @r1


class _Regs(MemoryWriter, RegisterBatch):
    """Registers and memory of a fake little-endian SH target."""

    def __init__(self, regs: dict[str, int], mem: dict[int, int]) -> None:
        self.regs, self.mem = regs, mem

    def read_register(self, name: str, tid: int | None = None) -> int:
        return self.regs[name]

    def read_memory(self, addr: int, size: int) -> bytes:
        return bytes(self.mem.get(addr + k, 0) for k in range(size))

    def write_memory(self, addr: int, data: bytes) -> None:
        for k, b in enumerate(data):
            self.mem[addr + k] = b

    def write_registers(self, regs: dict[str, int], tid: int | None = None) -> None:
        self.regs.update(regs)


def test_sh4_post_increment_moves_the_base_unless_it_is_the_destination() -> None:
    from ualdbg.engines.perform import Performer

    eng = Performer(SH4)
    mem = {0x1001 + k: b for k, b in enumerate((0x80, 0xFF, 0x00, 0x00))}
    t = _Regs({"r4": 0x1001, "r1": 0, "pc": 0x400000}, dict(mem))
    insn = sh4.decode(0x6145)  # mov.w @r4+,r1: sign-extended, r4 += 2
    assert insn is not None
    eng.perform(t, 1, insn, insn.operands[0], 0x1001)  # type: ignore[arg-type]
    assert t.regs == {"r4": 0x1003, "r1": 0xFFFFFF80, "pc": 0x400002}
    t = _Regs({"r4": 0x1001, "pc": 0x400000}, dict(mem))
    insn = sh4.decode(0x6446)  # mov.l @r4+,r4: the loaded value wins
    assert insn is not None
    eng.perform(t, 1, insn, insn.operands[0], 0x1001)  # type: ignore[arg-type]
    assert t.regs == {"r4": 0x0000FF80, "pc": 0x400002}
