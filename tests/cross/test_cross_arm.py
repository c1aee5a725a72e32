"""32-bit ARM under qemu-arm: armhf (ARMv7, Thumb-2, VFP/NEON) and armel (ARMv5TE, ARM state).
ARMv7 lets a plain misaligned ldr/str through but traps ldrd/strd, ldm/stm, vldr/vstr, vldm/vstm,
vld1/vst1 whose alignment hint fails, and ldrex; qemu delivers SIGBUS for those (Linux would fix
the non-exclusive ones up), and signal mode performs each (writeback included, VFP registers
bit-exact) and resumes. Counts are checked against the program's own count of its misaligned
records, from the CLI and from `ualdbg break` typed in gdb-multiarch."""
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

from ualdbg.isa.arch import arch_by_name

PROGRAMS = Path(__file__).resolve().parent / "programs"
ARCHES = ("armhf", "armel")
# forms_arm per round: function -> {size of each trapping access}
FORMS = {"a_ldrd_post": {8}, "a_stm_db": {8}, "a_vldm": {16}, "t_ldm": {12}, "t_strd_pre": {8}, "t_vst1": {16},
         "t_vldr_s": {4}}


def build(arch: str, src: Path, tmp_path: Path) -> Path:
    require_cross(arch)
    exe = tmp_path / f"{src.stem}.{arch}"
    build_program(exe, src, flags=("-g", "-O1", "-Wall", "-static"), compiler=f"{arch_by_name(arch).triplet}-gcc")
    return exe


def pair_expected(own: dict[str, int]) -> dict[str, int]:
    """ARMv7 checks a word for vldr/vstr (armhf's double) and ldrd/strd (int64_t, and armel's
    soft-float double): each traps when the record is not 4-aligned. The 4-byte key is a plain
    ldr/str, which ARMv7 lets through."""
    k = own["key4"]
    return {"put_weight": k, "put_total": k, "get_weight": k, "get_total": k}


def test_every_trapping_form_is_performed_in_arm_and_thumb(tmp_path: Path) -> None:
    exe = build("armhf", PROGRAMS / "forms_arm.c", tmp_path)
    rounds = 10
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), str(rounds), timeout=240)
    assert p.returncode == 0, p.explain()
    assert f"forms_arm: ok rounds={rounds}" in p.stdout.splitlines(), p.explain()
    doc = json.loads(t.read_text())
    assert doc["arch"] == "armhf" and doc["program"]["exit_status"] == 0, p.explain()
    # t_ldm also pushes and pops r4 (aligned: no fault); t_vldr_s is a load and a store.
    assert routine_counts(doc) == {**{f: rounds for f in FORMS}, "t_vldr_s": 2 * rounds}, p.explain()
    sizes: dict[str, set[int]] = collections.defaultdict(set)
    for site in doc["sites"]:
        sizes[site["function"]].update(site["sizes"])
    assert dict(sizes) == FORMS, p.explain()
    # What ARMv7 checks: a word (ldrd, ldm, vldm, vldr) or the :64 hint (vst1), never the size.
    assert all(int(r["va"], 16) % 4 for r in doc["records"] if r["size"] != 16 or r["access"] == "read"), p.explain()


def test_a_misaligned_ldrex_is_reported_then_the_program_gets_its_sigbus(tmp_path: Path) -> None:
    exe = build("armhf", PROGRAMS / "forms_arm.c", tmp_path)
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), "1", "x", timeout=240)
    assert p.returncode == -7 and "forms_arm: ok rounds=1" in p.stdout, p.explain()  # as under qemu alone: ualdbg dies of it too
    doc = json.loads(t.read_text())
    assert doc["program"]["exit_signal"] == 7, p.explain()
    last = [s for s in doc["sites"] if s["function"] == "a_ldrex"]
    assert len(last) == 1 and last[0]["count"] == 1 and last[0]["sizes"] == [4], p.explain()


