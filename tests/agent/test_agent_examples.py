"""`ualdbg trace --engine agent` on the examples: exact per-line counts (examples/README.md), the
threads example, a wrapping ring, `rep movsq`, the program unchanged, and the same JSON as the
trap engine for the same program."""
from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from agentrun import build_agent_programs, comparable, require_agent, trace
from support.env import BUILD, ROOT, require_tool, scrubbed_env
from support.expected import by_location, expected_by_program

CASES = sorted(expected_by_program().items())


@pytest.fixture(autouse=True)
def _agent() -> None:
    require_agent()


@pytest.fixture(scope="module")
def agent_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_agent_programs(tmp_path_factory)


@pytest.mark.parametrize("key,rows", CASES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in CASES])
def test_counts_are_exact(key, rows, tmp_path: Path) -> None:
    prog, args = key
    run = trace([str(BUILD / prog), *args], tmp_path)
    assert run.returncode == 0 and run.doc is not None, run.explain()
    doc = run.doc
    assert doc["engine"] == "agent" and doc["debugger"] == "none", run.explain()
    assert by_location(doc) == Counter({r.location: r.count for r in rows if r.count}), run.explain()
    assert doc["faults_total"] == sum(r.count for r in rows), run.explain()
    for s in doc["sites"]:
        row = next((r for r in rows if r.count and r.location in (f"{Path(s['file'] or '').name}:{s['line']}",
                                                                   f"{s['function']}+{s['function_offset']}",
                                                                   f"{s['module']}+{s['offset']}")), None)
        assert row is not None and s["sizes"] == [row.size], run.explain()
    assert doc["program"]["exit_status"] == 0 and doc["program"]["args"] == list(args)
    # A patched site (issue 21) keeps a record for each fault that trapped, the first ones.
    assert len(doc["records"]) == sum(s.get("trapped", s["count"]) for s in doc["sites"]), run.explain()
    assert doc["records_dropped"] == 0, run.explain()
    for s in doc["sites"]:
        assert sum(1 for r in doc["records"] if r["pc"] == s["pc"]) == s.get("trapped", s["count"])
    assert "Traceback" not in run.stderr and run.stderr == "", run.explain()
    assert doc["agent"]["single_stepped"] == 0, run.explain()


def test_wrapped_ring_keeps_counts_exact(tmp_path: Path) -> None:
    run = trace([str(BUILD / "threads"), "10"], tmp_path, "--buffer", "7", "--no-patch")
    doc = run.doc
    assert doc is not None, run.explain()
    assert doc["faults_total"] == 60 and len(doc["records"]) == 7 and doc["records_dropped"] == 53, run.explain()
    assert by_location(doc) == Counter({"threads.c:41": 10, "threads.c:53": 20, "threads.c:63": 30}), run.explain()
    assert [r["seq"] for r in doc["records"]] == list(range(54, 61))
    # The sizes and directions of every site stay exact too, though most faults left the ring.
    assert {(s["line"], tuple(s["sizes"]), s["access"]) for s in doc["sites"]} == {
        (41, (4,), "write"), (53, (8,), "read"), (63, (2,), "read-write")}, run.explain()


def test_threads_records_carry_their_thread(tmp_path: Path) -> None:
    run = trace([str(BUILD / "threads"), "10"], tmp_path)
    doc = run.doc
    assert doc is not None, run.explain()
    pid = doc["program"]["pid"]
    tids_by_pc: dict[str, set[int]] = {}
    for r in doc["records"]:
        assert r["pid"] == pid and r["cpu"] is not None and r["cpu"] >= 0
        tids_by_pc.setdefault(r["pc"], set()).add(r["tid"])
    assert len(tids_by_pc) == 3 and all(len(t) == 1 for t in tids_by_pc.values()), run.explain()
    tids = {next(iter(t)) for t in tids_by_pc.values()}
    assert len(tids) == 3 and pid not in tids, run.explain()
    assert doc["agent"]["threads"] == 3 and doc["agent"]["threads_started_with_sigbus_blocked"] == 0


