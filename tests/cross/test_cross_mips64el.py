"""MIPS64 n64 (Debian mips64el) under qemu-mips64el, where every misaligned lh/sh, lw/lwu/sw,
ld/sd, lwc1/swc1 and ldc1/sdc1 traps: signal mode performs each access (64-bit registers, lw
sign-extended and lwu zero-extended, 64-bit FPRs bit-exact) and resumes, in and out of delay
slots as on MIPS32. Counts are checked against the program's own count of its misaligned
records, from the CLI and from `ualdbg break` typed in gdb-multiarch."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from crossrun import pair_stream_counts as own_counts
from crossrun import require_cross, routine_counts
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.env import EXAMPLES
from support.reports import REPORT1

PROGRAMS = Path(__file__).resolve().parent / "programs"
ARCH = "mips64el"
# forms_mips64 per round: ld_beq and ld_bgez twice (taken and not), the copies two each.
PER_ROUND = {"ld_jr": 1, "ld_beq": 2, "ld_bgez": 2, "lw_j": 1, "sd_jalr": 1, "ld_lh": 1, "st_sh": 1, "cp_lwc1": 2,
             "cp_ldc1": 2}
SIZES = {"ld_jr": 8, "ld_beq": 8, "ld_bgez": 4, "lw_j": 4, "sd_jalr": 8, "ld_lh": 2, "st_sh": 2, "cp_lwc1": 4,
         "cp_ldc1": 8}


def build(src: Path, tmp_path: Path) -> Path:
    require_cross(ARCH)
    exe = tmp_path / f"{src.stem}.{ARCH}"
    build_program(exe, src, flags=("-g", "-O1", "-Wall", "-static"), compiler="mips64el-linux-gnuabi64-gcc")
    return exe


def pair_expected(own: dict[str, int]) -> dict[str, int]:
    """n64 moves each field with one access of its size: sw/lw, sdc1/ldc1, sd/ld."""
    return {"put_key": own["key4"], "get_key": own["key4"], "put_weight": own["weight8"],
            "get_weight": own["weight8"], "put_total": own["total8"], "get_total": own["total8"]}


def test_every_form_is_performed_in_and_out_of_delay_slots(tmp_path: Path) -> None:
    exe = build(PROGRAMS / "forms_mips64.c", tmp_path)
    rounds = 12
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), str(rounds), timeout=240)
    assert p.returncode == 0, p.explain()
    assert f"forms_mips64: ok rounds={rounds}" in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["arch"] == ARCH and doc["program"]["exit_status"] == 0, p.explain()
    assert routine_counts(doc) == {k: v * rounds for k, v in PER_ROUND.items()}, p.explain()
    sizes = {site["function"]: set(site["sizes"]) for site in doc["sites"]}
    assert sizes == {f: {n} for f, n in SIZES.items()}, p.explain()
    writes = {s["function"] for s in doc["sites"] if s["access"] == "write"}
    assert writes == {"sd_jalr", "st_sh", "cp_lwc1", "cp_ldc1"}, p.explain()
    assert all(int(rec["va"], 16) % rec["size"] for rec in doc["records"])
    assert all(int(rec["va"], 16) > 0xFFFFFFFF for rec in doc["records"]), p.explain()  # 64-bit addresses


def test_pair_stream_counts_equal_the_programs_own(tmp_path: Path) -> None:
    exe = build(EXAMPLES / "pair_stream.c", tmp_path)
    native = tmp_path / "native"
    build_program(native, EXAMPLES / "pair_stream.c", flags=("-O1",))
    want_out = subprocess.run([str(native), "300", "13"], capture_output=True, text=True, check=True).stdout
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), "300", "13", timeout=240)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    assert (own["key4"], own["weight8"], own["total8"]) == (225, 262, 262), p.explain()
    assert want_out.splitlines()[-1] in p.stdout.splitlines(), p.explain()  # the values ualdbg moved
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["arch"] == ARCH, p.explain()
    assert routine_counts(doc) == pair_expected(own), p.explain()
    src = (EXAMPLES / "pair_stream.c").read_text().splitlines()
    for site in doc["sites"]:  # gcc fills the `jr ra` slot with the access: its statement's line
        assert Path(site["file"]).name == "pair_stream.c", site
        assert site["function"] + "(" in src[site["line"] - 2] and "((" in src[site["line"] - 1], site


def test_break_in_gdb_stops_at_each_fault_once(tmp_path: Path) -> None:
    exe = build(EXAMPLES / "pair_stream.c", tmp_path)
    run = run_gdb_multiarch(ARCH, [str(exe), "6", "13"],
                            ["ualdbg break", "continue", "python print('PC-AT-STOP', hex(int(gdb.parse_and_eval('$pc'))))",
                             "x/i $pc", *["continue"] * 40, "ualdbg status"])
    own = own_counts(run.stdout)
    want = sum(pair_expected(own).values())
    assert (own["key4"], want) == (4, 28), run.explain()
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == want, run.explain()
    assert f"PC-AT-STOP {reports[0].group(2)}" in run.stdout, run.explain()  # AT the slot's instruction
    assert re.search(r"=> 0x[0-9a-f]+ <put_key\+4>:\s+sw\s+a1,0\(a0\)", run.stdout), run.explain()
    assert int(reports[0].group(1), 16) % 4 == 1, run.explain()  # record 1's key, at stream + 13
    assert "keys=45 weights=7.5 totals=128849018880" in run.stdout and run.program_exit == (0, None), run.explain()