@pytest.mark.parametrize("arch", ARCHES)
def test_pair_stream_counts_equal_the_programs_own(arch: str, tmp_path: Path) -> None:
    exe = build(arch, EXAMPLES / "pair_stream.c", tmp_path)
    native = tmp_path / "native"
    build_program(native, EXAMPLES / "pair_stream.c", flags=("-O1",))
    want_out = subprocess.run([str(native), "300", "13"], capture_output=True, text=True, check=True).stdout
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), "300", "13", timeout=240)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    assert own["key4"] == 225, p.explain()
    assert want_out.splitlines()[-1] in p.stdout.splitlines(), p.explain()  # values performed right
    doc = json.loads(t.read_text())
    assert doc["arch"] == arch, p.explain()
    assert routine_counts(doc) == pair_expected(own), p.explain()
    src = (EXAMPLES / "pair_stream.c").read_text().splitlines()
    for site in doc["sites"]:  # one site per function, on its statement's line
        assert site["function"] + "(" in src[site["line"] - 2] and "((" in src[site["line"] - 1], site
        assert site["sizes"] == [8], site


@pytest.mark.parametrize("arch", ARCHES)
def test_break_in_gdb_stops_at_each_fault_once(arch: str, tmp_path: Path) -> None:
    exe = build(arch, EXAMPLES / "pair_stream.c", tmp_path)
    run = run_gdb_multiarch(arch, [str(exe), "6", "13"],
                            ["ualdbg break", "continue", "python print('PC-AT-STOP', hex(int(gdb.parse_and_eval('$pc'))))",
                             "x/i $pc", *["continue"] * 24, "ualdbg status"])
    own = own_counts(run.stdout)
    want = sum(pair_expected(own).values())
    assert own["key4"] == 4 and want == 16, run.explain()
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == want, run.explain()
    assert f"PC-AT-STOP {reports[0].group(2)}" in run.stdout, run.explain()
    assert re.search(r"=> 0x[0-9a-f]+ <put_weight>:\s+(vstr\s+d0|strd\s+r2)", run.stdout), run.explain()
    assert int(reports[0].group(1), 16) % 4 == 1, run.explain()  # record 1's weight: stream + 13 + 8
    assert "keys=45 weights=7.5 totals=128849018880" in run.stdout and run.program_exit == (0, None), run.explain()


@pytest.mark.parametrize("arch", ARCHES)
def test_threads_each_fault_counted_in_its_own_thread(arch: str, tmp_path: Path) -> None:
    """examples/threads.c under qemu-arm: of its three workers only worker_b's 8-byte reads
    (ldrd) trap on ARMv7 (a_ and c_'s str and ldrh/strh do not); each of its 2 * rounds
    faults is performed in that thread, none is lost to the others running meanwhile."""
    require_cross(arch)
    exe = tmp_path / f"threads.{arch}"
    build_program(exe, EXAMPLES / "threads.c", flags=("-g", "-O1", "-Wall", "-static", "-pthread"), compiler=f"{arch_by_name(arch).triplet}-gcc")
    rounds = 25
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), str(rounds), timeout=240)
    assert p.returncode == 0, p.explain()
    printed = re.findall(r"^threads: thread (\d) (\w+) p=0x[0-9a-f]+ accesses=(\d+) result=(-?\d+)$", p.stdout, re.M)
    assert [(k, name, int(n)) for k, name, n, _ in printed] == [
        ("1", "worker_a", rounds), ("2", "worker_b", 2 * rounds), ("3", "worker_c", 3 * rounds)], p.explain()
    native = tmp_path / "native"
    build_program(native, EXAMPLES / "threads.c", flags=("-O1", "-pthread"))
    want = re.findall(r"result=(-?\d+)$", subprocess.run([str(native), str(rounds)], capture_output=True, text=True,
                                                          check=True).stdout, re.M)
    assert [r for *_, r in printed] == want, p.explain()  # the values each worker computed: the native program's
    doc = json.loads(t.read_text())
    src = (EXAMPLES / "threads.c").read_text().splitlines()
    line_b = next(i for i, text in enumerate(src) if "sum += (long)v[i % SLOTS]" in text) + 1
    assert [(s["function"], s["line"], s["count"]) for s in doc["sites"]] == [("worker_b", line_b, 2 * rounds)], p.explain()
    tids = {r["tid"] for r in doc["records"]}
    assert len(tids) == 1 and tids != {doc["program"]["pid"]}, p.explain()  # one thread, not main's
