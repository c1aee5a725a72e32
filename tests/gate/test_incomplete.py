"""No silent false negatives (issue 29, item 8), on real programs: where ualdbg knows it could not
see (SIGBUS blocked or taken over by the program, its handlers run with SIGBUS blocked, a process
the agent could not enter: static, 32-bit, a seccomp filter), the report, the JSON's blind_spots
and SARIF say so, and `check` fails with status 3 unless --allow-incomplete. Before, each of these
runs made 1,000 unaligned accesses and `check` said "ok: 0 unaligned accesses", status 0."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.build import build_program, build_source
from support.cli import run_cli
from support.env import ROOT, require_tool

FIXTURES = ROOT / "tests" / "fixtures" / "agent"
N = "1000"


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("blind")
    build_source(FIXTURES / "blind.c", out, flags=("-g", "-O1", "-pthread"))
    src = out / "fault.c"
    src.write_text('#include <stdint.h>\n#include <stdlib.h>\nstatic char buf[64] __attribute__((aligned(16)));\n'
                   '__attribute__((noinline)) void touch(long k) { for (long i = 0; i < k; i++) {\n'
                   '  int64_t *p = (int64_t *)(buf + 1); __asm__ volatile("" : : "r"(p) : "memory"); (*p)++; } }\n'
                   'int main(int argc, char **argv) { touch(argc > 1 ? atol(argv[1]) : 1); return 0; }\n')
    build_program(out / "fault_dynamic", "fault.c", cwd=out)
    build_program(out / "fault_static", "fault.c", flags=("-g", "-O1", "-static"), cwd=out)
    require_tool("gcc")
    build_program(out / "fault_m32", "fault.c", flags=("-g", "-O1", "-m32"), cwd=out)
    return out


CASES = {  # extra programs, the blind spot (kind, count), the engines for which it is one (the trap engine
    # sees faults in handlers and after a raw sigaction: gdb takes the SIGBUS first)
    "mask": ([], "sigbus-blocked", 1, ("agent", "trap")),
    "thread": ([], "sigbus-blocked", 1, ("agent", "trap")),
    "handler": ([], "handler-unarmed", 1, ("agent",)),
    "taken": ([], "sigbus-taken", 1, ("agent",)),
    "seccomp": ([], "untraced-process", 2, ("agent", "trap")),
    "spawn-static": (["fault_static"], "untraced-process", 1, ("agent", "trap")),
    "spawn-m32": (["fault_m32"], "untraced-process", 1, ("agent", "trap")),
    "exec-static": (["fault_static"], "untraced-process", 1, ("agent",)),
}


@pytest.mark.parametrize("case,engine", [(c, e) for c in sorted(CASES) for e in CASES[c][3]])
def test_an_incomplete_run_fails_the_gate_with_status_3(case: str, engine: str, progs: Path, tmp_path: Path) -> None:
    extra, kind, count, _engines = CASES[case]
    if engine == "trap":
        require_tool("gdb")
    mode = case.split("-")[0]
    argv = [str(progs / "blind"), mode, N, *(str(progs / e) for e in extra)]
    out, sarif = tmp_path / "r.json", tmp_path / "r.sarif"
    r = run_cli("check", "--engine", engine, "--json", str(out), "--sarif", str(sarif), "--", *argv, timeout=180)
    assert r.returncode == 3, r.explain()
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == 0, r.explain()  # the 1,000 were not seen: that is the point
    spots = doc["blind_spots"]
    assert [(b["kind"], b["count"]) for b in spots] == [(kind, count)], r.explain()
    verdict = r.stderr.strip().splitlines()[-1]
    assert verdict.startswith("ualdbg check: INCOMPLETE: 0 unaligned accesses in scope") and kind in verdict, r.explain()
    assert f"not seen: {spots[0]['text']}" in r.stderr, r.explain()
    inv = json.loads(sarif.read_text())["runs"][0]["invocations"][0]
    assert inv["exitCode"] == 3 and inv["executionSuccessful"] is False and inv["properties"]["incomplete"] is True, inv
    assert [n["descriptor"]["id"] for n in inv["toolExecutionNotifications"]] == [f"ualdbg/blind-spot/{kind}"], inv
    # Told to accept it: the verdict of what was seen, the blind spots still said.
    r = run_cli("check", "--engine", engine, "--allow-incomplete", "--", *argv, timeout=180)
    assert r.returncode == 0 and "(incomplete, accepted: " in r.stderr and "not seen: " in r.stderr, r.explain()


def test_found_faults_fail_as_such_whatever_was_missed(progs: Path, tmp_path: Path) -> None:
    """Status 1 (found) wins over 3; the program's own failure wins over both."""
    r = run_cli("check", "--", str(progs / "blind"), "spawn", N, str(progs / "fault_static"), timeout=180)
    assert r.returncode == 3, r.explain()
    r = run_cli("check", "--max-faults", "0", "--", "/bin/sh", "-c",
                f"{progs / 'fault_dynamic'} 5 && {progs / 'blind'} mask 5", timeout=180)
    assert r.returncode == 1 and "FAIL: 5 unaligned accesses" in r.stderr and "INCOMPLETE: sigbus-blocked" in r.stderr, \
        r.explain()
    r = run_cli("check", "--", "/bin/sh", "-c", f"{progs / 'blind'} mask 5; exit 4", timeout=180)
    assert r.returncode == 4, r.explain()


