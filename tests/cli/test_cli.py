"""The `ualdbg` shell command on the compiled examples: exact counts in the JSON, the program
unchanged (stdio, exit status, environment), CI exit codes, SARIF, and clear bad-input errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.cli import run_cli
from support.debuggers import run_gdb
from support.env import BUILD, ROOT, require_tool, scrubbed_env
from support.expected import by_location, expected_by_program
from support.run import Result

CASES = sorted(expected_by_program().items())


def ualdbg(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> Result:
    require_tool("gdb")
    if args and args[0] in ("trace", "check") and "--engine" not in args:
        args = (args[0], "--engine", "trap", *args[1:])  # these tests are about the gdb trap engine
    return run_cli(*args, stdin=stdin, env=env, timeout=timeout)


@pytest.mark.parametrize("key,rows", CASES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in CASES])
def test_trace_json_counts_are_exact(key, rows, tmp_path: Path) -> None:
    prog, args = key
    out = tmp_path / "t.json"
    p = ualdbg("trace", "--json", str(out), "--", str(BUILD / prog), *args)
    assert p.returncode == 0, p.explain()
    doc = json.loads(out.read_text())
    assert by_location(doc) == Counter({r.location: r.count for r in rows if r.count}), p.explain()
    assert doc["faults_total"] == sum(r.count for r in rows), p.explain()
    assert doc["schema"] == 1 and doc["debugger"] == "gdb" and doc["engine"] == "trap"
    assert doc["program"]["exit_status"] == 0 and doc["program"]["args"] == list(args)
    assert len(doc["records"]) == doc["faults_total"] and doc["records_dropped"] == 0
    for s in doc["sites"]:
        assert sum(1 for r in doc["records"] if r["pc"] == s["pc"]) == s["count"]


def test_wrapped_ring_keeps_counts_exact(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    p = ualdbg("trace", "--buffer", "7", "--json", str(out), "--", str(BUILD / "threads"), "10")
    doc = json.loads(out.read_text())
    assert doc["faults_total"] == 60 and len(doc["records"]) == 7 and doc["records_dropped"] == 53, p.explain()
    assert by_location(doc) == Counter({"threads.c:41": 10, "threads.c:53": 20, "threads.c:63": 30}), p.explain()
    assert [r["seq"] for r in doc["records"]] == list(range(54, 61))


def test_threads_records_carry_their_thread(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    p = ualdbg("trace", "--json", str(out), "--", str(BUILD / "threads"), "10")
    doc = json.loads(out.read_text())
    pid = doc["program"]["pid"]
    tids_by_pc: dict[str, set[int]] = {}
    for r in doc["records"]:
        assert r["pid"] == pid and r["cpu"] is not None and r["cpu"] >= 0
        tids_by_pc.setdefault(r["pc"], set()).add(r["tid"])
    assert len(tids_by_pc) == 3 and all(len(t) == 1 for t in tids_by_pc.values()), p.explain()
    tids = {next(iter(t)) for t in tids_by_pc.values()}
    assert len(tids) == 3 and pid not in tids, p.explain()


@pytest.mark.parametrize("prog,args", [("not_aligned", ["300"]), ("threads", ["10"]), ("sigbus_handler", ["3"]),
                                       ("packed_header", ["20"]), ("common_block", ["100"])])
def test_program_behaves_as_alone(prog: str, args: list[str]) -> None:
    direct = subprocess.run([str(BUILD / prog), *args], capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT)
    p = ualdbg("trace", "--json", "/dev/null", "--", str(BUILD / prog), *args)
    scrub = lambda s: re.sub(r"0x[0-9a-f]+", "ADDR", s)  # noqa: E731 - heap addresses move with ASLR
    # stdout is the program's alone; ualdbg's report follows the program's own stderr.
    assert scrub(p.stdout) == scrub(direct.stdout), p.explain()
    assert p.returncode == direct.returncode, p.explain()
    assert p.stderr.startswith(direct.stderr) and "Unaligned accesses in " in p.stderr[len(direct.stderr):], p.explain()


def test_stdin_environment_and_exit_status_pass_through(tmp_path: Path) -> None:
    env = {"UALDBG_TEST_VAR": "x" * 100}
    direct = subprocess.run(["/usr/bin/env"], capture_output=True, text=True, env=scrubbed_env(env))
    p = ualdbg("trace", "--json", str(tmp_path / "e.json"), "--", "/usr/bin/env", env=env)
    traced = p.stdout.split("Unaligned accesses in ")[0]
    strip_underscore = lambda s: sorted(line for line in s.splitlines() if not line.startswith("_="))  # noqa: E731
    assert strip_underscore(traced) == strip_underscore(direct.stdout), p.explain()
    p = ualdbg("trace", "--json", str(tmp_path / "c.json"), "--", "/bin/cat", stdin="hello\nworld\n")
    assert p.stdout.startswith("hello\nworld\n"), p.explain()
    p = ualdbg("trace", "--json", str(tmp_path / "s.json"), "--", "/bin/sh", "-c", "exit 7")
    assert p.returncode == 7, p.explain()
    assert json.loads((tmp_path / "s.json").read_text())["program"]["exit_status"] == 7


def test_program_killed_by_a_signal(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    p = ualdbg("trace", "--json", str(out), "--", "/bin/sh", "-c", "kill -SEGV $$")
    assert p.returncode in (-11, 139), p.explain()
    assert json.loads(out.read_text())["program"]["exit_signal"] == 11


def test_program_that_never_faults(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    p = ualdbg("check", "--json", str(out), "--", str(BUILD / "aligned"), "1000")
    assert p.returncode == 0, p.explain()
    assert json.loads(out.read_text())["faults_total"] == 0
    assert "ok: 0 unaligned accesses" in p.stderr


def test_check_exit_codes_and_sarif(tmp_path: Path) -> None:
    sarif = tmp_path / "r.sarif"
    p = ualdbg("check", "--sarif", str(sarif), "--json", str(tmp_path / "r.json"), "--", str(BUILD / "memalign"), "100", "5")
    assert p.returncode == 1, p.explain()
    assert "FAIL: 1,200 unaligned accesses" in p.stderr
    doc = json.loads(sarif.read_text())
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    assert run["tool"]["driver"]["name"] == "ualdbg" and run["tool"]["driver"]["rules"][0]["id"] == "ualdbg/unaligned-access"
    locs = {}
    for r in run["results"]:
        assert r["ruleId"] == "ualdbg/unaligned-access" and "unaligned" in r["message"]["text"]
        phys = r["locations"][0]["physicalLocation"]
        key = (Path(phys["artifactLocation"]["uri"]).name, phys["region"]["startLine"])
        locs[key] = locs.get(key, 0) + r["properties"]["count"]  # one result per PC; line 40 has two
    assert locs == {("memalign.c", 31): 100, ("memalign.c", 32): 100, ("memalign.c", 40): 1000}
    assert any(re.search(r"virtual address 0x[0-9a-f]+", r["message"]["text"]) for r in run["results"])
    p = ualdbg("check", "--max-faults", "1200", "--json", "/dev/null", "--", str(BUILD / "memalign"), "100", "5")
    assert p.returncode == 0, p.explain()


@pytest.mark.parametrize("argv,needle,status", [
    # A program that cannot be run gets the shell's status (issue 29: 127 not found, 126 cannot
    # execute), as env(1) and timeout(1) give; usage errors and bad input stay 2.
    (["trace", "--", "/nonexistent/prog"], "no such file", 127),
    (["trace", "--", str(ROOT / "README.md")], "not an ELF", 126),
    (["check", "--", "/nonexistent/prog"], "no such file", 127),
    (["trace", "--buffer", "0", "--", str(BUILD / "aligned")], "must be positive", 2),
    (["trace", "--buffer", "-3", "--", str(BUILD / "aligned")], "must be positive", 2),
    (["trace"], "name the program", 2),
    (["report", "/nonexistent.json"], "cannot read", 2),
    (["report", str(ROOT / "README.md")], "not a ualdbg JSON trace", 2),
])
def test_bad_input_one_line(argv: list[str], needle: str, status: int) -> None:
    p = ualdbg(*argv)
    assert p.returncode == status, p.explain()
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip() and not line.startswith("usage:")]
    assert len(lines) == 1 and needle in lines[0], p.explain()


def test_json_to_stdout_is_only_results(tmp_path: Path) -> None:
    """`report --json -` (no program shares stdout) writes the document alone; a traced program
    would share it, so trace refuses `--json -` (tests/gate/test_trust.py: `--json fd:N`)."""
    saved = tmp_path / "t.json"
    assert ualdbg("trace", "--json", str(saved), "--", str(BUILD / "aligned"), "100").returncode == 0
    p = ualdbg("report", "--json", "-", str(saved))
    doc = json.loads(p.stdout)
    assert doc["faults_total"] == 0 and "Unaligned accesses" not in p.stdout, p.explain()


def test_report_rerenders_a_saved_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    ualdbg("trace", "--json", str(out), "--", str(BUILD / "memalign"), "100", "5")
    p = ualdbg("report", str(out), "--by", "line")
    assert p.returncode == 0, p.explain()
    rows = [line for line in p.stdout.splitlines() if "memalign.c:" in line]
    assert len(rows) == 3 and rows[0].split()[0] == "1000", p.explain()
    p = ualdbg("report", str(out), "--by", "function")
    assert p.returncode == 0 and "fill" in p.stdout or "sum" in p.stdout, p.explain()
    p = ualdbg("report", str(out), "--limit", "5")
    assert len([line for line in p.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d+", line)]) == 5, p.explain()


def normalise(doc: dict) -> dict:
    """What must match between two runs of the same program: everything but time, CPU, ids
    and absolute addresses of the randomised load."""
    d = json.loads(json.dumps(doc))
    d.pop("duration_s")
    d.pop("debugger")
    d["program"].pop("pid")
    for s in d["sites"]:
        s.pop("pc")
    base = {r["pc"]: f"{s['module']}+{s['offset']}" for r, s in ((r, next(x for x in doc["sites"] if x["pc"] == r["pc"])) for r in doc["records"])}
    for r in d["records"]:
        for k in ("time", "cpu", "pid", "tid", "va"):
            r.pop(k)
        r["pc"] = base[r["pc"]]
        r.pop("seq")
    # Threads interleave differently from run to run: compare the records as a multiset.
    d["records"] = sorted(d["records"], key=lambda r: json.dumps(r, sort_keys=True))
    d.pop("buffer", None)
    return d


@pytest.mark.parametrize("prog,args", [("memalign", ["100", "5"]), ("threads", ["10"]), ("packed_header", ["20"])])
def test_gdb_trace_save_equals_cli_json(prog: str, args: list[str], tmp_path: Path) -> None:
    cli = tmp_path / "cli.json"
    in_gdb = tmp_path / "gdb.json"
    ualdbg("trace", "--json", str(cli), "--", str(BUILD / prog), *args)
    run = run_gdb([str(BUILD / prog), *args], ["ualdbg trace start --engine trap", "run", f"ualdbg trace save {in_gdb}"])
    a, b = json.loads(cli.read_text()), json.loads(in_gdb.read_text())
    a["program"]["path"] = b["program"]["path"] = os.path.basename(b["program"]["path"] or "")
    assert normalise(a) == normalise(b), run.explain()
