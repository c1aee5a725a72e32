"""Cost classes (issue 33) counted exactly per site and per record by every engine, on
programs/cost_classes.c: plain, vector (movsd) and locked (lock add, xchg) accesses inside a line,
across a line and across a page, each kind one instruction run at every offset. The agent
(patched: the trampoline counts; --no-patch: every fault traps), the trap engine under gdb and
under lldb, the native stepper and gdb's step engine must all give the same table; the summary,
the JSON and SARIF carry it; the cost probe prices the classes on this CPU."""
from __future__ import annotations

import json
import platform
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.build import build_source
from support.cli import run_cli
from support.debuggers import run_gdb
from support.env import require_tool

PROGRAMS = Path(__file__).resolve().parent / "programs"
FUNCS = ("plain", "vector", "locked", "exchange")
# What cost_classes.c does: per function (one site each), the accesses of each class.
EXPECTED = {
    "plain": {"inside-line": 3, "line-split": 5, "page-split": 7},
    "vector": {"inside-line": 11, "line-split": 13, "page-split": 17},
    "locked": {"inside-line": 19, "split-lock": 23 + 29},
    "exchange": {"inside-line": 3, "split-lock": 31 + 1},
}
VECTOR = {"plain": False, "vector": True, "locked": False, "exchange": False}
STEP_SCOPE = [arg for f in FUNCS for arg in ("--in", f)]
ENGINES = {
    "agent-patched": ["--engine", "agent", "--patch-after", "2"],
    "agent-no-patch": ["--engine", "agent", "--no-patch"],
    "trap-gdb": ["--engine", "trap", "--debugger", "gdb"],
    "trap-lldb": ["--engine", "trap", "--debugger", "lldb"],
    "step-native": ["--engine", "step", *STEP_SCOPE],
}


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if platform.machine() != "x86_64":
        pytest.fail("the cost-class programs are x86-64 assembly")
    require_tool("cc")
    return build_source(PROGRAMS / "cost_classes.c", tmp_path_factory.mktemp("cost-classes"))


def by_function(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["function"]: s for s in doc["sites"] if s["function"] in FUNCS}


def record_classes(doc: dict[str, Any], sites: dict[str, dict[str, Any]]) -> dict[str, Counter[str]]:
    """Each function's records counted by their class."""
    name = {s["pc"]: f for f, s in sites.items()}
    out: dict[str, Counter[str]] = {f: Counter() for f in sites}
    for r in doc["records"]:
        if r["pc"] in name:
            out[name[r["pc"]]][r["class"]] += 1
    return out


def check_table(doc: dict[str, Any], every_record: bool) -> None:
    sites = by_function(doc)
    assert sorted(sites) == sorted(FUNCS), doc["sites"]
    for f, want in EXPECTED.items():
        assert sites[f]["classes"] == want, (f, sites[f])
        assert sites[f]["count"] == sum(want.values()), (f, sites[f])
        assert sites[f]["vector"] is VECTOR[f], (f, sites[f])
    if every_record:  # one record per fault: their classes add up to the sites'
        assert record_classes(doc, sites) == {f: Counter(w) for f, w in EXPECTED.items()}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_counts_each_class_exactly(engine: str, prog: Path, tmp_path: Path) -> None:
    if engine == "trap-gdb":
        require_tool("gdb")
    if engine == "trap-lldb":
        require_tool("lldb-19")
    out = tmp_path / "t.json"
    r = run_cli("trace", *ENGINES[engine], "--json", str(out), "--", str(prog), timeout=600)
    assert r.returncode == 0 and out.exists(), r.explain()
    doc = json.loads(out.read_text())
    check_table(doc, every_record=engine != "agent-patched")
    if engine == "agent-patched":  # the trampolines counted most of them: the classes are theirs too
        assert all(s.get("patched") for s in by_function(doc).values()), doc["sites"]
        sites = by_function(doc)
        for f, got in record_classes(doc, sites).items():  # the records it has (the first traps) are classed
            assert sum(got.values()) == sites[f]["trapped"], (f, got, sites[f])
    # the summary names the classes and ranks by the estimated extra time, saying it is an estimate
    assert "SPLIT" in r.stderr and "ESTIMATE" in r.stderr and "cost probe" in r.stderr, r.stderr


