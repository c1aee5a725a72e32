"""The CI gate's contracts (issue 17), on real programs: the exit contract in every engine that
gates (agent, trap under gdb and under lldb, step), the program's streams left alone, outputs
checked before the run and never lost, signals, baselines, merged runs, SARIF fingerprints,
scripts, and a small project's `make test` under the gate."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.build import build_program, build_source
from support.cli import run_cli
from support.env import ROOT, require_tool, scrubbed_env
from support.run import Result

PROGRAMS = Path(__file__).resolve().parent / "programs"


def ualdbg(*args: str, cwd: Path | None = None, timeout: float = 300) -> Result:
    return run_cli(*args, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_source(PROGRAMS / "gate.c", tmp_path_factory.mktemp("gate"))


ENGINES = {
    "agent": ["--engine", "agent"],
    "trap-gdb": ["--engine", "trap", "--debugger", "gdb"],
    "trap-lldb": ["--engine", "trap", "--debugger", "lldb"],
    "step": ["--engine", "step", "--in", "touch"],
}


def _need(engine: str) -> None:
    if engine == "trap-lldb":
        require_tool("lldb-19")
    if engine == "trap-gdb":
        require_tool("gdb")


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("action,faults,expected", [
    ("exit:0", 0, 0),      # clean
    ("exit:0", 4, 1),      # too many unaligned accesses: --error-exitcode's default
    ("exit:3", 4, 3),      # the program failed: its own status, whatever was found
    ("exit:5", 0, 5),
    ("signal:11", 2, 139),  # killed by SIGSEGV: 128+11
])
def test_exit_contract(engine: str, action: str, faults: int, expected: int, gate: Path, tmp_path: Path) -> None:
    _need(engine)
    out = tmp_path / "r.json"
    r = ualdbg("check", *ENGINES[engine], "--json", str(out), "--", str(gate), str(faults), action)
    assert r.returncode == expected, r.explain()
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == faults, r.explain()
    verdict = [line for line in r.stderr.splitlines() if line.startswith("ualdbg check:")]
    assert len(verdict) == 1 and ("ok:" in verdict[0]) == (expected == 0), r.explain()
    assert "ualdbg check" not in r.stdout and "Unaligned accesses" not in r.stdout, r.explain()


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_error_exitcode_and_max_faults(engine: str, gate: Path) -> None:
    _need(engine)
    r = ualdbg("check", *ENGINES[engine], "--error-exitcode", "9", "--", str(gate), "4", "exit:0")
    assert r.returncode == 9, r.explain()
    r = ualdbg("check", *ENGINES[engine], "--max-faults", "4", "--error-exitcode", "9", "--", str(gate), "4", "exit:0")
    assert r.returncode == 0, r.explain()


def test_trace_passes_the_program_status_through(gate: Path) -> None:
    assert ualdbg("trace", "--", str(gate), "2", "exit:6").returncode == 6
    assert ualdbg("trace", "--", str(gate), "2", "signal:6").returncode in (134, -6)


def test_program_stdout_is_the_programs_alone(gate: Path, tmp_path: Path) -> None:
    """`ualdbg trace -- ./gen > data.bin` gives the same data.bin as `./gen > data.bin`."""
    direct = subprocess.run([str(gate), "100", "bin"], capture_output=True, check=True)
    for extra in ([], ["--log-file", str(tmp_path / "log.txt")]):
        r = ualdbg("trace", *extra, "--", str(gate), "100", "bin")
        assert r.returncode == 0 and r.stdout_bytes == direct.stdout and len(direct.stdout) == 25600, r.explain()
    assert "Unaligned accesses in" in (tmp_path / "log.txt").read_text()
    r = ualdbg("trace", "--log-file", str(tmp_path / "log2.txt"), "--", str(gate), "1", "exit:0")
    assert "Unaligned accesses" not in r.stderr, r.explain()


@pytest.mark.parametrize("bad,needle", [
    ("/no/such/dir/out.json", "no such directory"),
    ("/", "is a directory"),
    ("/proc/version", "cannot write it"),
])
def test_unwritable_output_fails_before_the_program_runs(bad: str, needle: str, gate: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    marker.mkdir()
    for option in ("--json", "--sarif", "--log-file"):
        r = ualdbg("check", option, bad, "--", str(gate), "1", f"rmdir:{marker}")
        assert r.returncode == 2, r.explain()
        assert marker.exists(), f"the program ran although {option} {bad} cannot be written\n{r.explain()}"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.explain()


def test_a_write_that_fails_after_the_run_keeps_the_trace(gate: Path, tmp_path: Path) -> None:
    """The output's folder exists when checked and is gone when written (the program removes it):
    the trace lands in a fallback file that stderr names."""
    folder = tmp_path / "out"
    folder.mkdir()
    r = ualdbg("trace", "--json", str(folder / "t.json"), "--", str(gate), "3", f"rmdir:{folder}", cwd=tmp_path)
    assert r.returncode == 0, r.explain()
    line = next(line for line in r.stderr.splitlines() if line.startswith("ualdbg: cannot write the JSON output"))
    fallback = Path(line.rsplit("it is in ", 1)[1])
    assert json.loads(fallback.read_text())["faults_total"] == 3, r.explain()


@pytest.mark.parametrize("engine", ["agent", "trap-gdb", "trap-lldb"])
def test_sigterm_reaches_the_program_and_the_partial_trace_is_written(engine: str, gate: Path, tmp_path: Path) -> None:
    _need(engine)
    out = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "ualdbg", "trace", *ENGINES[engine], "--json", str(out), "--", str(gate), "0", "term"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=scrubbed_env(), cwd=ROOT,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"gate: waiting\n"
    time.sleep(0.3)  # some faults first
    proc.send_signal(signal.SIGTERM)  # as a CI timeout does, to ualdbg alone
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 42, stderr.decode()  # the program's handler ran, and its status passed through
    assert stdout == b"gate: got SIGTERM\n"
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted_by"] == "SIGTERM" and doc["faults_total"] > 0
    assert "PARTIAL: interrupted by SIGTERM" in stderr.decode()


def test_a_program_that_ignores_sigterm_is_killed_after_a_second_signal(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "ualdbg", "trace", "--json", str(out), "--", "/bin/sh", "-c",
           "trap '' TERM; echo up; while :; do sleep 0.05; done"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=scrubbed_env(), cwd=ROOT,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None  # ualdbg waits for the program, which ignores SIGTERM
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    doc = json.loads(out.read_text())
    assert doc["program"]["exit_signal"] == 9 and doc["partial"] is True
    assert proc.returncode in (137, -9)
    pid = doc["program"]["pid"]
    assert not Path(f"/proc/{pid}").exists(), "the program was left running"


def test_records_of_a_program_killed_by_sigkill(gate: Path, tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    r = ualdbg("check", "--json", str(out), "--", str(gate), "7", "kill")
    assert r.returncode == 137, r.explain()
    doc = json.loads(out.read_text())
    # The counts a patched site made without trapping (issue 21) are in shared memory too.
    assert doc["faults_total"] == 7, r.explain()
    assert len(doc["records"]) == sum(s.get("trapped", s["count"]) for s in doc["sites"]), r.explain()
    r = ualdbg("check", "--no-patch", "--json", str(out), "--", str(gate), "7", "kill")
    assert r.returncode == 137, r.explain()
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == 7 and len(doc["records"]) == 7, r.explain()


# --- baselines, merged runs, SARIF fingerprints ----------------------------------------------

def _build(src: Path, out: Path, *flags: str) -> Path:
    return build_program(out, src.name, flags=("-g", "-O1", *flags), cwd=src.parent)


def test_baseline_accepts_known_sites_and_fails_on_new_ones(gate: Path, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    r = ualdbg("check", "--update-baseline", "--baseline", str(base), "--", str(gate), "5", "exit:0")
    assert r.returncode == 0 and base.exists(), r.explain()
    keys = [s["key"] for s in json.loads(base.read_text())["sites"]]
    (key,) = keys  # module, function, a hash of the line's text, its occurrence (ci/fingerprint.py)
    assert key.startswith("gate|touch@") and key.endswith("#0"), keys
    assert ualdbg("check", "--baseline", str(base), "--", str(gate), "50", "exit:0").returncode == 0
    # A rebuild that moves the code (-O2, other addresses) keeps the key: still passes.
    moved = _build(PROGRAMS / "gate.c", tmp_path / "gate", "-O2")
    r = ualdbg("check", "--baseline", str(base), "--", str(moved), "5", "exit:0")
    assert r.returncode == 0, r.explain()
    # Another program's sites are new: the gate fails with --error-exitcode and names them.
    other = ROOT / "examples" / "build" / "not_aligned"
    r = ualdbg("check", "--baseline", str(base), "--error-exitcode", "4", "--", str(other), "3")
    assert r.returncode == 4 and "not_aligned.c:38" in r.stderr and "not in the baseline" in r.stderr, r.explain()
    # A failing program still fails, baseline or not.
    assert ualdbg("check", "--baseline", str(base), "--", str(gate), "5", "exit:3").returncode == 3


@pytest.mark.parametrize("content,needle", [("{}", "not a ualdbg baseline"), ("nope", "not a ualdbg baseline"),
                                            ('{"format": "ualdbg-baseline", "version": 7}', "version 7")])
def test_bad_baseline_is_one_line(content: str, needle: str, gate: Path, tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(content)
    r = ualdbg("check", "--baseline", str(bad), "--", str(gate), "1", "exit:0")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.explain()


def test_baseline_key_without_a_line_is_the_instruction(tmp_path: Path) -> None:
    stripped = ROOT / "examples" / "build" / "not_aligned_stripped"
    base = tmp_path / "b.json"
    r = ualdbg("check", "--update-baseline", "--baseline", str(base), "--", str(stripped), "3")
    assert r.returncode == 0, r.explain()
    (site,) = json.loads(base.read_text())["sites"]
    assert site["key"].startswith("not_aligned_stripped||insn:") and len(site["key"].split("insn:")[1]) >= 4, site


def test_merge_sums_runs_and_keeps_each(gate: Path, tmp_path: Path) -> None:
    a, b, m = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    ualdbg("trace", "--json", str(a), "--", str(gate), "3", "exit:0")
    ualdbg("trace", "--json", str(b), "--", str(gate), "4", "exit:0")
    r = ualdbg("report", "--merge", str(a), str(b), "--json", str(m), "--sarif", str(tmp_path / "m.sarif"))
    assert r.returncode == 0 and "2 runs merged" in r.stdout, r.explain()
    doc = json.loads(m.read_text())
    assert doc["faults_total"] == 7 and doc["merged"] == 2 and len(doc["runs"]) == 2
    (site,) = doc["sites"]
    assert site["count"] == 7 and len(doc["processes"]) == 2 and {p["run"] for p in doc["processes"]} == {0, 1}
    r = ualdbg("report", "--summary", str(m))  # a merged document is a document
    assert r.returncode == 0, r.explain()
    assert ualdbg("report", str(a), str(b)).returncode == 2  # several files need --merge


def test_sarif_fingerprints_are_stable(gate: Path, tmp_path: Path) -> None:
    prints = []
    (tmp_path / "o2").mkdir()
    for i, prog in enumerate([gate, _build(PROGRAMS / "gate.c", tmp_path / "o2" / "gate", "-O2")]):
        sarif = tmp_path / f"{i}.sarif"
        ualdbg("check", "--sarif", str(sarif), "--", str(prog), str(3 + i), "exit:0")
        (result,) = json.loads(sarif.read_text())["runs"][0]["results"]
        prints.append(result["partialFingerprints"]["ualdbgSite/v2"])
    assert prints[0] == prints[1] and len(prints[0]) == 32
    sarif = tmp_path / "n.sarif"
    ualdbg("check", "--sarif", str(sarif), "--", str(ROOT / "examples" / "build" / "memalign"), "10", "1")
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    others = {r["partialFingerprints"]["ualdbgSite/v2"] for r in results}
    # memalign's 3 lines have 4 faulting PCs: 4 results, each its own fingerprint (issue 31)
    assert len(others) == len(results) == 4 and prints[0] not in others


# --- scripts and a test suite -----------------------------------------------------------------

def test_a_script_runs_as_the_kernel_runs_it(gate: Path, tmp_path: Path) -> None:
    script = tmp_path / "run-tests.sh"
    script.write_text(f"#!/bin/sh\n{gate} 3 exit:0\n{gate} 4 exit:0\necho done\n")
    script.chmod(0o755)
    out = tmp_path / "s.json"
    r = ualdbg("check", "--json", str(out), "--", str(script))
    assert r.returncode == 1 and r.stdout == "gate: 3\ngate: 4\ndone\n", r.explain()
    assert "is a script run by" in r.stderr and "tracing the programs it runs, not" in r.stderr, r.explain()
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == 7, r.explain()  # the two programs', none of the shell's
    per = sorted((p["path"], p["faults_total"]) for p in doc["processes"])
    assert per == sorted([("/usr/bin/dash", 0), (str(gate), 3), (str(gate), 4)]), doc["processes"]
    for engine in (["--engine", "trap"], ["--engine", "step", "--in", "touch"]):
        r = ualdbg("check", *engine, "--", str(script))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "a script run by /usr/bin/" in lines[0], r.explain()


def test_make_test_of_a_small_project_under_the_gate(gate: Path, tmp_path: Path) -> None:
    """A Makefile that builds three test programs and runs them: one makes unaligned accesses.
    The gate follows every child, says which program did what, and fails; a baseline of that
    run makes the next one pass, and a new unaligned test fails it again."""
    require_tool("make")
    project = tmp_path / "project"
    project.mkdir()
    (project / "t_ok.c").write_text("int main(void) { return 0; }\n")
    (project / "t_ok2.c").write_text('#include <stdio.h>\nint main(void) { puts("ok2"); return 0; }\n')
    (project / "t_bad.c").write_text(
        "#include <stdint.h>\n#include <stdlib.h>\n"
        "__attribute__((noinline)) int64_t get(char *b) { return *(volatile int64_t *)(b + 3); }\n"
        "int main(void) { char *b = calloc(1, 32); int64_t s = 0; for (int i = 0; i < 6; i++) s += get(b); return (int)s; }\n")
    (project / "Makefile").write_text(
        "TESTS := t_ok t_ok2 t_bad\nall: $(TESTS)\n%: %.c\n\t$(CC) -g -O1 -o $@ $<\n"
        "test: $(TESTS)\n\tfor t in $(TESTS); do ./$$t || exit 1; done\n")
    subprocess.run(["make", "-s", "-C", str(project)], check=True, capture_output=True)
    out, base = tmp_path / "r.json", tmp_path / "baseline.json"
    r = ualdbg("check", "--json", str(out), "--", "make", "-s", "-C", str(project), "test")
    assert r.returncode == 1, r.explain()
    doc = json.loads(out.read_text())
    bad = [p for p in doc["processes"] if p["path"].endswith("/t_bad")]
    assert len(bad) == 1 and bad[0]["faults_total"] == 6, doc["processes"]
    assert doc["faults_total"] == 6 and any(s["file"].endswith("t_bad.c") for s in doc["sites"]), r.explain()
    assert {Path(p["path"]).name for p in doc["processes"]} >= {"make", "t_ok", "t_ok2", "t_bad"}
    assert "per program" in r.stderr and "/t_bad" in r.stderr, r.explain()
    assert ualdbg("check", "--update-baseline", "--baseline", str(base), "--", "make", "-s", "-C", str(project), "test").returncode == 0
    assert ualdbg("check", "--baseline", str(base), "--", "make", "-s", "-C", str(project), "test").returncode == 0
    # A new test with its own unaligned access fails the gate again; a failing test fails it too.
    (project / "t_new.c").write_text((project / "t_bad.c").read_text().replace("b + 3", "b + 5"))
    (project / "Makefile").write_text((project / "Makefile").read_text().replace("t_bad\n", "t_bad t_new\n", 1))
    subprocess.run(["make", "-s", "-C", str(project)], check=True, capture_output=True)
    r = ualdbg("check", "--baseline", str(base), "--", "make", "-s", "-C", str(project), "test")
    assert r.returncode == 1 and "t_new.c" in r.stderr, r.explain()
    (project / "t_ok.c").write_text("int main(void) { return 1; }\n")
    subprocess.run(["make", "-s", "-C", str(project)], check=True, capture_output=True)
    r = ualdbg("check", "--baseline", str(base), "--", "make", "-s", "-C", str(project), "test")
    assert r.returncode == 2, r.explain()  # make's own status when a test fails
    assert os.path.exists(out)
