"""Records a team keeps (issue 31): merged runs keep every site and add up, baselines and SARIF
fingerprints survive edits elsewhere in the source and catch new faulting lines and new calls of
an inlined helper, and the JSON document has a stream of its own beside the program's stdout."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from support.build import build_program
from support.cli import run_cli
from support.env import require_tool
from support.run import Result, run

PROGRAMS = Path(__file__).resolve().parent / "programs"
SOURCE = (PROGRAMS / "trust.c").read_text()


def ualdbg(*args: str) -> Result:
    return run_cli(*args, timeout=300)


def _program(folder: Path, source: str = SOURCE) -> Path:
    """trust.c as `source` says, built from its own folder (DWARF names the file there)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trust.c").write_text(source)
    return build_program(folder / "trust", "trust.c", flags=("-g", "-O1"), cwd=folder)


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.split("\n"), 1) if text in line)


@pytest.fixture(scope="module")
def trust(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _program(tmp_path_factory.mktemp("trust"))


def _sites(doc: dict) -> dict[tuple, int]:
    return {(s["module"], s["offset"]): s["count"] for s in doc["sites"]}


# --- 1. merging is exact ----------------------------------------------------------------------

def test_merging_a_trace_with_itself_doubles_every_site(trust: Path, tmp_path: Path) -> None:
    """The read and the write of `*p = *p + 3` are two PCs on one line: both survive a merge,
    each with twice its count, in the JSON and in the SARIF."""
    one, merged, sarif = tmp_path / "t.json", tmp_path / "m.json", tmp_path / "m.sarif"
    r = ualdbg("trace", "--json", str(one), "--", str(trust), "3")
    assert r.returncode == 0, r.explain()
    doc = json.loads(one.read_text())
    bump = _line_of(SOURCE, "*p = *p + 3")
    assert len([s for s in doc["sites"] if s["line"] == bump]) == 2, doc["sites"]
    r = ualdbg("report", "--merge", str(one), str(one), "--json", str(merged), "--sarif", str(sarif))
    assert r.returncode == 0, r.explain()
    m = json.loads(merged.read_text())
    assert _sites(m) == {k: 2 * n for k, n in _sites(doc).items()}, (m["sites"], doc["sites"])
    assert m["faults_total"] == 2 * doc["faults_total"] == sum(s["count"] for s in m["sites"])
    assert [run_["file"] for run_ in m["runs"]] == [str(one), str(one)] and m["merged"] == 2
    assert sorted(p["run"] for p in m["processes"]) == [0, 1]
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    assert sorted(x["properties"]["count"] for x in results) == sorted(2 * n for n in _sites(doc).values())
    assert len({x["partialFingerprints"]["ualdbgSite/v2"] for x in results}) == len(results) == len(doc["sites"])
    # A merge of the merge with a third run keeps three runs, each process numbered by its run.
    again = tmp_path / "m3.json"
    assert ualdbg("report", "--merge", str(merged), str(one), "--json", str(again)).returncode == 0
    m3 = json.loads(again.read_text())
    assert m3["merged"] == 3 and sorted(p["run"] for p in m3["processes"]) == [0, 1, 2]
    assert _sites(m3) == {k: 3 * n for k, n in _sites(doc).items()}


@pytest.mark.parametrize("engine", [["--engine", "agent"], ["--engine", "agent", "--no-patch"], ["--engine", "trap"],
                                    ["--engine", "trap", "--debugger", "lldb"], ["--engine", "step", "--in", "bump"]],
                         ids=["agent", "agent-no-patch", "trap-gdb", "trap-lldb", "step"])
def test_every_engine_writes_sites_that_add_up(engine: list[str], trust: Path, tmp_path: Path) -> None:
    if "lldb" in engine:
        require_tool("lldb-19")
    out = tmp_path / "t.json"
    r = ualdbg("trace", *engine, "--json", str(out), "--", str(trust), "3")
    doc = json.loads(out.read_text())
    assert r.returncode == 0 and doc["faults_total"] == sum(s["count"] for s in doc["sites"]) > 0, r.explain()
    assert ualdbg("report", "--summary", str(out)).returncode == 0  # the validator takes it


def test_a_document_whose_sites_do_not_add_up_is_rejected(trust: Path, tmp_path: Path) -> None:
    one = tmp_path / "t.json"
    assert ualdbg("trace", "--json", str(one), "--", str(trust), "3").returncode == 0
    doc = json.loads(one.read_text())
    doc["sites"] = doc["sites"][1:]  # what the merge of a trace with itself used to write
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for argv in (["report", str(bad)], ["report", "--merge", str(one), str(bad)]):
        r = ualdbg(*argv)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "faults_total" in lines[0] and "Traceback" not in r.stderr, \
            r.explain()


# --- 2. baselines and fingerprints that survive edits ----------------------------------------

def _baseline(prog: Path, base: Path) -> dict:
    r = ualdbg("check", "--update-baseline", "--baseline", str(base), "--", str(prog), "3")
    assert r.returncode == 0, r.explain()
    return json.loads(base.read_text())


def _check(prog: Path, base: Path) -> Result:
    return ualdbg("check", "--baseline", str(base), "--", str(prog), "3")


def test_a_baseline_survives_a_comment_above_and_fails_on_a_new_faulting_line(tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    made = _baseline(_program(tmp_path / "a"), base)
    commented = "/* a comment\n   of two lines */\n" + SOURCE
    r = _check(_program(tmp_path / "b", commented), base)
    assert r.returncode == 0 and "all at sites in the baseline" in r.stderr, r.explain()
    assert made["version"] == 2 and made["keys"] == {"source": 4} and len(made["sites"]) == 4, made
    assert sorted(s["count"] for s in made["sites"]) == [3, 3, 3, 3], made  # no line stored with half its count
    # A new faulting line: the gate fails and names it.
    grown = commented.replace("/* NEWLINE */", "*p = *p + 5;")
    r = _check(_program(tmp_path / "c", grown), base)
    new = _line_of(grown, "*p = *p + 5")
    assert r.returncode == 1 and f"trust.c:{new}" in r.stderr and "2 sites not in the baseline" in r.stderr, r.explain()
    # Changing the faulting line itself makes new sites.
    changed = SOURCE.replace("*p = *p + 3;", "*p = *p + 4;")
    r = _check(_program(tmp_path / "d", changed), base)
    assert r.returncode == 1 and f"trust.c:{_line_of(changed, '*p = *p + 4')}" in r.stderr, r.explain()


def test_each_call_of_an_inlined_helper_is_its_own_site(tmp_path: Path) -> None:
    """read32() inlined twice into sum(): two keys, not one; a third call is a new site."""
    base = tmp_path / "baseline.json"
    made = _baseline(_program(tmp_path / "a"), base)
    called = SOURCE.replace("/* NEWCALL */", "s -= read32(b + 9);")
    r = _check(_program(tmp_path / "b", called), base)
    assert r.returncode == 1 and "1 site not in the baseline" in r.stderr, r.explain()
    assert f"inlined into sum at trust.c:{_line_of(called, 'read32(b + 9)')}" in r.stderr, r.explain()
    helper = [s for s in made["sites"] if "read32" in s["key"]]
    assert len(helper) == 2 and len({s["key"] for s in helper}) == 2, made


def test_sarif_fingerprints_follow_the_site_through_an_edit(tmp_path: Path) -> None:
    prints = []
    for name, source in (("a", SOURCE), ("b", "\n\n// moved down\n" + SOURCE)):
        sarif = tmp_path / f"{name}.sarif"
        r = ualdbg("check", "--sarif", str(sarif), "--", str(_program(tmp_path / name, source)), "3")
        assert r.returncode == 1, r.explain()
        results = json.loads(sarif.read_text())["runs"][0]["results"]
        prints.append({x["partialFingerprints"]["ualdbgSite/v2"] for x in results})
        assert len(prints[-1]) == len(results) == 4
    assert prints[0] == prints[1]


def test_unreadable_source_gives_weaker_keys_and_says_so(tmp_path: Path) -> None:
    prog = _program(tmp_path / "a")
    (tmp_path / "a" / "trust.c").unlink()
    base = tmp_path / "baseline.json"
    r = ualdbg("check", "--update-baseline", "--baseline", str(base), "--", str(prog), "3")
    made = json.loads(base.read_text())
    assert r.returncode == 0 and made["keys"] == {"line": 4} and "keyed by file:line" in made["note"], made
    assert "note: baseline: 4 sites keyed by file:line" in r.stderr, r.explain()
    assert _check(prog, base).returncode == 0


def test_a_baseline_of_version_1_says_how_to_write_it_again(trust: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "ualdbg-baseline", "version": 1, "sites": [{"key": "trust|bump|trust.c:24"}]}))
    r = _check(trust, old)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and f"--update-baseline --baseline {old}" in lines[0], r.explain()


