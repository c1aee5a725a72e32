"""armhf and armel under qemu-arm, which lets plain misaligned ldr/str/ldrh/strh/ldrsh through
as ARMv7 does (an ARMv5 CPU or a Cortex-M traps them): the step engine with the natural policy
shows them, in ARM state and in Thumb state (Thumb-2 on armhf, Thumb-1 on armel) in one program,
a conditional store inside a Thumb-2 IT block included. Per-line counts are exact against the
program's own count (tests/cross/programs/plain_arm.c), from the CLI and from `ualdbg break`
typed in gdb-multiarch; where signal mode sees the same instruction (strd, which ARMv7 traps)
both count the same, and once in a step run."""
from __future__ import annotations

import collections
import json
import re
import subprocess
from pathlib import Path

import pytest
from crossrun import require_cross
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.reports import REPORT1

from ualdbg.isa.arch import arch_by_name

PROGRAMS = Path(__file__).resolve().parent / "programs"
SOURCE = PROGRAMS / "plain_arm.c"
ARCHES = ("armhf", "armel")
FUNCS = ("a_str", "a_ldr", "a_strh", "a_ldrsh", "c_a_str", "t_str", "t_ldr", "t_strh", "t_ldrh", "t_ldr_far",
         "c_t_str", "d_str")


def build(arch: str, tmp_path: Path) -> Path:
    require_cross(arch)
    exe = tmp_path / f"plain_arm.{arch}"
    build_program(exe, SOURCE, flags=("-g", "-O1", "-Wall", "-static"), compiler=f"{arch_by_name(arch).triplet}-gcc")
    return exe


def own_counts(text: str) -> dict[str, int]:
    found = dict(re.findall(r"^plain_arm: (\w+)=(\d+)$", text, re.M))
    assert set(found) == {*FUNCS, "sum"}, text
    return {k: int(v) for k, v in found.items() if k != "sum"}


def lines_of() -> dict[str, int]:
    """Each function's one statement: the line after its signature."""
    src = SOURCE.read_text().splitlines()
    return {f: next(i for i, t in enumerate(src) if re.search(rf"\b{f}\(", t)) + 2 for f in FUNCS}


def by_line(doc: dict) -> dict[tuple[str, int], int]:  # type: ignore[type-arg]
    got: collections.Counter[tuple[str, int]] = collections.Counter()
    for site in doc["sites"]:
        assert Path(site["file"]).name == "plain_arm.c", site
        got[(site["function"], site["line"])] += site["count"]
    return dict(got)


@pytest.mark.parametrize("arch", ARCHES)
def test_step_natural_counts_every_plain_access_in_arm_and_thumb(arch: str, tmp_path: Path) -> None:
    exe = build(arch, tmp_path)
    # ARM and Thumb functions in one file: what the decoder and the breakpoints must tell apart.
    syms = subprocess.run([f"{arch_by_name(arch).triplet}-readelf", "-sW", str(exe)], capture_output=True, text=True,
                          check=True).stdout
    addr = {f[7]: int(f[1], 16) for f in (ln.split() for ln in syms.splitlines()) if len(f) == 8 and f[3] == "FUNC"}
    assert all(addr[f] & 1 == 0 for f in FUNCS if f.startswith(("a_", "c_a"))), syms
    assert all(addr[f] & 1 == 1 for f in FUNCS if f.startswith(("t_", "c_t"))), syms
    t = tmp_path / "t.json"
    scope = [a for f in FUNCS for a in ("--in", f)]
    p = run_cli("trace", "--engine", "step", *scope, "--json", str(t), "--", str(exe), "60", "7", timeout=300)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    assert own == {"a_str": 45, "a_ldr": 45, "a_strh": 30, "a_ldrsh": 30, "c_a_str": 15, "t_str": 45, "t_ldr": 45,
                   "t_strh": 30, "t_ldrh": 30, "t_ldr_far": 45, "c_t_str": 15, "d_str": 45}, p.explain()
    doc = json.loads(t.read_text())
    assert (doc["arch"], doc["engine"], doc["step"]["policy"]) == (arch, "step", "natural"), p.explain()
    line = lines_of()
    assert by_line(doc) == {(f, line[f]): own[f] for f in FUNCS}, p.explain()
    for r in doc["records"]:
        assert int(r["va"], 16) % (4 if r["size"] == 8 else r["size"]), r
    sizes = {s["function"]: s["sizes"] for s in doc["sites"]}
    assert sizes["a_strh"] == sizes["t_ldrh"] == sizes["a_ldrsh"] == [2] and sizes["t_ldr_far"] == [4], sizes


