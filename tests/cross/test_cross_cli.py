"""`ualdbg trace` on programs cross-built for strict-alignment CPUs: qemu-user started and
stopped by the CLI, gdb-multiarch attached; per-line counts, sizes and access kinds as in
examples/README.md's strict-alignment table, the architecture in the JSON, and the program's
output and exit status unchanged (its sums prove the performed accesses were right)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from crossrun import build, cross_rows
from support.build import build_program
from support.cli import run_cli
from support.env import BUILD
from support.expected import by_location

ROWS = cross_rows()


def test_table_covers_both_mechanisms() -> None:
    # The README table is the test's input: it must name sparc64 (native trap), alpha, hppa
    # and sh4 (prctl: little- and big-endian, a PC queue, delay slots).
    assert {arch for arch, _, _ in ROWS} == {"sparc64", "alpha", "hppa", "sh4"}
    assert len(ROWS) >= 18


@pytest.mark.parametrize("key", sorted(ROWS), ids=lambda k: f"{k[0]}-{k[1]}")
def test_counts_per_line(key: tuple[str, str, tuple[str, ...]], tmp_path: Path) -> None:
    arch, prog, args = key
    build_dir = build(arch)
    out = tmp_path / "trace.json"
    p = run_cli("trace", "--json", str(out), "--", str(build_dir / prog), *args, timeout=240)
    assert p.returncode == 0, p.explain()
    doc = json.loads(out.read_text())
    assert doc["arch"] == arch and doc["debugger"] == "gdb", p.explain()
    assert doc["program"]["exit_status"] == 0
    rows = ROWS[key]
    want = {r.location: r.count for r in rows if r.count}
    got = by_location(doc)
    assert dict(got) == want, p.explain()
    assert doc["faults_total"] == sum(want.values())
    for r in rows:
        if not r.count:
            continue
        sites = [s for s in doc["sites"] if f"{Path(s['file'] or '').name}:{s['line']}" == r.location]
        assert {size for s in sites for size in s["sizes"]} == {r.size}, sites
        kinds = {s["access"] for s in sites}
        assert (kinds == {r.access}) or (r.access == "read-write" and kinds == {"read", "write"}), sites
    # Each record's VA is misaligned for its size: decoded from the instruction, not guessed.
    assert all(int(rec["va"], 16) % rec["size"] for rec in doc["records"])


@pytest.mark.parametrize("arch", ["sparc64", "alpha", "hppa", "sh4"])
def test_program_output_and_results_unchanged(arch: str, tmp_path: Path) -> None:
    """memalign's sum is computed from the values ualdbg wrote and read on the program's
    behalf: it must equal the native x86-64 program's."""
    build_dir = build(arch)
    native = subprocess.run([str(BUILD / "memalign"), "100", "5"], capture_output=True, text=True, check=True)
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(build_dir / "memalign"), "100", "5", timeout=240)
    assert p.returncode == 0, p.explain()
    assert native.stdout.splitlines()[-1] in p.stdout.splitlines(), p.explain()


def test_exit_status_passes_through(tmp_path: Path) -> None:
    # not_aligned with an unparsable count runs 0 iterations and exits 0; a missing file: 1.
    build_dir = build("sparc64")
    src = tmp_path / "exit3.c"
    src.write_text("int main(void) { return 3; }\n")
    exe = tmp_path / "exit3"
    build_program(exe, src, flags=("-static",), compiler="sparc64-linux-gnu-gcc")
    p = run_cli("check", "--json", str(tmp_path / "c.json"), "--", str(exe))
    assert p.returncode == 3, p.explain()  # check: the program failed -> its own status (docs/CI.md)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["program"]["exit_status"] == 3 and doc["arch"] == "sparc64"
    t = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe))
    assert t.returncode == 3, t.explain()
    c = run_cli("check", "--json", str(tmp_path / "m.json"), "--", str(build_dir / "memalign"), "10", "1")
    assert c.returncode == 1, c.explain()


def test_arch_mismatch_is_one_line(tmp_path: Path) -> None:
    build_dir = build("sparc64")
    p = run_cli("trace", "--arch", "alpha", "--", str(build_dir / "memalign"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"ualdbg: {build_dir / 'memalign'} is a sparc64 program, not alpha"]
    q = run_cli("trace", "--arch", "vax", "--", str(build_dir / "memalign"))
    assert q.returncode == 2 and len(q.stderr.strip().splitlines()) == 1 and "unknown architecture" in q.stderr


def test_architectures_without_an_engine_are_refused_in_one_line(tmp_path: Path) -> None:
    # A RISC-V ELF header (e_machine 243, little-endian, 64-bit): no tool needed to refuse it.
    exe = tmp_path / "riscv_prog"
    exe.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + (2).to_bytes(2, "little") + (243).to_bytes(2, "little") + bytes(64))
    exe.chmod(0o755)
    p = run_cli("trace", "--", str(exe))
    assert p.returncode == 2, p.explain()
    assert p.stderr.strip().splitlines() == ["ualdbg: riscv64 programs: qemu-riscv64 performs misaligned accesses without a trap; use --engine step --in FUNC (README: architectures)"]
    q = run_cli("check", "--arch", "sparc64", "--", "/bin/true")
    assert q.returncode == 2 and q.stderr.strip() == "ualdbg: /bin/true is a x86_64 program, not sparc64", q.explain()
