"""32-bit ARM accesses the fix-up performs besides ldrd/ldm/vldr (tests/cross/programs/structs_arm.c):
NEON vld2..vld4/vst2..vst4, one-lane and all-lanes forms and vld1 with their alignment hints,
writeback by `!` and by a register, ldr/str/ldrd/strd whose base moves by a register, and loads
into the PC (ldm, pop, ldr) that branch to ARM or Thumb code. Under qemu-arm 10 a NEON access
traps only when its hint fails (checked at the first address, over the whole transfer), ldm/pop
and ldrd/strd when not word-aligned, a plain ldr (ldr pc too) never: signal mode counts exactly
the program's own `trap=` and performs each, bit-exact (the program compares every misaligned
result with the same instruction run by the CPU on an aligned copy, and its digest equals an
all-aligned run under qemu alone). The step engine's natural policy checks each element at its
size (what SCTLR.A traps) and, with signal mode under it, counts `either=` once per call."""
from __future__ import annotations

import collections
import json
import re
import subprocess
from pathlib import Path

import pytest
from crossrun import require_cross, routine_counts
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.reports import REPORT1

from ualdbg.isa.arch import arch_by_name

SOURCE = Path(__file__).resolve().parent / "programs" / "structs_arm.c"
ROUNDS = 16
# What each form moves per trap (signal mode reports the whole transfer).
SIZES = {"a_ldrd_postreg": 8, "a_strd_prereg": 8, "a_ldrd_preneg": 8, "a_ldm_pc": 8, "a_pop_pc": 8, "t_pop_pc": 8, "t_ldm_pc": 8,
         "a_vld2_16": 16, "a_vld4_8_reg": 32, "a_vst2_32_wb": 32, "a_vld1_lane32_wb": 4, "a_vld1_dup16_reg": 2,
         "a_vld2_lane8": 2, "a_vld2_dup16_wb": 4, "t_vld2_32_reg": 16, "t_vld4_lane8": 4, "t_vld4_dup32_wb": 16,
         "t_vst4_16_reg": 32, "t_vst2_lane16": 4, "t_vst4_lane32_wb": 16, "t_vld1_32_wb": 16}
ARMEL_FORMS = {"a_ldrd_postreg", "a_strd_prereg", "a_ldrd_preneg", "a_ldr_postreg", "a_str_prereg", "a_ldrh_postreg", "a_ldm_pc",
               "a_pop_pc", "a_ldr_pc", "t_pop_pc"}


def build(arch: str, tmp_path: Path) -> Path:
    require_cross(arch)
    exe = tmp_path / f"structs_arm.{arch}"
    build_program(exe, SOURCE, flags=("-g", "-O1", "-Wall", "-static"), compiler=f"{arch_by_name(arch).triplet}-gcc")
    return exe


def own(text: str) -> dict[str, dict[str, int]]:
    found = re.findall(r"^structs_arm: (\w+) trap=(\d+) elem=(\d+) either=(\d+)$", text, re.M)
    return {name: {"trap": int(t), "elem": int(e), "either": int(n)} for name, t, e, n in found}


def digest(text: str) -> str:
    m = re.search(r"^structs_arm: digest=([0-9a-f]+) (\w+)$", text, re.M)
    assert m is not None, text
    return f"{m.group(1)} {m.group(2)}"