@pytest.mark.parametrize("arch", ARCHES)
def test_signal_mode_sees_only_the_strd_and_counts_it_alike(arch: str, tmp_path: Path) -> None:
    exe = build(arch, tmp_path)
    t = tmp_path / "t.json"
    p = run_cli("trace", "--json", str(t), "--", str(exe), "60", "7", timeout=300)
    assert p.returncode == 0, p.explain()
    own = own_counts(p.stdout)
    doc = json.loads(t.read_text())
    assert doc["engine"] != "step" and by_line(doc) == {("d_str", lines_of()["d_str"]): own["d_str"]}, p.explain()
    # The step engine over d_str alone: its SIGBUS is performed, not counted a second time.
    s = tmp_path / "s.json"
    q = run_cli("trace", "--engine", "step", "--in", "d_str", "--in", "t_ldr", "--json", str(s), "--", str(exe),
                "60", "7", timeout=300)
    assert q.returncode == 0, q.explain()
    # The values the program read back: the same whichever engine saw the accesses.
    own_lines = re.compile(r"^plain_arm: .*$", re.M)
    assert own_lines.findall(q.stdout) == own_lines.findall(p.stdout) and own_lines.findall(p.stdout), q.explain()
    assert by_line(json.loads(s.read_text())) == {("d_str", lines_of()["d_str"]): own["d_str"],
                                                  ("t_ldr", lines_of()["t_ldr"]): own["t_ldr"]}, q.explain()


@pytest.mark.parametrize("arch", ARCHES)
def test_break_with_the_step_engine_in_gdb(arch: str, tmp_path: Path) -> None:
    exe = build(arch, tmp_path)
    funcs = ("t_ldr", "a_strh", "c_t_str")
    scope = " ".join(f"--in {f}" for f in funcs)
    run = run_gdb_multiarch(arch, [str(exe), "9", "7"],
                            [f"ualdbg break --engine step {scope} --policy natural", "continue",
                             "python print('CPSR-T', int(gdb.parse_and_eval('$cpsr')) >> 5 & 1)", "x/i $pc",
                             *["continue"] * 24])
    own = own_counts(run.stdout)
    # d_str's strd traps under qemu: signal mode stops there too, outside the step scope.
    want = {f: own[f] for f in (*funcs, "d_str")}
    assert want == {"t_ldr": 6, "a_strh": 4, "c_t_str": 2, "d_str": 6}, run.explain()
    reports = [m for m in map(REPORT1.match, run.stdout.splitlines()) if m]
    assert len(reports) == sum(want.values()), run.explain()
    # The first stop: a_strh of record 1 (buf + 7 + 4) in ARM state, before its strh runs.
    assert "CPSR-T 0" in run.stdout and int(reports[0].group(1), 16) % 4 == 3, run.explain()
    assert re.search(r"=> 0x[0-9a-f]+ <a_strh>:\s+strh\s+r1, \[r0, #4\]", run.stdout), run.explain()
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("  ") and "plain_arm.c:" in ln]
    got = collections.Counter(int(ln.rsplit(":", 1)[1].split()[0]) for ln in lines)
    line = lines_of()
    assert dict(got) == {line[f]: n for f, n in want.items()}, run.explain()
    assert run.program_exit == (0, None), run.explain()
