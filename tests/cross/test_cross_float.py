"""Floating-point loads and stores (SPARC lddf/stdf, Alpha ldt/stt, PA-RISC fldd/fstd) on misaligned doubles:
caught, reported with their size and direction, and performed bit-exactly by the debugger, so
the program's sum equals the native x86-64 program's."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from crossrun import require_cross
from support.build import build_program
from support.cli import run_cli

from ualdbg.isa.arch import arch_by_name

SRC = Path(__file__).resolve().parent / "programs" / "misaligned_double.c"
N = 12


def native(tmp_path: Path, offset: str) -> str:
    exe = tmp_path / "native"
    build_program(exe, SRC, flags=("-O1",))
    return subprocess.run([str(exe), str(N), offset], capture_output=True, text=True, check=True).stdout.strip()


# (arch, offset, faults): a word-aligned double (offset 4) traps on Alpha; on SPARC the kernel,
# and so qemu, performs a word-aligned lddf/stdf without a signal (arch/sparc/kernel/unaligned_64.c,
# handle_lddfmna), so only the byte-misaligned case (offset 1) reaches ualdbg there.
CASES = [("sparc64", "1", 3 * N), ("sparc64", "4", 0), ("alpha", "1", 3 * N), ("alpha", "4", 3 * N),
         ("hppa", "1", 3 * N), ("hppa", "4", 3 * N)]


@pytest.mark.parametrize("arch, offset, faults", CASES, ids=[f"{a}-offset{o}" for a, o, _ in CASES])
def test_float_accesses_are_performed_bit_exactly(arch: str, offset: str, faults: int, tmp_path: Path) -> None:
    require_cross(arch)
    exe = tmp_path / f"md_{arch}"
    link = "-static" if arch == "sparc64" else "-no-pie"
    build_program(exe, SRC, flags=("-g", "-O1", "-Wall", link), compiler=f"{arch_by_name(arch).triplet}-gcc")
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), str(N), offset)
    assert p.returncode == 0, p.explain()
    assert native(tmp_path, offset) in p.stdout.splitlines(), p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["faults_total"] == faults, p.explain()
    recs = doc["records"]
    assert all(r["size"] == 8 for r in recs)
    assert sum(r["access"] == "write" for r in recs) == faults // 3  # scale()'s stores
    assert sum(r["access"] == "read" for r in recs) == 2 * faults // 3  # scale()'s and total()'s loads
