"""The #AC rule measured on this CPU (ualdbg/agent/src/acprobe/acprobe.c -> alignment.ac_rules) against
what really faults: on programs/vector_moves.c (SSE, AVX, AVX-512 unaligned moves at several
misalignments, an integer and an x87 control) the agent engine (real #AC), the trap engine
(real #AC under gdb) and the step engine (--policy ac, decode + table) agree per PC, and the
count per site is what the probe's table predicts for this CPU."""
from __future__ import annotations

import json
import platform
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.build import build_source
from support.cli import run_cli
from support.env import require_tool

from ualdbg.isa.alignment import AcRules, measure_ac_rules

PROGRAMS = Path(__file__).resolve().parent / "programs"
REPS = 7
FUNCS = ("sse_moves", "avx_moves", "avx512_moves")
# Each access of vector_moves.c's moves(), in program order: (function, probe class, offset
# from a 64-byte-aligned address). Which of them fault is the probe's business, not this file's.
ACCESSES = [
    ("sse_moves", "sse16", 1), ("sse_moves", "sse16", 4), ("sse_moves", "sse16", 8), ("sse_moves", "sse16", 16),
    ("sse_moves", "sse16", 8), ("sse_moves", "sse16", 4), ("sse_moves", "gp8", 4), ("sse_moves", "x87_10", 4),
    ("avx_moves", "vex16", 8), ("avx_moves", "vex32", 8), ("avx_moves", "vex32", 16), ("avx_moves", "vex32", 8),
    ("avx512_moves", "vex64", 8), ("avx512_moves", "vex64", 32), ("avx512_moves", "vex64", 16),
]


@pytest.fixture(scope="module")
def vector_moves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if platform.machine() != "x86_64":
        pytest.fail("the alignment-check probe tests need an x86-64 host")
    require_tool("cc")
    return build_source(PROGRAMS / "vector_moves.c", tmp_path_factory.mktemp("vector-moves"))


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> AcRules:
    """A fresh measurement on this machine, in a cache of its own."""
    require_tool("cc")
    return measure_ac_rules(tmp_path_factory.mktemp("acprobe"), refresh=True)


def units(prog: Path) -> dict[str, bool]:
    line = subprocess.run([str(prog), "1"], capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=") for f in line.split()[1:])
    return {"sse_moves": True, "avx_moves": fields["avx2"] == "1", "avx512_moves": fields["avx512f"] == "1"}


def trace(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    proc = run_cli("trace", *args[:-2], "--json", str(out), "--", *args[-2:])
    assert proc.returncode == 0 and out.exists(), proc.explain()
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def per_pc(doc: dict[str, Any]) -> Counter[str]:
    """Fault counts per PC inside the three move functions (nothing else of the program faults;
    libc's own faults are outside the program's scope)."""
    # An intrinsic (_mm_storeu_si128) inlined into one of FUNCS is the innermost frame, as gdb
    # shows it: the site belongs to the function of its inline chain.
    return Counter({s["pc"]: s["count"] for s in doc["sites"]
                    if {s["function"], *(f["function"] for f in s["inlined_from"])} & set(FUNCS)})


def test_probe_measures_every_class_on_this_cpu(rules: AcRules) -> None:
    assert rules.source == "measured on this CPU" and rules.path.endswith(".json"), rules.describe()
    assert json.loads(Path(rules.path).read_text())["checks"] == dict(rules.checks)
    for cls in ("gp2", "gp4", "gp8", "sse4", "sse8", "sse16", "x87_4", "x87_8", "x87_10"):
        assert cls in rules.checks, (cls, dict(rules.checks))
    # integer, scalar and x87 checks are architectural (SDM): the same on every x86-64
    assert {k: rules.checks[k] for k in ("gp2", "gp4", "gp8", "sse4", "sse8", "x87_8", "x87_10")} == \
        {"gp2": 2, "gp4": 4, "gp8": 8, "sse4": 4, "sse8": 8, "x87_8": 8, "x87_10": 8}
    # the cached table is read back unchanged
    again = measure_ac_rules(Path(rules.path).parent.parent)
    assert dict(again.checks) == dict(rules.checks) and again.cpu == rules.cpu


def test_engines_agree_with_the_measured_rule(vector_moves: Path, rules: AcRules, tmp_path: Path) -> None:
    ran = units(vector_moves)
    expected_sites = sum(1 for func, cls, off in ACCESSES
                         if ran[func] and off % rules.checks.get(cls, 16) != 0)
    scope = [arg for func in FUNCS for arg in ("--in", func)]
    step = trace(tmp_path, "step", "--engine", "step", "--policy", "ac", *scope, str(vector_moves), str(REPS))
    agent = trace(tmp_path, "agent", "--engine", "agent", str(vector_moves), str(REPS))
    assert agent["engine"] == "agent" and step["engine"] == "step" and step["step"]["policy"] == "ac"
    assert per_pc(step) == per_pc(agent), (per_pc(step), per_pc(agent), dict(rules.checks))
    assert sorted(per_pc(agent).values()) == [REPS] * expected_sites, (per_pc(agent), dict(rules.checks))
    # the integer and x87 controls fault on every CPU: the agent really was checking
    assert expected_sites >= 2


def test_trap_engine_agrees(vector_moves: Path, rules: AcRules, tmp_path: Path) -> None:
    require_tool("gdb")
    scope = [arg for func in FUNCS for arg in ("--in", func)]
    step = trace(tmp_path, "step", "--engine", "step", "--policy", "ac", *scope, str(vector_moves), str(REPS))
    trap = trace(tmp_path, "trap", "--engine", "trap", str(vector_moves), str(REPS))
    assert trap["engine"] == "trap"
    assert per_pc(trap) == per_pc(step), (per_pc(trap), per_pc(step), dict(rules.checks))


def test_status_names_the_rule_in_use(vector_moves: Path, rules: AcRules, tmp_path: Path) -> None:
    from support.debuggers import run_gdb

    run = run_gdb([str(vector_moves), "1"], ["ualdbg status"])
    line = next((x for x in run.stdout.splitlines() if "#AC rule:" in x), None)
    assert line is not None, run.stdout + run.stderr
    assert "measured on this CPU" in line and rules.cpu in line, line
    cache = tmp_path / "cache"
    fallback = run_gdb([str(vector_moves), "1"], ["ualdbg status"],
                       env={"CC": str(tmp_path / "no-such-cc"), "XDG_CACHE_HOME": str(cache)})
    assert "#AC rule: built-in rule measured on AMD Zen 3 (PLATFORM.md); not measured here: no C compiler" \
        in fallback.stdout, fallback.stdout + fallback.stderr
