"""arm64 plain misaligned accesses, which the CPU tolerates in user mode, found by the step engine
with policy `natural` under qemu-aarch64 + gdb-multiarch: the per-line counts of examples/README.md's
arm64 step table from the CLI, the VA the program prints, the program's results unchanged, and
the same engine typed as `ualdbg trace start` / `ualdbg break` in gdb-multiarch."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from crossrun import build
from support.build import build_program
from support.cli import run_cli
from support.debuggers import run_gdb_multiarch
from support.env import BUILD, EXAMPLES
from support.expected import by_location
from support.reports import REPORT1

SECTION = "## Expected faults on arm64 with the step engine"


def step_rows() -> dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[tuple[str, int, int | None, str | None]]]:
    """(program, args, functions) -> [(location, count, size, access)] from the README section."""
    text = (EXAMPLES / "README.md").read_text()
    section = text[text.index(SECTION):]
    out: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[tuple[str, int, int | None, str | None]]] = {}
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or cells[0] != "aarch64":
            continue
        _, prog, args, funcs, loc, count, size, access = cells
        out.setdefault((prog, tuple(args.split()), tuple(funcs.split())), []).append(
            (loc, int(count), int(size) if size.isdigit() else None, None if access == "-" else access))
    return out


ROWS = step_rows()


def test_table_is_there() -> None:
    assert {p for p, _, _ in ROWS} >= {"not_aligned", "memalign", "memalign_aligned", "mpi_status", "packed_header",
                                       "aligned"}


def trace(prog: str, args: tuple[str, ...], funcs: tuple[str, ...], out: Path,
          *extra: str) -> subprocess.CompletedProcess[str]:
    scope = [a for f in funcs for a in ("--in", f)]
    return run_cli("trace", "--arch", "aarch64", "--engine", "step", *scope, *extra, "--json", str(out), "--",
                   str(build("aarch64") / prog), *args, timeout=240)


@pytest.mark.parametrize("key", sorted(ROWS), ids=lambda k: k[0])
def test_counts_per_line(key: tuple[str, tuple[str, ...], tuple[str, ...]], tmp_path: Path) -> None:
    prog, args, funcs = key
    p = trace(prog, args, funcs, tmp_path / "t.json")  # no --policy: natural is arm64's default
    assert p.returncode == 0, p.explain()
    doc = json.loads((tmp_path / "t.json").read_text())
    assert (doc["arch"], doc["engine"], doc["step"]["policy"]) == ("aarch64", "step", "natural"), p.explain()
    assert doc["program"]["exit_status"] == 0
    assert doc["step"]["steps"] > 0 and doc["step"]["entries"] > 0, p.explain()  # the scope ran
    want = {loc: n for loc, n, _, _ in ROWS[key] if n}
    assert dict(by_location(doc)) == want, p.explain()
    assert doc["faults_total"] == sum(want.values())
    for loc, n, size, access in ROWS[key]:
        if not n:
            continue
        sites = [s for s in doc["sites"] if f"{Path(s['file'] or '').name}:{s['line']}" == loc]
        assert {z for s in sites for z in s["sizes"]} == {size}, sites
        kinds = {s["access"] for s in sites}
        assert kinds == {access} or (access == "read-write" and kinds == {"read", "write"}), sites
    # Every record is misaligned for its size: a plain access arm64 ran without complaint.
    assert all(int(r["va"], 16) % r["size"] for r in doc["records"])
    # The program ran as it does natively (the x86-64 build prints the same results).
    native = subprocess.run([str(BUILD / prog), *args], capture_output=True, text=True, check=True)
    assert native.stdout.splitlines()[-1] in p.stdout.splitlines(), p.explain()


def printed(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    assert m is not None, text
    return int(m.group(1), 16)


def test_vas_are_the_programs_addresses(tmp_path: Path) -> None:
    p = trace("not_aligned", ("50",), ("bump",), tmp_path / "n.json")
    assert p.returncode == 0, p.explain()
    base = printed(r"not_aligned: p=(0x[0-9a-f]+)", p.stdout)
    recs = json.loads((tmp_path / "n.json").read_text())["records"]
    assert len(recs) == 100 and all((int(r["va"], 16) - base) % 8 == 0 and 0 <= int(r["va"], 16) - base < 64 * 8
                                    for r in recs)
    assert [r["access"] for r in recs[:2]] == ["read", "write"] and recs[0]["va"] == recs[1]["va"]  # p[key]++
    p = trace("mpi_status", ("3",), ("fake_recv", "fake_get_count"), tmp_path / "m.json")
    status1 = printed(r"&status\[1\]=(0x[0-9a-f]+)", p.stdout)
    recs = json.loads((tmp_path / "m.json").read_text())["records"]
    assert [(int(r["va"], 16), r["size"], r["access"]) for r in recs[:2]] == [(status1, 8, "write"), (status1, 8, "read")]
    p = trace("packed_header", ("2",), ("parse_frame",), tmp_path / "p.json")
    saddr = printed(r"ip saddr at (0x[0-9a-f]+)", p.stdout)
    doc = json.loads((tmp_path / "p.json").read_text())
    assert saddr in {int(r["va"], 16) for r in doc["records"]}, p.explain()


def test_policy_cacheline_counts_follow_the_printed_address_and_bad_scopes_are_one_line(tmp_path: Path) -> None:
    p = trace("memalign", ("20", "1"), ("fill",), tmp_path / "cl.json", "--policy", "cacheline")
    assert p.returncode == 0, p.explain()
    doc = json.loads((tmp_path / "cl.json").read_text())
    v = printed(r"memalign: v=(0x[0-9a-f]+)", p.stdout)
    # fill writes 40 ints at v, v+4, ...: those that straddle a 64-byte line, no others
    split = [v + 4 * k for k in range(40) if (v + 4 * k) % 64 > 60]
    assert doc["step"]["policy"] == "cacheline" and doc["step"]["steps"] > 0
    assert sorted(int(r["va"], 16) for r in doc["records"]) == split and split, p.explain()
    e = run_cli("trace", "--arch", "aarch64", "--engine", "step", "--everywhere", "--",
                str(build("aarch64") / "memalign"), "3", "1")
    assert e.returncode == 2 and len(e.stderr.strip().splitlines()) == 1 and "--everywhere" in e.stderr, e.explain()
    assert "Traceback" not in e.stderr

    for scope, says in ((["--in", "no_such_function"], "no function named no_such_function"),
                        (["--range", "0x10,0x20"], "never entered the scope 0x10-0x20")):
        e = run_cli("trace", "--arch", "aarch64", "--engine", "step", *scope, "--",
                    str(build("aarch64") / "memalign"), "3", "1")
        assert e.returncode == 2 and e.stderr.strip().splitlines() == [e.stderr.strip()], e.explain()
        assert says in e.stderr and "Traceback" not in e.stderr, e.explain()


def test_gdb_trace_start_then_save(tmp_path: Path) -> None:
    prog = build("aarch64") / "memalign"
    out = tmp_path / "g.json"
    run = run_gdb_multiarch("aarch64", [str(prog), "10", "2"],
                            ["ualdbg trace start --engine step --in fill --in total", "ualdbg status", "continue",
                             f"ualdbg trace save {out}"])
    assert run.returncode == 0, run.explain()
    assert "policy natural" in run.stdout, run.explain()  # the default off x86
    doc = json.loads(out.read_text())
    assert dict(by_location(doc)) == {"memalign.c:31": 10, "memalign.c:32": 10, "memalign.c:40": 40}, run.explain()
    v = printed(r"memalign: v=(0x[0-9a-f]+)", run.stdout)
    assert int(doc["records"][0]["va"], 16) == v
    assert "memalign: count=10 reps=2 sum=270" in run.stdout and run.program_exit == (0, None), run.explain()


def test_gdb_break_stops_before_each_access(tmp_path: Path) -> None:
    prog = build("aarch64") / "memalign"
    stops = 3 * 2  # fill(v, 3): .a and .b of each element
    run = run_gdb_multiarch("aarch64", [str(prog), "3", "1"],
                            ["ualdbg break --engine step --in fill --policy natural", "continue",
                             "python print('PC-AT-STOP', hex(int(gdb.parse_and_eval('$pc'))))", "x/i $pc",
                             *["continue"] * stops])
    out = run.stdout
    reports = [m for m in map(REPORT1.match, out.splitlines()) if m]
    assert len(reports) == stops, run.explain()
    v = printed(r"memalign: v=(0x[0-9a-f]+)", out)
    assert [int(m.group(1), 16) - v for m in reports] == [0, 4, 8, 12, 16, 20], run.explain()
    assert f"PC-AT-STOP {reports[0].group(2)}" in out, run.explain()  # stopped BEFORE the store ran
    assert re.search(r"=> 0x[0-9a-f]+ <fill\+\d+>:\s+str\s+w\d+, \[x0\]", out), run.explain()
    assert "memalign: count=3 reps=1" in out and run.program_exit == (0, None), run.explain()


def test_gdb_unknown_function_is_one_line() -> None:
    prog = build("aarch64") / "memalign"
    run = run_gdb_multiarch("aarch64", [str(prog), "3", "1"],
                            ["ualdbg trace start --engine step --in no_such_function", "continue"])
    lines = [line for line in run.stdout.splitlines() if "no_such_function" in line]
    assert len(lines) == 1 and lines[0].startswith("ualdbg: "), run.explain()
    assert "Traceback" not in run.stdout and run.program_exit == (0, None), run.explain()


def test_addressing_forms_end_to_end(tmp_path: Path) -> None:
    """Each addressing form's VA under qemu equals the one the C code implies from the printed p;
    the aligned ldp is not reported (programs/forms_arm64.c: inline asm names each instruction)."""
    src = Path(__file__).resolve().parent / "programs" / "forms_arm64.c"
    build("aarch64")  # the toolchain (fails under CI=true when missing)
    exe = tmp_path / "forms"
    build_program(exe, src, flags=("-g", "-O1", "-Wall", "-static"), compiler="aarch64-linux-gnu-gcc")
    lines = {m.group(1): n for n, text in enumerate(src.read_text().splitlines(), 1)
             if (m := re.search(r"/\* L:(\w+) \*/", text))}
    funcs = ["pair", "post", "regoff", "sxtw", "vec", "aligned_pair"]
    p = run_cli("trace", "--engine", "step", *[a for f in funcs for a in ("--in", f)], "--json", str(tmp_path / "f.json"),
                "--", str(exe), timeout=240)
    assert p.returncode == 0, p.explain()
    base = printed(r"forms: p=(0x[0-9a-f]+)", p.stdout)
    doc = json.loads((tmp_path / "f.json").read_text())
    line_of = {s["pc"]: s["line"] for s in doc["sites"]}
    got = [(line_of[r["pc"]], int(r["va"], 16) - base, r["size"], r["access"]) for r in doc["records"]]
    assert got == [
        (lines["pair"], 0, 8, "read"),  # ldp x, x, [p]: the first element is the one recorded
        (lines["post"], 0, 4, "write"), (lines["post"], 4, 4, "write"), (lines["post"], 8, 4, "write"),  # [p], #4
        (lines["regoff"], 20, 4, "read"),  # [p, 5, lsl #2]
        (lines["sxtw"], 8, 4, "read"),  # [p + 16, w(-2), sxtw #2]
        (lines["ld1"], 0, 4, "read"), (lines["st1"], 0, 4, "write"),  # {v0.4s}: element size 4
    ], p.explain()
    assert "forms: sum=" in p.stdout and doc["program"]["exit_status"] == 0


def test_check_exit_status(tmp_path: Path) -> None:
    bad = run_cli("check", "--engine", "step", "--in", "fill", "--json", str(tmp_path / "b.json"), "--",
                  str(build("aarch64") / "memalign"), "5", "1")
    assert bad.returncode == 1 and json.loads((tmp_path / "b.json").read_text())["faults_total"] == 10, bad.explain()
    good = run_cli("check", "--engine", "step", "--in", "fill", "--json", str(tmp_path / "g.json"), "--",
                   str(build("aarch64") / "memalign_aligned"), "5", "1")
    assert good.returncode == 0, good.explain()
    assert json.loads((tmp_path / "g.json").read_text())["step"]["steps"] > 0
