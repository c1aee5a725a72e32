"""The formats CI systems read natively (issue 31 item 7), each checked by a consumer's parser or
its schema: JUnit XML by junitparser (what GitHub's test-result publishing actions read it
with), GitLab Code Quality against the fields GitLab documents, GitHub's workflow commands by the
runner's own escaping rules. A test case per site, failing when it is new."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import junitparser
from support.build import build_source
from support.cli import run_cli
from support.env import BUILD, EXAMPLES, FIXTURES

from ualdbg.render.ghannotations import escape_data, escape_property

SCHEMA = json.loads((FIXTURES / "gitlab-codequality.schema.json").read_text())
MEMALIGN = [str(BUILD / "memalign"), "10", "2"]  # 4 sites on 3 lines (two PCs on one)


def _sites(doc_path: Path) -> list[dict]:
    return json.loads(doc_path.read_text())["sites"]


def test_junit_has_a_failing_case_per_site_and_a_passing_run(tmp_path: Path) -> None:
    doc, xml = tmp_path / "t.json", tmp_path / "r.junit.xml"
    r = run_cli("check", "--json", str(doc), "--format", f"junit:{xml}", "--", *MEMALIGN, timeout=120)
    assert r.returncode == 1, r.explain()
    parsed = junitparser.JUnitXml.fromfile(str(xml))
    suites = list(parsed)
    assert len(suites) == 1
    cases = list(suites[0])
    sites = _sites(doc)
    assert len(cases) == len(sites) + 1
    failing = [c for c in cases if not c.is_passed]
    assert len(failing) == len(sites) and suites[0].failures == len(sites) and suites[0].errors == 0
    assert len({c.name for c in cases}) == len(cases)  # each site its own test, two PCs on a line too
    assert all(c.result and c.result[0].type == "ualdbg/unaligned-access" for c in failing)
    assert [c for c in cases if c.name == "the whole run was seen"][0].is_passed


def test_junit_with_a_baseline_fails_only_new_sites(tmp_path: Path) -> None:
    base, xml = tmp_path / "b.json", tmp_path / "r.junit.xml"
    small = [str(BUILD / "memalign"), "10", "1"]
    r = run_cli("check", "--update-baseline", "--baseline", str(base), "--", *small, timeout=120)
    assert r.returncode == 0, r.explain()
    r = run_cli("check", "--baseline", str(base), "--format", f"junit:{xml}", "--", *small, timeout=120)
    assert r.returncode == 0, r.explain()
    suite = list(junitparser.JUnitXml.fromfile(str(xml)))[0]
    assert suite.failures == 0 and all(c.is_passed for c in suite)
    assert len(list(suite)) > 1


def test_gitlab_code_quality_matches_gitlabs_fields(tmp_path: Path) -> None:
    doc, cq = tmp_path / "t.json", tmp_path / "gl-code-quality-report.json"
    r = run_cli("check", "--json", str(doc), "--format", f"gitlab:{cq}", "--", *MEMALIGN, timeout=120)
    assert r.returncode == 1, r.explain()
    issues = json.loads(cq.read_text())
    jsonschema.validate(issues, SCHEMA)
    assert len(issues) == len(_sites(doc))
    assert len({i["fingerprint"] for i in issues}) == len(issues)  # GitLab keeps one issue per fingerprint


def test_gitlab_path_of_a_site_without_a_line_is_relative(tmp_path: Path) -> None:
    """No DWARF (a -g0 build): the issue is placed at the module, relative, line 1."""
    cq = tmp_path / "cq.json"
    prog = build_source(EXAMPLES / "not_aligned.c", tmp_path / "g0", flags=("-g0", "-O1"))
    r = run_cli("trace", "--format", f"gitlab:{cq}", "--", str(prog), "3", timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.explain()
    issues = json.loads(cq.read_text())
    jsonschema.validate(issues, SCHEMA)
    assert [i["location"] for i in issues] == [{"path": "g0/not_aligned", "lines": {"begin": 1}}]


# The runner's parser of `::command key=value,...::message` (actions/runner, ActionCommand): the
# message and each property unescaped.
_COMMAND = re.compile(r"^::(?P<cmd>[a-z]+)(?: (?P<props>[^:]*))?::(?P<msg>.*)$")


def _unescape(s: str) -> str:
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def _parse(line: str) -> tuple[str, dict[str, str], str]:
    m = _COMMAND.match(line)
    assert m is not None, line
    props = dict(p.split("=", 1) for p in (m["props"] or "").split(",") if p)
    return m["cmd"], {k: _unescape(v) for k, v in props.items()}, _unescape(m["msg"])


def test_github_annotations_under_actions(tmp_path: Path) -> None:
    doc = tmp_path / "t.json"
    r = run_cli("check", "--json", str(doc), "--", *MEMALIGN, timeout=120, env={"GITHUB_ACTIONS": "true"})
    assert r.returncode == 1, r.explain()
    commands = [_parse(line) for line in r.stdout.splitlines() if line.startswith("::")]
    sites = _sites(doc)
    assert len(commands) == len(sites)
    for (cmd, props, msg), site in zip(commands, sites):
        assert cmd in ("error", "warning", "notice")
        assert props["line"] == str(site["line"]) and props["file"].endswith(site["file"])
        assert f"{site['count']:,} unaligned" in props["title"] and msg
    r = run_cli("check", "--", *MEMALIGN, timeout=120)
    assert not [line for line in r.stdout.splitlines() if line.startswith("::")]  # not outside Actions


def test_github_escaping_round_trips() -> None:
    hostile = "a%b\r\nc:d,e::f"
    assert "\n" not in escape_data(hostile) and "\r" not in escape_data(hostile)
    assert _unescape(escape_property(hostile)) == hostile
    assert ":" not in escape_property(hostile) and "," not in escape_property(hostile)
