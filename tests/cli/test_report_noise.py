"""Issue 31, problem 7: the report's noise. SARIF's plural of an access, "1 run merged", a merged
report's title naming every program, --limit with --summary, the help of --summary/--by/--limit,
the programs a driver (make) ran named in the title, and a report that starts on a clean line
of a terminal after the program's unterminated `\\r` progress."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import sys
import termios
import time
from pathlib import Path

import pytest
from support.cli import run_cli
from support.env import BUILD, ROOT, require_tool, scrubbed_env


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("noise")
    out = {}
    for name, args in (("memalign", ["100", "5"]), ("not_aligned", ["3"])):
        out[name] = d / f"{name}.json"
        p = run_cli("trace", "--json", str(out[name]), "--", str(BUILD / name), *args)
        assert out[name].exists(), p.explain()
    return out


def test_sarif_says_reads_not_reades(traces: dict[str, Path], tmp_path: Path) -> None:
    sarif = tmp_path / "m.sarif"
    p = run_cli("report", str(traces["memalign"]), "--sarif", str(sarif), "--summary")
    assert p.returncode == 0, p.explain()
    texts = [r["message"]["text"] for r in json.loads(sarif.read_text())["runs"][0]["results"]]
    assert any("4-byte reads at PC" in t for t in texts) and any("4-byte writes at PC" in t for t in texts), texts
    assert not any("reades" in t or "writees" in t for t in texts), texts


def test_merged_title_plural_and_every_program(traces: dict[str, Path]) -> None:
    one = run_cli("report", "--merge", str(traces["memalign"]), "--summary")
    assert one.returncode == 0 and "; 1 run merged" in one.stdout and "1 runs" not in one.stdout, one.explain()
    two = run_cli("report", "--merge", str(traces["memalign"]), str(traces["not_aligned"]), "--summary")
    title = " ".join(two.stdout.split("\n  ")[0].split())  # the title, wrapped at the report's width
    assert "2 runs merged" in title and "memalign" in title and "not_aligned" in title, two.explain()


def test_limit_applies_to_the_summary(traces: dict[str, Path]) -> None:
    sites = json.loads(traces["memalign"].read_text())["sites"]
    assert len(sites) == 4
    full = run_cli("report", str(traces["memalign"]), "--summary")
    cut = run_cli("report", str(traces["memalign"]), "--summary", "--limit", "1")
    assert full.returncode == cut.returncode == 0, cut.explain()

    def rows(text: str) -> int:  # the summary's rows: a count and a share
        return len(re.findall(r"^\s+\d+\s+[\d.]+%", text, re.M))

    assert rows(full.stdout) == 4, full.explain()
    assert rows(cut.stdout) == 1 and "the first 1 site of 4 shown" in cut.stdout, cut.explain()


def test_summary_by_limit_have_help() -> None:
    p = run_cli("report", "--help")
    text = " ".join(p.stdout.split())
    for flag, words in (("--summary", "counts per exception PC"), ("--by", "per pc (default), source line"),
                        ("--limit N", "the hottest N rows")):
        assert f"{flag} " in text and words in text, p.explain()


def test_a_driver_names_the_programs_that_faulted(tmp_path: Path) -> None:
    make = require_tool("make")
    (tmp_path / "Makefile").write_text(f"check:\n\t{BUILD / 'not_aligned'} 3\n\t{BUILD / 'memalign'} 10 1\n")
    p = run_cli("check", "--", make, "-s", "-C", str(tmp_path), "check")
    title = next(line for line in p.stderr.splitlines() if line.startswith("Unaligned accesses in"))
    assert p.returncode == 1 and "not_aligned" in title and "memalign" in title, p.explain()
    assert title.startswith(f"Unaligned accesses in {BUILD / 'not_aligned'} and {BUILD / 'memalign'} (run by "), title


def _on_a_terminal(argv: list[str], timeout: float = 120) -> bytes:
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # a 100-column terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "ualdbg", *argv],
                  {**scrubbed_env(), "TERM": "xterm", "COLUMNS": "100", "LINES": "40"})
    out, deadline = b"", time.time() + timeout
    try:
        while time.time() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        for _ in range(100):
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    return out


def test_report_starts_on_a_clean_line_of_a_terminal() -> None:
    sh = shutil.which("sh")
    assert sh is not None
    # a suite's progress line ends in \r, with no newline, and the program exits
    out = _on_a_terminal(["trace", "--", sh, "-c", f"printf '[50%%] testing\\r'; {BUILD / 'not_aligned'} 3 >/dev/null"])
    at = out.find(b"Unaligned accesses in")
    assert at > 0, out
    before = out[:at]
    assert before.endswith(b" " * 100 + b"\r\x1b[K"), before  # PROMPT_SP: to the start of a clean line
    piped = run_cli("trace", "--", str(BUILD / "not_aligned"), "3")
    assert piped.stderr.startswith("Unaligned accesses in"), piped.explain()  # not a terminal: nothing added


def test_trace_and_check_limit_their_summary(tmp_path: Path) -> None:
    """trace and check print the hottest --limit sites (a big program's 240 sites took rich longer
    to lay out than the program took to run, issue 34); their JSON holds every site."""
    def rows(text: str) -> int:
        return len(re.findall(r"^\s+\d+\s+[\d.]+%", text, re.M))

    for cmd in ("trace", "check"):
        out = tmp_path / f"{cmd}.json"
        cut = run_cli(cmd, "--limit", "2", "--json", str(out), "--", str(BUILD / "memalign"), "100", "5")
        assert rows(cut.stderr) == 2 and "the first 2 sites of 4 shown (--limit N; --limit 0 shows all)" in cut.stderr, \
            cut.explain()
        assert len(json.loads(out.read_text())["sites"]) == 4, cut.explain()
        every = run_cli(cmd, "--limit", "0", "--", str(BUILD / "memalign"), "100", "5")
        assert rows(every.stderr) == 4 and "shown" not in every.stderr, every.explain()
    p = run_cli("trace", "--help")
    assert "--limit N" in p.stdout and "hottest N sites" in " ".join(p.stdout.split()), p.explain()