def test_gdb_step_engine_counts_each_class(prog: Path, tmp_path: Path) -> None:
    require_tool("gdb")
    out = tmp_path / "g.json"
    run = run_gdb([str(prog)], [f"ualdbg trace start --engine step {' '.join(STEP_SCOPE)}", "run",
                                f"ualdbg trace save {out}"])
    assert out.exists(), run.stdout + run.stderr
    check_table(json.loads(out.read_text()), every_record=True)


def test_sarif_levels_by_class(prog: Path, tmp_path: Path) -> None:
    js, sarif = tmp_path / "c.json", tmp_path / "c.sarif"
    r = run_cli("check", "--json", str(js), "--sarif", str(sarif), "--", str(prog))
    assert r.returncode == 1, r.explain()
    doc = json.loads(js.read_text())
    level = {res["properties"]["pc"]: res["level"] for res in json.loads(sarif.read_text())["runs"][0]["results"]}
    sites = by_function(doc)
    assert {f: level[s["pc"]] for f, s in sites.items()} == \
        {"plain": "warning", "vector": "warning", "locked": "error", "exchange": "error"}
    inside = [s for s in doc["sites"] if s.get("classes") == {"inside-line": s["count"]}]
    assert inside and all(level[s["pc"]] == "note" for s in inside), doc["sites"]


def test_break_report_names_the_class(prog: Path) -> None:
    """Faults 1, 4, 9 and 76 of the program: plain inside a line, across a line, across a page,
    then the first locked add across a line (`continue N` passes N - 1 stops)."""
    require_tool("gdb")
    run = run_gdb([str(prog)], ["ualdbg break", "run", "continue 3", "continue 5", "continue 67"])
    reports = [line.strip().split(":")[1].strip() for line in run.stdout.splitlines() if line.strip().startswith("cost:")]
    assert reports == ["inside-line", "line-split", "page-split", "split-lock"], run.stdout + run.stderr


def test_probe_prices_the_classes(tmp_path: Path) -> None:
    require_tool("cc")
    from ualdbg.isa.costclass import measure_costs

    costs = measure_costs(tmp_path / "cache", refresh=True)
    m = costs.measured
    assert {"aligned", "inside-line", "line-split", "page-split", "locked-aligned"} <= set(m), m
    assert all(v >= 0 for v in m.values()) and m["aligned"] > 0, m
    assert m["line-split"] > m["aligned"], m  # a split costs a second access on every x86 we know
    if "split-lock" in m:
        assert m["split-lock"] > m["locked-aligned"], m
    else:
        assert costs.note, costs
    assert "cost probe" in costs.how and "pinned" in costs.how
    again = measure_costs(tmp_path / "cache")  # read back from the cache, not measured again
    assert dict(again.measured) == dict(m)


def test_agent_classes_stack_string_and_transfer_ops_as_its_records_say(tmp_path: Path) -> None:
    """The agent's handler sizes push, pop, call, ret, calls and jumps through memory, string
    instructions and far returns itself (agent.c, count_class): its per-site counts must be what
    ualdbg's decoder makes of each record (tests/fixtures/agent/odd_insns.c, one record per fault)."""
    require_tool("cc")
    odd = build_source(PROGRAMS.parents[1] / "fixtures" / "agent" / "odd_insns.c", tmp_path)
    out = tmp_path / "o.json"
    r = run_cli("trace", "--no-patch", "--json", str(out), "--", str(odd), "3")
    assert r.returncode == 0 and out.exists(), r.explain()
    doc = json.loads(out.read_text())
    assert doc["records_dropped"] == 0 and len(doc["sites"]) >= 8, doc["sites"]
    tally: dict[str, Counter[str]] = {}
    for rec in doc["records"]:
        tally.setdefault(rec["pc"], Counter())[rec["class"]] += 1
    assert {s["pc"]: s["classes"] for s in doc["sites"]} == {pc: dict(c) for pc, c in tally.items()}
    # only lretq's is not known (its far pointer's size neither side models): every other one is
    assert [s["function"] for s in doc["sites"] if "unknown" in s["classes"]] == ["far_return"], doc["sites"]
