"""MIPS32 under qemu-mips and qemu-mipsel, where every misaligned lh/lhu/sh, lw/sw, lwc1/swc1 and
ldc1/sdc1 traps: signal mode performs each access (in either byte order, floats bit-exact) and
resumes, in and out of the delay slots of every kind of branch (qemu reports a fault in a slot
at the slot and stays "in the slot": ualdbg steps once through a `nop`, stopping also where a
taken branch goes, since gdb steps MIPS in software). Counts are checked against the program's
own count of its misaligned records, from the CLI and from `ualdbg break` typed in gdb-multiarch."""
from __future__ import annotations

import collections
import json
import re
import subprocess
from pathlib import Path

import pytest
from crossrun import pair_stream_counts as own_counts
from crossrun import require_cross, routine_counts
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.env import EXAMPLES
from support.reports import REPORT1

PROGRAMS = Path(__file__).resolve().parent / "programs"
ARCHES = ("mips", "mipsel")
# forms_mips per round: ld_beq and ld_bgez twice (taken and not), ld_beql once (its slot is
# annulled when not taken), the copies two each (a load and a store).
PER_ROUND = {"ld_jr": 1, "ld_beq": 2, "ld_beql": 1, "ld_bgez": 2, "ld_j": 1, "st_jalr": 1, "ld_lhu": 1,
             "st_sh": 1, "cp_lwc1": 2, "cp_ldc1": 2}


def build(arch: str, src: Path, tmp_path: Path) -> Path:
    require_cross(arch)
    exe = tmp_path / f"{src.stem}.{arch}"
    build_program(exe, src, flags=("-g", "-O1", "-Wall", "-static"), compiler=f"{arch}-linux-gnu-gcc")
    return exe


def pair_expected(own: dict[str, int]) -> dict[str, int]:
    """Per function (each one statement) on o32 MIPS: a 4-byte key is one lw/sw, an int64_t two
    (at +16 and +20: misaligned with the key), a double argument arrives in a2/a3 and is stored
    as two sw, a double result is loaded by one ldc1 (misaligned when not 8-aligned)."""
    k = own["key4"]
    return {"put_key": k, "put_weight": 2 * k, "put_total": 2 * k, "get_key": k, "get_weight": own["weight8"],
            "get_total": 2 * k}


@pytest.mark.parametrize("arch", ARCHES)
def test_every_form_is_performed_in_and_out_of_delay_slots(arch: str, tmp_path: Path) -> None:
    exe = build(arch, PROGRAMS / "forms_mips.c", tmp_path)
    rounds = 12
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), str(rounds), timeout=240)
    assert p.returncode == 0, p.explain()
    assert f"forms_mips: ok rounds={rounds}" in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["arch"] == arch and doc["program"]["exit_status"] == 0, p.explain()
    assert routine_counts(doc) == {k: v * rounds for k, v in PER_ROUND.items()}, p.explain()
    assert doc["faults_total"] == rounds * sum(PER_ROUND.values())
    sizes = {site["function"]: set() for site in doc["sites"]}
    for site in doc["sites"]:
        sizes[site["function"]].update(site["sizes"])
    assert sizes == {**{f: {4} for f in PER_ROUND}, "ld_j": {2}, "ld_lhu": {2}, "st_sh": {2}, "cp_ldc1": {8}}
    writes = {(s["function"], s["access"]) for s in doc["sites"] if s["access"] != "read"}
    assert writes == {("st_jalr", "write"), ("st_sh", "write"), ("cp_lwc1", "write"), ("cp_ldc1", "write")}
    assert all(int(rec["va"], 16) % rec["size"] for rec in doc["records"])


@pytest.mark.parametrize("arch", ARCHES)
def test_pair_stream_counts_equal_the_programs_own(arch: str, tmp_path: Path) -> None:
    exe = build(arch, EXAMPLES / "pair_stream.c", tmp_path)
    native = tmp_path / "native"
    build_program(native, EXAMPLES / "pair_stream.c", flags=("-O1",))
    want_out = subprocess.run([str(native), "300", "13"], capture_output=True, text=True, check=True).stdout
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), "300", "13", timeout=240)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    assert own["key4"] == 225 and own["weight8"] == 262  # 13 is odd: 3 in 4 and 7 in 8 records
    # The sums come from the values ualdbg stored and loaded: the native program's.
    assert want_out.splitlines()[-1] in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert routine_counts(doc) == pair_expected(own), p.explain()
    # Every site is on a line of its function (its statement, or the closing brace that gcc
    # gives the delay slot of its `jr ra`).
    src = (EXAMPLES / "pair_stream.c").read_text().splitlines()
    for site in doc["sites"]:
        assert Path(site["file"]).name == "pair_stream.c", site
        first = next(i for i, line in enumerate(src) if f" {site['function']}(" in line) + 1
        assert first < site["line"] <= first + 2 and src[first + 1] == "}", site
    by_line = collections.Counter[int]()
    for site in doc["sites"]:
        by_line[site["line"]] += site["count"]
    get_weight_line = 1 + next(i for i, line in enumerate(src) if "->weight;" in line)
    assert by_line[get_weight_line] == own["weight8"], p.explain()
    get_key_line = 1 + next(i for i, line in enumerate(src) if "->key;" in line)
    assert by_line[get_key_line] == own["key4"], p.explain()


@pytest.mark.parametrize("arch", ARCHES)
def test_break_in_gdb_stops_at_each_fault_once(arch: str, tmp_path: Path) -> None:
    exe = build(arch, EXAMPLES / "pair_stream.c", tmp_path)
    # 6 records at stride 13: offsets 0, 13, 26, 39, 52, 65
    run = run_gdb_multiarch(arch, [str(exe), "6", "13"],
                            ["ualdbg break", "continue", "python print('PC-AT-STOP', hex(int(gdb.parse_and_eval('$pc'))))",
                             "x/i $pc", *["continue"] * 60, "ualdbg status"])
    own = own_counts(run.stdout)
    want = sum(pair_expected(own).values())
    assert own["key4"] == 4 and want > 30, run.explain()
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == want, run.explain()
    assert f"PC-AT-STOP {reports[0].group(2)}" in run.stdout, run.explain()  # AT the instruction
    assert re.search(r"=> 0x[0-9a-f]+ <put_key\+4>:\s+sw\s+a1,0\(a0\)", run.stdout), run.explain()
    # The first fault is record 1's key, at stream + 13.
    assert int(reports[0].group(1), 16) % 4 == 1, run.explain()
    assert "keys=45 weights=7.5 totals=128849018880" in run.stdout and run.program_exit == (0, None), run.explain()


@pytest.mark.parametrize("arch", ARCHES)
def test_trace_typed_in_gdb_counts_slots_once_and_silently(arch: str, tmp_path: Path) -> None:
    exe = build(arch, PROGRAMS / "forms_mips.c", tmp_path)
    run = run_gdb_multiarch(arch, [str(exe), "20"], ["ualdbg trace start", "continue", "ualdbg trace show --summary"],
                            timeout=240)
    assert "forms_mips: ok rounds=20" in run.stdout and run.program_exit == (0, None), run.explain()
    assert f"{20 * sum(PER_ROUND.values())} in scope" in run.stdout, run.explain()
    assert "Program received signal" not in run.stdout, run.explain()