# --- 3. the JSON document has a stream of its own ---------------------------------------------

def _shell(command: str) -> Result:
    return run(["sh", "-c", command], timeout=300).fail_on_timeout()


def test_json_to_a_descriptor_parses_while_the_program_prints(trust: Path, tmp_path: Path) -> None:
    direct = run([str(trust), "3"], timeout=60)
    me = f"{shlex.quote(sys.executable)} -m ualdbg"
    # The document piped on from descriptor 3, the program's stdout to a file of its own.
    out = tmp_path / "out.txt"
    r = _shell(f"{me} trace --json fd:3 -- {trust} 3 3>&1 >{out} 2>/dev/null")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["faults_total"] == 12 and doc["program"]["exit_status"] == 0, r.explain()
    assert out.read_text() == direct.stdout and direct.stdout.startswith("{"), (out.read_text(), direct.stdout)
    # /dev/fd/N names the same; the program's stdout reaches ualdbg's unchanged.
    r = _shell(f"{me} check --max-faults 100 --json /dev/fd/3 -- {trust} 3 3>{tmp_path / 'doc.json'} 2>/dev/null")
    assert r.returncode == 0 and r.stdout == direct.stdout, r.explain()
    assert json.loads((tmp_path / "doc.json").read_text())["faults_total"] == 12
    # `--json -` cannot be told from the program's stdout: refused, nothing run.
    for cmd in ("trace", "check"):
        r = ualdbg(cmd, "--json", "-", "--", str(trust), "3")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "" and len(lines) == 1 and "--json fd:3" in lines[0], r.explain()
    r = ualdbg("trace", "--json", "fd:7", "--", str(trust), "3")
    assert r.returncode == 2 and "descriptor 7 is not open" in r.stderr and r.stdout == "", r.explain()
