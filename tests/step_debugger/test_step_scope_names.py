"""`--in FUNC` names what gdb names (issue 18), inside real gdb and real lldb-19: a static C
function the compiler inlined into its caller (only DW_TAG_inlined_subroutine ranges, no
symbol) is stepped exactly, and so are C++ functions named by qualified names. The expected
counts are the programs' own (each counts its misaligned reads from their addresses and prints
them); the debugger's own `break NAME` must land inside the scope ualdbg resolved."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from stepdbgrun import DEBUGGERS, trace
from support.build import build_source
from support.debuggers import gdb_break_through, lldb_break_through
from support.run import Result
from support.step import FLAGS, PROGRAMS

SPAN = re.compile(r"(0x[0-9a-f]+)-(0x[0-9a-f]+)")


@pytest.fixture(scope="module")
def inlined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_source(PROGRAMS / "inlined.c", tmp_path_factory.mktemp("inlined"), flags=FLAGS)
    nm = subprocess.run(["nm", str(out)], capture_output=True, text=True, check=True).stdout
    assert "sum_pairs" not in nm, "the test needs sum_pairs inlined (no symbol of its own)"
    return out


def program_output(debugger: str, run: Result, tmp_path: Path) -> str:
    """The program's stdout: gdb shares its own with the program, lldb's went to a file."""
    return run.stdout if debugger == "gdb" else (tmp_path / "lldb.out").read_text()


def scope_spans(doc: dict[str, Any]) -> list[tuple[int, int]]:
    """The [lo, hi) ranges of the step scope the trace recorded (`name (lo-hi, lo-hi)`)."""
    return [(int(lo, 16), int(hi, 16)) for lo, hi in SPAN.findall(doc["step"]["scope"])]


def break_locations(debugger: str, name: str) -> list[str]:
    """Commands (run after the program ended) that make the debugger print where its own
    breakpoint on `name` goes, one `LOC 0x...` line (gdb) or `address = 0x...` (lldb) each."""
    if debugger == "gdb":
        return [f'python [print("LOC", hex(loc.address)) for loc in gdb.Breakpoint("{name}").locations]']
    return [f"breakpoint set -n {name}", "breakpoint list -v"]


def debugger_locations(debugger: str, run: Result) -> set[int]:
    pattern = r"^LOC (0x[0-9a-f]+)$" if debugger == "gdb" else r"address = (0x[0-9a-f]+)"
    return {int(a, 16) for a in re.findall(pattern, run.stdout, re.M)}


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_inlined_static_function_counts_exactly(debugger: str, inlined: Path, tmp_path: Path) -> None:
    n = 40
    doc, run = trace(debugger, [str(inlined), str(n)], "ualdbg trace start --engine step --in sum_pairs",
                     tmp_path / "t.json", tmp_path, after=break_locations(debugger, "sum_pairs"), sigbus_stops=True)
    assert doc is not None, run.explain()
    m = re.search(r"^misaligned reads in sum_pairs: (\d+)$", program_output(debugger, run, tmp_path), re.M)
    assert m, run.explain()  # the program ran to its end (no SIGBUS stopped it)
    want = int(m.group(1))
    assert want >= n, run.explain()
    assert doc["engine"] == "step" and doc["program"]["exit_status"] == 0, run.explain()
    assert doc["faults_total"] == want == sum(s["count"] for s in doc["sites"]), run.explain()
    assert doc["faults_ignored"] == 0, run.explain()
    # main's own misaligned store (the packed header) is outside the scope: not counted
    assert len(doc["sites"]) == 2, doc["sites"]
    for s in doc["sites"]:
        chain = [s["function"]] + [f["function"] for f in s["inlined_from"]]
        assert "sum_pairs" in chain, s
    # One entry (the single inlined copy, entered once), stepped instruction by instruction.
    assert doc["step"]["entries"] == 1 and doc["step"]["steps"] > want, doc["step"]
    spans = scope_spans(doc)
    assert spans, doc["step"]
    # The debugger's own `break sum_pairs` finds the inlined copy inside the scope.
    located = debugger_locations(debugger, run)
    assert located, run.explain()
    assert all(any(lo <= a < hi for lo, hi in spans) for a in located), (located, spans, run.explain())


# C++ names (tests/step/programs/scope_names.cpp): the program's count keys each name covers,
# one function instance per key.
CXX_NAMES = {
    "ns::Klass::method": ("method",),
    "Klass::small": ("small",),  # a method inlined into main: no symbol
    "ns::twice<int>": ("twice_int",),
    "twice": ("twice_int", "twice_long"),
    "func": ("func", "other_func"),  # ns::func and other::func
}


@pytest.fixture(scope="module")
def scope_names(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_source(PROGRAMS / "scope_names.cpp", tmp_path_factory.mktemp("scope_names"), flags=FLAGS)
    nm = subprocess.run(["nm", "-C", str(out)], capture_output=True, text=True, check=True).stdout
    assert "ns::Klass::method(int) const" in nm and "Klass::small" not in nm, nm
    return out


@pytest.mark.parametrize("name", CXX_NAMES)
@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_cxx_names_count_exactly(debugger: str, name: str, scope_names: Path, tmp_path: Path) -> None:
    n = 30
    doc, run = trace(debugger, [str(scope_names), str(n)], f"ualdbg trace start --engine step --in {name}",
                     tmp_path / "t.json", tmp_path, after=break_locations(debugger, name), sigbus_stops=True)
    assert doc is not None, run.explain()
    m = re.search(r"^misaligned reads: (.*)$", program_output(debugger, run, tmp_path), re.M)
    assert m, run.explain()
    counts = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    want = sum(counts[k] for k in CXX_NAMES[name])
    assert doc["program"]["exit_status"] == 0, run.explain()
    assert doc["faults_total"] == want and doc["faults_ignored"] == 0, run.explain()
    assert doc["step"]["scope"].startswith(f"{name} (0x") and doc["step"]["steps"] > want, doc["step"]
    # The debugger's own breakpoint on the name: one location per instance, each in the scope.
    spans, located = scope_spans(doc), debugger_locations(debugger, run)
    assert len(located) == len(CXX_NAMES[name]), run.explain()
    assert all(any(lo <= a < hi for lo, hi in spans) for a in located), (located, spans, run.explain())


@pytest.mark.parametrize("debugger", DEBUGGERS)
def test_break_stops_before_each_read_of_the_inlined_function(debugger: str, inlined: Path, tmp_path: Path) -> None:
    """`ualdbg break --engine step --in sum_pairs`: one stop, with its report, before each of
    the misaligned reads the program counts, and none for main's own misaligned store."""
    program, opts = [str(inlined), "10"], "--engine step --in sum_pairs"
    if debugger == "gdb":
        run, reports, status = gdb_break_through(program, tmp_path, opts, before=["handle SIGBUS stop print nopass"])
    else:
        run, reports, status = lldb_break_through(program, opts, stops=40,
                                                     before=["process handle -s true -n true -p false SIGBUS"])
    m = re.search(r"^misaligned reads in sum_pairs: (\d+)$", run.stdout, re.M)
    assert m and status == 0, run.explain()
    assert len(reports) == int(m.group(1)) >= 10, run.explain()
    assert {r.size for r in reports} == {2, 4} and all(r.va is not None and r.va % r.size for r in reports), run.explain()
    assert all(r.file and Path(r.file).name in ("byteswap.h", "inlined_rd.h", "inlined.c") for r in reports), run.explain()
