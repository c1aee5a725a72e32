"""riscv64 under qemu-riscv64, which performs misaligned loads and stores without a trap (so a
program "works" in CI and traps, or crawls through the kernel's emulation, on a core without
misaligned support): the step engine with the natural policy, compressed instructions included,
counts exactly what the program itself counts as misaligned, from the CLI and from `ualdbg
break` typed in gdb-multiarch."""
from __future__ import annotations

import json
import re
from pathlib import Path

from crossrun import pair_stream_counts as own_counts
from crossrun import require_cross
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.env import EXAMPLES
from support.reports import REPORT1

FUNCS = ("put_key", "put_weight", "put_total", "get_key", "get_weight", "get_total")


def build(tmp_path: Path) -> Path:
    require_cross("riscv64")
    exe = tmp_path / "pair_stream.riscv64"
    build_program(exe, EXAMPLES / "pair_stream.c", flags=("-g", "-O1", "-Wall", "-static"), compiler="riscv64-linux-gnu-gcc")
    return exe


def expected_by_line(own: dict[str, int]) -> dict[int, int]:
    """Each accessor's statement line: RV64 moves each field with one load or store of its size
    (sw/lw, fsd/fld, sd/ld, compressed or not), misaligned as the program counts it."""
    src = (EXAMPLES / "pair_stream.c").read_text().splitlines()
    count = {"key": own["key4"], "weight": own["weight8"], "total": own["total8"]}
    out: dict[int, int] = {}
    for f in FUNCS:
        line = next(i for i, text in enumerate(src) if f" {f}(" in text) + 2
        out[line] = count[f.split("_")[1]]
    return out


def test_step_natural_counts_equal_the_programs_own(tmp_path: Path) -> None:
    exe = build(tmp_path)
    t = tmp_path / "t.json"
    scope = [a for f in FUNCS for a in ("--in", f)]
    p = run_cli("trace", "--engine", "step", *scope, "--json", str(t), "--", str(exe), "200", "13", timeout=300)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    assert (own["key4"], own["weight8"], own["total8"]) == (150, 175, 175), p.explain()
    doc = json.loads(t.read_text())
    assert (doc["arch"], doc["engine"], doc["step"]["policy"]) == ("riscv64", "step", "natural"), p.explain()
    got: dict[int, int] = {}
    for site in doc["sites"]:
        assert Path(site["file"]).name == "pair_stream.c", site
        got[site["line"]] = got.get(site["line"], 0) + site["count"]
    assert got == expected_by_line(own), p.explain()
    assert all(int(r["va"], 16) % r["size"] for r in doc["records"])
    # Without a trap under qemu, signal mode cannot see them: one line saying what to do.
    q = run_cli("trace", "--", str(exe), "3")
    assert q.returncode == 2 and "--engine step" in q.stderr and len(q.stderr.strip().splitlines()) == 1, q.explain()


def test_break_with_the_step_engine_in_gdb(tmp_path: Path) -> None:
    exe = build(tmp_path)
    run = run_gdb_multiarch("riscv64", [str(exe), "6", "13"],
                            ["ualdbg break --engine step --in put_key --in get_weight --policy natural", "continue",
                             "x/i $pc", *["continue"] * 12])
    own = own_counts(run.stdout)
    want = own["key4"] + own["weight8"]
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert want == 9 and len(reports) == want, run.explain()
    assert re.search(r"=> 0x[0-9a-f]+ <put_key>:\s+(c\.)?sw\s+a1,0\(a0\)", run.stdout), run.explain()
    assert "keys=45 weights=7.5 totals=128849018880" in run.stdout and run.program_exit == (0, None), run.explain()
