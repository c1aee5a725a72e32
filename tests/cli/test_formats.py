"""The format registry (render/formats.py, issue 30 item 4): every registered output format is
reachable from the shell (`--format NAME[:PATH]` on trace, check, watch and report) and from gdb's
and lldb's `ualdbg trace save FILE` (the suffix names the format, or `--format NAME`), and one trace written
in a format is the same whichever front end wrote it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import run_cli
from support.debuggers import run_gdb, run_lldb
from support.env import BUILD

from ualdbg.render.formats import FORMATS

PROG = [str(BUILD / "not_aligned"), "3"]


def _looks_like(name: str, text: str) -> None:
    """What each format's file starts with: a check that could fail if the wrong writer ran."""
    if name == "json":
        assert json.loads(text)["tool"] == "ualdbg"
    elif name == "sarif":
        assert json.loads(text)["version"] == "2.1.0"
    elif name == "text":
        assert text.startswith("Unaligned accesses in ") and "not_aligned.c:38" in text
    elif name == "junit":
        assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="ualdbg"'), text[:200]
    elif name == "gitlab":
        assert json.loads(text)[0]["check_name"] == "ualdbg/unaligned-access"
    elif name == "github":
        assert re.match(r"::(error|warning|notice) file=examples/not_aligned.c,line=38,", text), text[:200]
    else:
        pytest.fail(f"a format with no check here: {name} (add one)")


def test_every_format_from_trace_and_report_is_the_same_trace(tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    opts = [f"--format={name}:{tmp_path / ('trace' + f.suffix)}" for name, f in FORMATS.items()]
    r = run_cli("trace", "--json", str(saved), *opts, "--", *PROG, timeout=120)
    assert r.returncode == 0, r.explain()
    again = [f"--format={name}:{tmp_path / ('report' + f.suffix)}" for name, f in FORMATS.items()]
    r = run_cli("report", str(saved), *again, timeout=60)
    assert r.returncode == 0, r.explain()
    for name, f in FORMATS.items():
        traced, reported = ((tmp_path / (stem + f.suffix)).read_text() for stem in ("trace", "report"))
        _looks_like(name, traced)
        assert traced == reported, name  # the document read back is the trace (core/document.py's doors)
    assert (tmp_path / "trace.json").read_text() == saved.read_text()


def test_watch_writes_every_format(tmp_path: Path) -> None:
    opts = [f"--format={name}:{tmp_path / ('w' + f.suffix)}" for name, f in FORMATS.items()]
    r = run_cli("watch", *opts, "--", *PROG, timeout=120)
    assert r.returncode == 0, r.explain()
    for name, f in FORMATS.items():
        _looks_like(name, (tmp_path / ("w" + f.suffix)).read_text())


def test_check_writes_a_format_with_its_verdict(tmp_path: Path) -> None:
    out = tmp_path / "r.sarif"
    r = run_cli("check", "--format", f"sarif:{out}", "--", *PROG, timeout=120)
    assert r.returncode == 1, r.explain()  # 3 unaligned accesses, 0 allowed
    assert json.loads(out.read_text())["runs"][0]["invocations"][0]["exitCode"] == 1


@pytest.mark.parametrize("spec", ["xml", "xml:out.xml", ""])
def test_an_unknown_format_is_one_line_and_status_2(spec: str, tmp_path: Path) -> None:
    r = run_cli("trace", "--format", spec, "--", *PROG, cwd=tmp_path, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "unknown format" in lines[-1] and "Traceback" not in r.stderr, r.explain()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("debugger", ["gdb", "lldb"])
def test_trace_save_in_a_debugger_writes_every_format(debugger: str, tmp_path: Path) -> None:
    """`trace save FILE`: the format FILE's suffix names; `--format NAME` over any suffix."""
    by_suffix = [f"ualdbg trace save {tmp_path / ('s' + f.suffix)}" for f in FORMATS.values()]
    by_name = [f"ualdbg trace save {tmp_path / (name + '.out')} --format {name}" for name in FORMATS]
    if debugger == "gdb":
        run = run_gdb(PROG, ["ualdbg trace start", "run", *by_suffix, *by_name])
    else:
        run = run_lldb(PROG, ["ualdbg trace start", "process launch -o /dev/null", *by_suffix, *by_name])
    for name, f in FORMATS.items():
        assert (tmp_path / ("s" + f.suffix)).is_file(), run.explain()
        _looks_like(name, (tmp_path / ("s" + f.suffix)).read_text())
        _looks_like(name, (tmp_path / (name + ".out")).read_text())
