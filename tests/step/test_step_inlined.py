"""`--in FUNC` names what gdb's `break FUNC` names (issue 18): a static function the compiler
inlined into its caller has no symbol, only DW_TAG_inlined_subroutine ranges; the native
stepper steps exactly those, with the trap engine's (agent's) counts at the same PCs."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.build import build_source
from support.cli import run_cli
from support.run import Result
from support.step import FLAGS, PROGRAMS


@pytest.fixture(scope="module")
def inlined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_source(PROGRAMS / "inlined.c", tmp_path_factory.mktemp("inlined"), flags=FLAGS)
    nm = subprocess.run(["nm", str(out)], capture_output=True, text=True, check=True).stdout
    assert "sum_pairs" not in nm, "the test needs sum_pairs inlined (no symbol of its own)"
    return out


def misaligned_reads(stdout: str) -> int:
    """What the program says sum_pairs read misaligned (it counts from the addresses)."""
    m = re.search(r"^misaligned reads in sum_pairs: (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1))


def trace(*args: str) -> tuple[Result, dict]:
    folder = Path(args[-2]).parent  # the program's (temporary) folder
    out = folder / f"t{len(list(folder.iterdir()))}.json"
    p = run_cli("trace", "--json", str(out), *args)
    assert p.returncode == 0, p.explain()
    return p, json.loads(out.read_text())


def test_step_in_an_inlined_function_counts_exactly(inlined: Path) -> None:
    n = 40
    _, agent = trace("--", str(inlined), str(n))
    p, step = trace("--engine", "step", "--in", "sum_pairs", "--", str(inlined), str(n))
    want = misaligned_reads(p.stdout)
    assert want >= n
    stepped = {s["pc"]: s["count"] for s in step["sites"]}
    trapped = {s["pc"]: s["count"] for s in agent["sites"]}
    # The misaligned loads of each pair (rd32's 4-byte and rd16's 2-byte), nothing of main's own.
    assert step["faults_total"] == want and len(stepped) == 2, step["sites"]
    assert all(trapped[pc] == count for pc, count in stepped.items()), (stepped, trapped)
    assert agent["faults_total"] == want + 1  # main's store to the packed header: outside the scope
    for s in step["sites"]:
        chain = [s["function"]] + [f["function"] for f in s["inlined_from"]]
        assert "sum_pairs" in chain, s


def test_a_name_matching_nothing_lists_the_closest(inlined: Path) -> None:
    p = run_cli("trace", "--engine", "step", "--in", "sum_pair", "--", str(inlined), "3", timeout=120)
    assert p.returncode == 2 and p.stderr.strip().endswith("did you mean sum_pairs?"), p.explain()