def test_rep_movsq_counts_each_element(tmp_path: Path) -> None:
    """One fault per element: with --no-patch a trap and a record each; patched (issue 34), the same
    count, the elements after the patch counted by its block without a record."""
    for k in (1, 5, 37):
        run = trace([str(BUILD / "rep_string"), str(k)], tmp_path, "--no-patch")
        assert run.doc is not None and by_location(run.doc) == Counter({"rep_string.c:29": k}), run.explain()
        vas = sorted(int(r["va"], 16) for r in run.doc["records"])
        assert [v - vas[0] for v in vas] == [8 * i for i in range(k)], run.explain()  # one per element
        patched = trace([str(BUILD / "rep_string"), str(k)], tmp_path)
        assert patched.doc is not None and by_location(patched.doc) == Counter({"rep_string.c:29": k}), \
            patched.explain()
        site = patched.doc["sites"][0]
        assert bool(site.get("patched")) == (k > 2) and site.get("trapped", k) == min(k, 2), patched.explain()


@pytest.mark.parametrize("prog,args", [("not_aligned", ["300"]), ("threads", ["10"]), ("sigbus_handler", ["3"]),
                                       ("packed_header", ["20"]), ("common_block", ["100"]), ("rep_string", ["9"])])
def test_program_behaves_as_alone(prog: str, args: list[str], tmp_path: Path) -> None:
    direct = subprocess.run([str(BUILD / prog), *args], capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT)
    run = trace([str(BUILD / prog), *args], tmp_path)
    scrub = lambda s: re.sub(r"0x[0-9a-f]+", "ADDR", s)  # noqa: E731 - heap addresses move with ASLR
    assert scrub(run.stdout) == scrub(direct.stdout), run.explain()
    assert run.returncode == direct.returncode and run.stderr == direct.stderr, run.explain()


@pytest.mark.parametrize("prog,args", [("memalign", ["100", "5"]), ("threads", ["10"]), ("packed_header", ["20"]),
                                       ("rep_string", ["5"]), ("not_aligned_stripped", ["200"]),
                                       ("common_block", ["100"]), ("sigbus_handler", ["3"])])
def test_same_json_as_the_trap_engine(prog: str, args: list[str], tmp_path: Path) -> None:
    require_tool("gdb")
    agent = trace([str(BUILD / prog), *args], tmp_path, "--no-patch")  # one record per fault, as the trap engine
    trap = trace([str(BUILD / prog), *args], tmp_path, engine="trap")
    assert agent.doc is not None and trap.doc is not None, agent.explain() + trap.explain()
    assert trap.doc["engine"] == "trap"
    # PCs and data addresses included: both engines run the program with ASLR off.
    assert comparable(agent.doc) == comparable(trap.doc), agent.explain() + trap.explain()


def test_same_json_as_the_trap_engine_on_odd_instructions(agent_programs: Path, tmp_path: Path) -> None:
    require_tool("gdb")
    prog = [str(agent_programs / "odd_insns"), "3"]
    agent, trap = trace(prog, tmp_path, "--no-patch"), trace(prog, tmp_path, engine="trap")
    assert agent.doc is not None and trap.doc is not None, agent.explain() + trap.explain()
    assert comparable(agent.doc) == comparable(trap.doc), agent.explain() + trap.explain()
    assert agent.stdout == trap.stdout


def test_faults_out_of_scope_are_counted_per_module(tmp_path: Path) -> None:
    """Out-of-scope traps are counted by module; --all-modules puts them in scope."""
    run = trace([str(BUILD / "rep_string"), "5"], tmp_path)
    doc = run.doc
    assert doc is not None and doc["faults_ignored"] == sum(doc["ignored_by_module"].values()) > 0, run.explain()
    # Out of scope too, a patched site counts its faults without trapping (issue 21).
    patching = doc["agent"]["patching"]
    patched_out = patching["faults_counted_by_patches"] - patching["faults_in_scope_without_record"]
    assert doc["faults_ignored"] == doc["agent"]["out_of_scope"]["traps"] + patched_out, run.explain()
    every = trace([str(BUILD / "rep_string"), "5"], tmp_path, "--all-modules")
    assert every.doc is not None and every.doc["faults_ignored"] == 0 and every.doc["faults_total"] > 5, every.explain()
    assert every.doc["scope"] == "all modules"


def test_arming_at_start_includes_constructors(tmp_path: Path) -> None:
    at_main = trace([str(BUILD / "not_aligned"), "10"], tmp_path, "--all-modules")
    at_start = trace([str(BUILD / "not_aligned"), "10"], tmp_path, "--all-modules", "--at", "start")
    assert at_main.doc is not None and at_start.doc is not None
    assert at_start.doc["agent"]["armed_at"] == "start"
    assert at_start.doc["faults_total"] > at_main.doc["faults_total"], at_start.explain()
    assert by_location(at_start.doc)["not_aligned.c:38"] == 10
