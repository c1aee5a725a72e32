"""SH-4 under qemu-sh4: every form of mov.w/mov.l/fmov.s ualdbg performs, in and out of branch
delay slots (where qemu reports the fault at the slot and keeps its own "in a slot" state: the
fix-up steps once through a `nop`, then sets the PC where the branch goes), from the CLI and
typed in gdb-multiarch. The program checks each performed access against memcpy."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from crossrun import build, require_cross, routine_counts
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.reports import REPORT1

PROGRAMS = Path(__file__).resolve().parent / "programs"
# Per round: ld_rts, ld_bts twice (taken and not), ld_bra, st_jsr (all in delay slots), ld_post
# and st_pre (two each: @r4+ and @-r4), ld_idx, ld_w (slot of rts, 2 bytes), ld_disp.
PER_ROUND = {"ld_rts": 1, "ld_bts": 2, "ld_bra": 1, "st_jsr": 1, "ld_post": 2, "st_pre": 2, "ld_idx": 1,
             "ld_w": 1, "ld_disp": 1}


def build_sh4(tmp_path: Path, name: str) -> Path:
    require_cross("sh4")
    exe = tmp_path / name
    build_program(exe, PROGRAMS / f"{name}.c", flags=("-g", "-O1", "-Wall", "-no-pie"), compiler="sh4-linux-gnu-gcc")
    return exe


def test_every_form_is_performed_in_and_out_of_delay_slots(tmp_path: Path) -> None:
    exe = build_sh4(tmp_path, "forms_sh4")
    rounds = 25
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), str(rounds), timeout=240)
    assert p.returncode == 0, p.explain()
    assert f"forms_sh4: ok rounds={rounds}" in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["arch"] == "sh4" and doc["program"]["exit_status"] == 0
    assert doc["faults_total"] == rounds * sum(PER_ROUND.values()), p.explain()
    assert routine_counts(doc) == {k: v * rounds for k, v in PER_ROUND.items()}, p.explain()
    sizes = {site["function"]: tuple(site["sizes"]) for site in doc["sites"]}
    assert sizes.pop("ld_w") == (2,) and set(sizes.values()) == {(4,)}
    writes = {site["function"] for site in doc["sites"] if site["access"] == "write"}
    assert writes == {"st_jsr", "st_pre"}
    assert all(int(rec["va"], 16) % rec["size"] for rec in doc["records"])


def test_float_moves_in_a_loop_whose_slot_faults(tmp_path: Path) -> None:
    # misaligned_double on SH-4: doubles move as two fmov.s, one in the slot of the loop's bf.s
    # (taken 11 times, not taken once): 6 faults per element, the native sum.
    require_cross("sh4")
    exe = tmp_path / "md_sh4"
    build_program(exe, PROGRAMS / "misaligned_double.c", flags=("-g", "-O1", "-no-pie"), compiler="sh4-linux-gnu-gcc")
    native = tmp_path / "native"
    build_program(native, PROGRAMS / "misaligned_double.c", flags=("-O1",))
    want = subprocess.run([str(native), "12", "1"], capture_output=True, text=True, check=True).stdout.strip()
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), "12", "1", timeout=240)
    assert p.returncode == 0 and want in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["faults_total"] == 6 * 12 and {r["size"] for r in doc["records"]} == {4}, p.explain()


def test_break_and_trace_typed_in_gdb(tmp_path: Path) -> None:
    exe = build_sh4(tmp_path, "forms_sh4")
    run = run_gdb_multiarch("sh4", [str(exe), "1"], ["ualdbg break", *["continue"] * 13, "ualdbg status"])
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == sum(PER_ROUND.values()), run.explain()  # each stop once, slots included
    assert "forms_sh4: ok rounds=1" in run.stdout and run.program_exit == (0, None), run.explain()
    trace = run_gdb_multiarch("sh4", [str(exe), "40"], ["ualdbg trace start", "continue", "ualdbg trace show --summary"],
                              timeout=240)
    assert "forms_sh4: ok rounds=40" in trace.stdout and trace.program_exit == (0, None), trace.explain()
    assert f"{40 * sum(PER_ROUND.values())} in scope" in trace.stdout, trace.explain()
    # The silent stops and steps after slot faults print nothing at the prompt.
    assert "Catchpoint" not in trace.stdout and " in ld_bts ()" not in trace.stdout, trace.explain()


def test_break_then_off_gives_the_programs_setting_back() -> None:
    prog = build("sh4") / "memalign"
    run = run_gdb_multiarch("sh4", [str(prog), "3", "2"], ["ualdbg break", "continue", "ualdbg status", "ualdbg off", "continue"])
    out = run.stdout
    reports = [m for m in map(REPORT1.match, out.splitlines()) if m]
    assert len(reports) == 1 and "memalign.c:31" in out and "instruction: mov.l r1,@r4" in out, run.explain()
    assert "prctl(PR_SET_UNALIGN): armed (the program's own setting: 0x1)" in out, run.explain()
    assert "ualdbg: off; the program's own PR_SET_UNALIGN setting is back" in out, run.explain()
    # after `off` qemu-sh4 fixes the accesses up silently again: the native sum, no more stops
    assert "memalign: count=3 reps=2 sum=18" in out and run.program_exit == (0, None), run.explain()