def aligned_digest(arch: str, exe: Path, rounds: int) -> str:
    """The same program with every access aligned, under qemu alone: nothing traps."""
    p = subprocess.run([arch_by_name(arch).qemu or "qemu-arm", str(exe), str(rounds), "aligned"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(c["trap"] == c["elem"] == 0 for c in own(p.stdout).values()), p.stdout
    return digest(p.stdout)


@pytest.mark.parametrize("arch", ("armhf", "armel"))
def test_signal_mode_performs_every_form_bit_exact(arch: str, tmp_path: Path) -> None:
    exe = build(arch, tmp_path)
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), str(ROUNDS), timeout=240)
    assert p.returncode == 0, p.explain()
    counts = own(p.stdout)
    assert set(counts) == (ARMEL_FORMS if arch == "armel" else set(counts)) and len(counts) >= len(ARMEL_FORMS), \
        p.explain()
    if arch == "armhf":
        assert len(counts) == 29, p.explain()
        # Each kind of trap occurs: the hint alone (.8 elements), the element too, a lane, all lanes.
        assert counts["a_vld4_8_reg"] == {"trap": 14, "elem": 0, "either": 14}, p.explain()
        assert counts["a_vld3_32_wb"]["trap"] == 0 and counts["a_vld3_32_wb"]["elem"] == 12, p.explain()
    assert digest(p.stdout) == aligned_digest(arch, exe, ROUNDS) and digest(p.stdout).endswith(" ok"), p.explain()
    doc = json.loads(t.read_text())
    assert doc["arch"] == arch and doc["program"]["exit_status"] == 0, p.explain()
    assert routine_counts(doc) == {f: c["trap"] for f, c in counts.items() if c["trap"]}, p.explain()
    for site in doc["sites"]:
        assert site["sizes"] == [SIZES[site["function"]]], site
    assert not re.search(r"not performed", p.stdout + p.stderr), p.explain()


@pytest.mark.parametrize("arch", ("armhf", "armel"))
def test_step_natural_counts_each_misaligned_element_once(arch: str, tmp_path: Path) -> None:
    exe = build(arch, tmp_path)
    names = sorted(ARMEL_FORMS) if arch == "armel" else None
    if names is None:
        probe = subprocess.run([arch_by_name(arch).qemu or "qemu-arm", str(exe), "1", "aligned"], capture_output=True,
                               text=True, timeout=120)
        names = sorted(own(probe.stdout))
    scope = [a for f in names for a in ("--in", f)]
    t = tmp_path / "t.json"
    p = run_cli("trace", "--engine", "step", "--policy", "natural", *scope, "--json", str(t), "--", str(exe),
                str(ROUNDS), timeout=300)
    assert p.returncode == 0, p.explain()
    counts = own(p.stdout)
    assert sorted(counts) == names, p.explain()
    assert digest(p.stdout) == aligned_digest(arch, exe, ROUNDS), p.explain()
    doc = json.loads(t.read_text())
    assert (doc["engine"], doc["step"]["policy"]) == ("step", "natural"), p.explain()
    # The natural policy sees a misaligned element; signal mode under it a failed hint: one
    # record per call either way. ldr_pc's two loads (r4, then the PC) are each misaligned.
    want = {f: c["either"] * (2 if f.endswith("ldr_pc") else 1) for f, c in counts.items() if c["either"]}
    assert routine_counts(doc) == want, p.explain()


def test_break_stops_at_each_neon_and_pc_fault_once_then_performs_it(tmp_path: Path) -> None:
    exe = build("armhf", tmp_path)
    run = run_gdb_multiarch("armhf", [str(exe), "2"], ["ualdbg break", "continue", "x/i $pc",
                                                        *["continue"] * 60, "ualdbg status"], timeout=240)
    counts = own(run.stdout)
    want = sum(c["trap"] for c in counts.values())
    assert want == 33, run.explain()
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == want, run.explain()
    where = collections.Counter(re.findall(r"^  \d+-byte (?:read|write), (\w+)\+0x[0-9a-f]+ in ", run.stdout, re.M))
    assert where == {f: c["trap"] for f, c in counts.items() if c["trap"]}, run.explain()
    # The first stop: round 0's strd (its ldrd is aligned), before it runs.
    assert re.search(r"=> 0x[0-9a-f]+ <a_strd_prereg\+16>:\s+strd\s+r4, (r5, )?\[r0, r2\]!", run.stdout), run.explain()
    assert digest(run.stdout) == aligned_digest("armhf", exe, 2) and run.program_exit == (0, None), run.explain()
    assert "not performed" not in run.stdout, run.explain()