@pytest.mark.parametrize("engine", ["agent", "trap"])
def test_no_blind_spot_where_everything_was_seen(engine: str, progs: Path, tmp_path: Path) -> None:
    """The accounting has no false alarm: children the agent follows (a dynamic program spawned or
    exec'd) report in; threads are not 'blind' for libc's own masks (pthread_create's)."""
    if engine == "trap":
        require_tool("gdb")
    cases = [["clean", N], ["exec", N, str(progs / "fault_dynamic")]]
    if engine == "agent":  # the trap engine does not follow children: a spawn is its blind spot
        cases.append(["spawn", N, str(progs / "fault_dynamic")])
    out = tmp_path / "r.json"
    for args in cases:
        r = run_cli("check", "--engine", engine, "--json", str(out), "--", str(progs / "blind"), *args, timeout=180)
        doc = json.loads(out.read_text())
        assert doc["blind_spots"] == [] and r.returncode == 1 and doc["faults_total"] == 1000, r.explain()
    r = run_cli("check", "--engine", engine, "--json", str(out), "--", str(ROOT / "examples" / "build" / "threads"),
                timeout=180)
    assert json.loads(out.read_text())["blind_spots"] == [] and r.returncode == 1, r.explain()


def test_report_merge_and_sarif_keep_the_blind_spots(progs: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli("trace", "--json", str(a), "--", str(progs / "blind"), "mask", N, timeout=180).returncode == 0
    assert run_cli("trace", "--json", str(b), "--", str(progs / "blind"), "clean", "3", timeout=180).returncode == 0
    r = run_cli("report", str(a), timeout=60)
    assert "INCOMPLETE: 1 part of the run not seen:" in r.stdout and "blocked SIGBUS 1 time while armed" in r.stdout
    merged, sarif = tmp_path / "m.json", tmp_path / "m.sarif"
    r = run_cli("report", "--merge", str(a), str(b), "--json", str(merged), "--sarif", str(sarif), timeout=60)
    assert r.returncode == 0, r.explain()
    doc = json.loads(merged.read_text())
    assert [(s["kind"], s["run"]) for s in doc["blind_spots"]] == [("sigbus-blocked", 0)] and doc["faults_total"] == 3
    inv = json.loads(sarif.read_text())["runs"][0]["invocations"][0]
    assert "exitCode" not in inv and inv["executionSuccessful"] is False and inv["properties"]["blindSpots"] == 1, inv
