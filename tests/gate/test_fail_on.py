"""`check --fail-on split-lock|page-split|line-split|any` (issue 33): a gate on what unaligned
accesses cost. One split lock fails `--fail-on split-lock`, a million line splits pass it; the
default (`any`) is the gate as it was; baselines and `report` take the same filter; the JSON and
SARIF of a gated run carry the classes."""
from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
from support.build import build_source
from support.cli import run_cli
from support.env import require_tool

PROGRAMS = Path(__file__).resolve().parents[1] / "alignment" / "programs"


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if platform.machine() != "x86_64":
        pytest.fail("the cost-class programs are x86-64 assembly")
    require_tool("cc")
    return build_source(PROGRAMS / "cost_classes.c", tmp_path_factory.mktemp("fail-on"))


def verdict(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("ualdbg check:"))


def test_one_split_lock_fails_split_lock_gate(prog: Path, tmp_path: Path) -> None:
    js, sarif = tmp_path / "r.json", tmp_path / "r.sarif"
    r = run_cli("check", "--fail-on", "split-lock", "--json", str(js), "--sarif", str(sarif), "--", str(prog), "splitlock")
    assert r.returncode == 1, r.explain()
    assert verdict(r.stderr) == "ualdbg check: FAIL: 1 split lock (--fail-on split-lock) among 1 unaligned access " \
                                "in scope (allowed 0)", r.stderr
    doc = json.loads(js.read_text())
    [site] = [s for s in doc["sites"] if s["function"] == "locked"]
    assert site["classes"] == {"split-lock": 1} and doc["records"][0]["class"] == "split-lock"
    [result] = [x for x in json.loads(sarif.read_text())["runs"][0]["results"] if x["properties"]["pc"] == site["pc"]]
    assert result["level"] == "error" and result["properties"]["classes"] == {"split-lock": 1}, result


def test_a_million_line_splits_pass_split_lock_gate(prog: Path, tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    r = run_cli("check", "--fail-on", "split-lock", "--json", str(js), "--", str(prog), "lines", "1000000")
    assert r.returncode == 0, r.explain()
    assert verdict(r.stderr) == "ualdbg check: ok: 0 split locks (--fail-on split-lock) among 1,000,000 unaligned " \
                                "accesses in scope (allowed 0)", r.stderr
    doc = json.loads(js.read_text())
    [site] = [s for s in doc["sites"] if s["function"] == "plain"]
    assert site["classes"] == {"line-split": 1_000_000}, site
    # tighter filters catch them; the default gate is what it always was
    for fail_on in ("line-split", "any"):
        again = run_cli("check", "--fail-on", fail_on, "--", str(prog), "lines", "1000")
        assert again.returncode == 1, again.explain()
    default = run_cli("check", "--", str(prog), "lines", "1000")
    assert default.returncode == 1 and "ualdbg check: FAIL: 1,000 unaligned accesses in scope (allowed 0)" \
        in default.stderr, default.explain()
    page = run_cli("check", "--fail-on", "page-split", "--", str(prog), "lines", "1000")
    assert page.returncode == 0, page.explain()


def test_baseline_and_report_take_the_filter(prog: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    # a baseline written under --fail-on split-lock has the split-lock sites only
    r = run_cli("check", "--fail-on", "split-lock", "--update-baseline", "--baseline", str(base), "--", str(prog))
    assert r.returncode == 0, r.explain()
    keys = [s["where"] for s in json.loads(base.read_text())["sites"]]
    assert len(keys) == 2 and all("cost_classes.c" in k for k in keys), keys  # locked, exchange
    # every line split of the program is new to that baseline, but not under --fail-on split-lock
    ok = run_cli("check", "--fail-on", "split-lock", "--baseline", str(base), "--", str(prog))
    assert ok.returncode == 0, ok.explain()
    new = run_cli("check", "--baseline", str(base), "--", str(prog))
    assert new.returncode == 1 and "not in the baseline" in new.stderr, new.explain()
    # report --fail-on: those only, and status 1 when there are any
    js = tmp_path / "all.json"
    run_cli("trace", "--no-patch", "--json", str(js), "--", str(prog))  # a record per fault
    out = tmp_path / "locks.json"
    rep = run_cli("report", str(js), "--fail-on", "split-lock", "--json", str(out))
    assert rep.returncode == 1, rep.explain()
    doc = json.loads(out.read_text())
    assert doc["fail_on"] == "split-lock" and doc["faults_total"] == 52 + 32, doc["faults_total"]
    assert sorted(s["function"] for s in doc["sites"]) == ["exchange", "locked"]
    assert [r["class"] for r in doc["records"]] == ["split-lock"] * (52 + 32)
    lines = tmp_path / "lines.json"
    run_cli("trace", "--json", str(lines), "--", str(prog), "lines", "10")
    clean = run_cli("report", str(lines), "--fail-on", "split-lock", "--summary")
    assert clean.returncode == 0 and "--fail-on split-lock: 0 split locks in scope" in clean.stdout, clean.explain()


def test_bad_fail_on_is_a_usage_error(prog: Path) -> None:
    r = run_cli("check", "--fail-on", "slow", "--", str(prog))
    assert r.returncode == 2 and "invalid choice: 'slow'" in r.stderr and "Traceback" not in r.stderr, r.explain()
