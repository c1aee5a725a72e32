"""`--in` takes C++ names as gdb's `break NAME` does (issue 18): `ns::Klass::method`,
`Klass::method`, `ns::func` (not `other::func`), `func` (both), `ns::twice<int>` (one template
instance), `twice` (all), and `Klass::small`, a method inlined into its caller (no symbol).
tests/step/programs/scope_names.cpp counts each function's misaligned reads itself; the step
engine must count exactly those. Which functions a name finds is checked against real gdb's
`break NAME` on three builds: DWARF and symbols, symbols only (demangled as gdb does), DWARF only."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.build import build_source
from support.cli import run_cli
from support.cli import run_json as ualdbg
from support.debuggers import run_gdb_script
from support.env import require_tool
from support.run import Result
from support.step import FLAGS, PROGRAMS, per_pc

from ualdbg.engines.scope import ScopeError, function_ranges

# The program's count keys each name covers (one function instance per key).
NAMES = {
    "ns::Klass::method": ("method",),
    "Klass::method": ("method",),
    "ns::func": ("func",),
    "func": ("func", "other_func"),
    "ns::twice<int>": ("twice_int",),
    "twice": ("twice_int", "twice_long"),
    "ns::Klass::small": ("small",),  # inlined into main
    "Klass::small": ("small",),
}
# Names gdb's `break` refuses too: whole components only, no such instance or scope.
REFUSED = ["lass::method", "Klass::metho", "twice<char>", "other::Klass::method", "small::Klass"]
PARITY = [*NAMES, "method", "ns::twice<long>", "small", "main", "::Klass::method", *REFUSED]
INLINED = {"ns::Klass::small", "Klass::small", "small"}  # no symbol: DWARF names them
# gdb 13 finds a template function's instance by name without DWARF only when the name has
# no template arguments: its minimal symbol's demangled name starts with the return type.
GDB_MISSES = {("symbols", "ns::twice<int>"), ("symbols", "ns::twice<long>")}
N = 30


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cxx-names")
    full = build_source(PROGRAMS / "scope_names.cpp", root, flags=FLAGS)
    (root / "g0").mkdir()
    symbols = build_source(PROGRAMS / "scope_names.cpp", root / "g0", flags=(*FLAGS, "-g0"))
    (root / "nosym").mkdir()
    require_tool("strip")
    dwarf = root / "nosym" / "scope_names"
    subprocess.run(["strip", "--strip-all", "--keep-section=.debug_*", "-o", str(dwarf), str(full)], check=True)
    nm = subprocess.run(["nm", "-C", str(full)], capture_output=True, text=True, check=True).stdout
    assert "ns::Klass::method(int) const" in nm and "ns::twice<long>" in nm, nm
    assert "Klass::small" not in nm, "the test needs ns::Klass::small inlined (no symbol of its own)"
    assert subprocess.run(["nm", str(dwarf)], capture_output=True, text=True).stdout == ""
    return {"dwarf+symbols": full, "symbols": symbols, "dwarf": dwarf}


def program_counts(stdout: str) -> dict[str, int]:
    m = re.search(r"^misaligned reads: (.*)$", stdout, re.M)
    assert m, stdout
    return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


@pytest.fixture(scope="module")
def trapped(builds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Result:
    """The trap engine (agent) over the whole program, for the per-PC cross-check."""
    run = ualdbg("trace", "--", str(builds["dwarf+symbols"]), str(N), json_path=tmp_path_factory.mktemp("trap") / "t.json")
    assert run.returncode == 0 and run.doc is not None, run.explain()
    return run


def test_the_program_counts_every_misaligned_read(trapped: Result) -> None:
    """The program's own counts are the trap engine's total: nothing else reads misaligned."""
    counts = program_counts(trapped.stdout)
    assert set(counts) == {k for keys in NAMES.values() for k in keys}
    assert all(0 < c <= N for c in counts.values()) and len(set(counts.values())) > 2, counts
    assert trapped.doc is not None and trapped.doc["faults_total"] == sum(counts.values()), trapped.explain()


@pytest.mark.parametrize("name", NAMES)
def test_step_in_a_cxx_name_counts_exactly(builds: dict[str, Path], trapped: Result, name: str, tmp_path: Path) -> None:
    run = ualdbg("trace", "--engine", "step", "--in", name, "--", str(builds["dwarf+symbols"]), str(N), json_path=tmp_path / "s.json")
    assert run.returncode == 0 and run.doc is not None, run.explain()
    counts = program_counts(run.stdout)
    want = sum(counts[k] for k in NAMES[name])
    assert run.doc["faults_total"] == want and run.doc["faults_ignored"] == 0, run.explain()
    scope = run.doc["step"]["scope"]
    assert scope["label"] == name and scope["ranges"] and run.doc["step"]["instructions_stepped"] > want, run.doc["step"]
    assert trapped.doc is not None
    trap = per_pc(trapped.doc)
    assert all(trap[pc] == count for pc, count in per_pc(run.doc).items()), (per_pc(run.doc), trap)


def test_symbols_only_names_come_from_demangled_symbols(builds: dict[str, Path], tmp_path: Path) -> None:
    """Without DWARF, `twice` and `Klass::method` are found through demangled symbols."""
    for name in ("twice", "Klass::method"):
        run = ualdbg("trace", "--engine", "step", "--in", name, "--", str(builds["symbols"]), str(N), json_path=tmp_path / "s.json")
        assert run.returncode == 0 and run.doc is not None, run.explain()
        counts = program_counts(run.stdout)
        assert run.doc["faults_total"] == sum(counts[k] for k in NAMES[name]), run.explain()


LOCATIONS = '''
import gdb, json
out = {}
for name in json.loads(%r):
    try:
        out[name] = [int(loc.address) for loc in gdb.Breakpoint(name).locations]
    except gdb.error:
        out[name] = []
print("LOCATIONS", json.dumps(out))
'''


@pytest.mark.parametrize("variant", ["dwarf+symbols", "symbols", "dwarf"])
def test_names_find_what_gdbs_break_finds(builds: dict[str, Path], variant: str, tmp_path: Path) -> None:
    """For each name, gdb's `break NAME` finds something exactly when `--in NAME` does, and
    every place gdb would stop is inside the scope (link-time addresses: nothing runs)."""
    program = builds[variant]
    run = run_gdb_script([str(program)], LOCATIONS % json.dumps(PARITY), tmp_path, source=False)
    m = re.search(r"^LOCATIONS (.*)$", run.stdout, re.M)
    assert m, run.explain()
    located: dict[str, list[int]] = json.loads(m.group(1))
    differ, found = set(), set()
    for name in PARITY:
        try:
            ours = function_ranges(str(program), name)
        except ScopeError:
            ours = []
        gdbs = located[name]
        if bool(ours) != bool(gdbs):
            differ.add((variant, name))
        assert all(any(lo <= a < hi for lo, hi in ours) for a in gdbs), (variant, name, gdbs, ours)
        if ours:
            found.add(name)
    assert differ == {d for d in GDB_MISSES if d[0] == variant}, (differ, located)
    assert found == set(PARITY) - set(REFUSED) - (INLINED if variant == "symbols" else set()), located


@pytest.mark.parametrize(("typed", "first", "also"), [
    ("Klass::metod", "ns::Klass::method", ()),
    ("twise", None, ("ns::twice<int>", "ns::twice<long>")),
    ("ns::fun", "ns::func", ()),
    ("Klass::smal", "ns::Klass::small", ()),  # inlined: its name is in DWARF only
])
def test_a_name_matching_nothing_lists_qualified_names(builds: dict[str, Path], typed: str, first: str | None,
                                                       also: tuple[str, ...]) -> None:
    p = run_cli("trace", "--engine", "step", "--in", typed, "--", str(builds["dwarf+symbols"]), "3", timeout=120)
    m = re.search(r"no function named (\S+) in scope_names or its libraries; did you mean (.*)\?$", p.stderr.strip())
    assert p.returncode == 2 and m and m.group(1) == typed, p.stderr
    names = m.group(2).split(", ")
    assert (first is None or names[0] == first) and set(also) <= set(names), names