class _Regs:
    """Just enough of a debugger for Performer.perform (engines/perform.py): registers, memory
    at 0x1000, d registers as raw bits."""

    def __init__(self, regs: dict[str, int]) -> None:
        self.regs = {"pc": 0x8000, "cpsr": 0x10, **regs}
        self.mem = bytearray(range(0x40))
        self.d = {f"d{n}": 0x1111111111111111 * (n + 1) for n in range(8)}

    def read_register(self, name: str, tid: int | None = None) -> int:
        return self.regs.get(name, 0)

    def write_registers(self, values: dict[str, int], tid: int | None = None) -> None:
        self.regs.update(values)

    def read_memory(self, addr: int, size: int) -> bytes:
        return bytes(self.mem[addr - 0x1000:addr - 0x1000 + size])

    def write_memory(self, addr: int, data: bytes) -> None:
        self.mem[addr - 0x1000:addr - 0x1000 + len(data)] = data

    def float_bits(self, reg: str, tid: int | None = None) -> int:
        return self.d[reg]

    def set_float_bits(self, reg: str, bits: int, tid: int | None = None) -> None:
        self.d[reg] = bits


def _perform(raw: str, regs: dict[str, int], mode: str = "") -> _Regs:
    from ualdbg.engines.perform import Performer
    from ualdbg.isa.decode import decoder_for
    from ualdbg.isa.insn import transfer

    insn = decoder_for("armhf").decode(bytes.fromhex(raw), 0x8000, mode)
    assert insn is not None and insn.exact
    op = transfer(insn)
    assert op is not None, insn.text
    t = _Regs(regs)
    engine = Performer(arch_by_name("armhf"))
    engine.perform(t, 1, insn, op, engine.address(t, 1, op))  # type: ignore[arg-type]
    return t


def test_forms_qemu_lets_through_are_performed_as_the_arm_arm_says() -> None:
    """What qemu-arm never traps (a plain ldr, ldr pc, a form without its hint) cannot reach
    the fix-up under qemu; a CPU that traps them (or Linux's fix-up) does this."""
    word = int.from_bytes(bytes(range(0x11, 0x15)), "little")
    t = _perform("00f090e5", {"r0": 0x1011})  # ldr pc, [r0]: bit 0 set, to Thumb
    assert (t.regs["pc"], t.regs["cpsr"]) == (word & ~1, 0x30)
    t = _perform("d0f804f0", {"r0": 0x100e, "cpsr": 0x30}, "thumb")  # ldr.w pc, [r0, #4]: bit 0 clear, to ARM
    assert (t.regs["pc"], t.regs["cpsr"]) == (0x15141312, 0x10)
    t = _perform("10bd", {"sp": 0x1009, "cpsr": 0x30}, "thumb")  # pop {r4, pc}
    assert (t.regs["r4"], t.regs["sp"], t.regs["pc"], t.regs["cpsr"]) == (0x0C0B0A09, 0x1011, 0x100F0E0C, 0x30)
    t = _perform("020111e6", {"r1": 0x1003, "r2": 3})  # ldr r0, [r1], -r2, lsl #2
    assert (t.regs["r0"], t.regs["r1"], t.regs["pc"]) == (0x06050403, 0x1003 - 12, 0x8004)
    t = _perform("8200b1e7", {"r1": 0x1001, "r2": 2})  # ldr r0, [r1, r2, lsl #1]!
    assert (t.regs["r0"], t.regs["r1"]) == (0x08070605, 0x1005)
    t = _perform("023021e7", {"r1": 0x1009, "r2": 4, "r3": 0xAABBCCDD})  # str r3, [r1, -r2]!
    assert (t.mem[5:9], t.regs["r1"]) == (bytes.fromhex("ddccbbaa"), 0x1005)
    t = _perform("ad16a0f4", {"r0": 0x1003})  # vld3.16 {d1[2], d3[2], d5[2]}, [r0]!: lane 2 of each
    assert t.d["d1"] == 0x2222_0403_2222_2222 and t.d["d3"] == 0x4444_0605_4444_4444 and t.regs["r0"] == 0x1009
    assert t.d["d5"] == 0x6666_0807_6666_6666 and t.d["d2"] == 0x3333333333333333
    t = _perform("220ca0f4", {"r0": 0x1005, "r2": 0x20})  # vld1.8 {d0[], d1[]}, [r0], r2: every lane
    assert t.d["d0"] == t.d["d1"] == 0x0505050505050505 and t.regs["r0"] == 0x1025
    t = _perform("0f0800f4", {"r0": 0x1001})  # vst2.8 {d0, d1}, [r0]: interleaved
    assert t.mem[1:17] == bytes([0x11, 0x22] * 8)
