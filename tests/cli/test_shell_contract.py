"""The shell command as Unix tools behave (issue 29, item 13), on real runs: a closed stderr
(`2>&-`) still runs the program and writes the outputs; a closed pipe downstream ends `report`
quietly by SIGPIPE (141, as `git log | head -1`); `watch -- PROG` passes PROG's status; `report`
of a full 100,000-record ring shows the newest 1,000 and says so, in seconds; names from a crafted
DWARF or JSON never reach the terminal as escape sequences."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from support.build import build_program
from support.cli import run_cli
from support.env import BUILD, ROOT, scrubbed_env

CLI = [sys.executable, "-m", "ualdbg"]


def _sh(script: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """A shell line as a user types it (`ualdbg` is this checkout's)."""
    env = scrubbed_env({"UALDBG": " ".join(CLI)})
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_a_closed_stderr_still_runs_the_program_and_writes_the_outputs(tmp_path: Path) -> None:
    """Before: `internal error (AttributeError ...)` on stdout, and the program never ran."""
    r = _sh(f'$UALDBG check --json t.json --sarif t.sarif -- {BUILD / "not_aligned"} 3 2>&-; echo "status=$?"', tmp_path)
    out = r.stdout.decode()
    assert "not_aligned: iterations=3" in out and out.rstrip().endswith("status=1"), out
    assert "internal error" not in out and "ualdbg" not in out, out
    assert json.loads((tmp_path / "t.json").read_text())["faults_total"] == 3
    assert json.loads((tmp_path / "t.sarif").read_text())["runs"][0]["results"]
    # The program starts with stderr closed, as it would without ualdbg.
    probe = 'if [ -e /proc/self/fd/2 ]; then echo open; else echo closed; fi'
    r = _sh(f"$UALDBG trace -- /bin/sh -c '{probe}' 2>&-", tmp_path)
    assert r.stdout.decode().strip() == "closed", r


@pytest.fixture(scope="module")
def full_ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace whose ring is full: 100,000 records kept of 150,000 faults (--no-patch)."""
    out = tmp_path_factory.mktemp("ring") / "big.json"
    r = run_cli("trace", "--no-patch", "--json", str(out), "--", str(BUILD / "not_aligned"), "150000", timeout=300)
    assert r.returncode == 0, r.explain()
    return out


def test_a_closed_pipe_downstream_ends_report_by_sigpipe(full_ring: Path, tmp_path: Path) -> None:
    """Before: status 1 (rich's own exit on EPIPE)."""
    r = _sh(f"$UALDBG report {full_ring} | head -1; echo \"status=${{PIPESTATUS[0]}}\"", tmp_path)
    out = r.stdout.decode().splitlines()
    assert out[0].startswith("Unaligned accesses in") and out[-1] == "status=141", r
    assert r.stderr == b"", r


def test_report_of_a_full_ring_shows_the_newest_records_and_says_how_many(full_ring: Path) -> None:
    """Before: 81 s of CPU for 100,000 rows. The limit is asserted, not the time (a shared machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_cli("report", str(full_ring), timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.explain()
    assert "records: the newest 1,000 of 100,000 kept shown (--limit N; --limit 0 shows all" in r.stdout, r.explain()
    seqs = [int(line.split()[0]) for line in r.stdout.splitlines() if line.strip()[:1].isdigit() and "0x" in line]
    assert len(seqs) == 1000 and seqs[-1] == max(seqs), r.explain()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(f"report of 100,000 records: {cpu:.2f} s of CPU")
    r = run_cli("report", str(full_ring), "--limit", "5", timeout=120)
    assert "records: the newest 5 of 100,000" in r.stdout, r.explain()


def test_watch_passes_the_programs_status(tmp_path: Path) -> None:
    """Before: `watch -- PROG` exited 0 whatever PROG did."""
    r = run_cli("watch", "--interval", "0.2", "--", "/bin/sh", "-c", "exit 7", timeout=120)
    assert r.returncode == 7, r.explain()
    r = run_cli("watch", "--interval", "0.2", "--", "/bin/sh", "-c", "kill -SEGV $$", timeout=120)
    assert r.returncode in (139, -11), r.explain()
    r = run_cli("watch", "--interval", "0.2", "--", str(BUILD / "not_aligned"), "3", timeout=120)
    assert r.returncode == 0, r.explain()


HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\u202eright"


def test_names_from_a_crafted_json_are_shown_escaped(full_ring: Path, tmp_path: Path) -> None:
    doc = json.loads(full_ring.read_text())
    doc["sites"][0]["function"] = HOSTILE
    doc["sites"][0]["file"] = "/src/\x1b[31mred.c"
    doc["program"]["path"] = "/bin/\x9b31mprog"
    doc["records"] = doc["records"][:3]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    for args in ([], ["--summary"], ["--by", "line"], ["--by", "function"]):
        r = run_cli("report", str(path), *args, timeout=120)
        assert r.returncode == 0, r.explain()
        assert "\x1b" not in r.stdout and "\x9b" not in r.stdout and "\u202e" not in r.stdout, r.explain()
    assert "evil\\x1b]0;pwned" in r.stdout and "\\u202eright" in r.stdout, r.explain()
    bad = tmp_path / "no\x1b[2Jsuch.json"
    r = run_cli("report", str(bad), timeout=60)
    assert r.returncode == 2 and "\x1b" not in r.stderr and "no\\x1b[2Jsuch.json" in r.stderr, r.explain()


def test_names_from_a_crafted_dwarf_are_shown_escaped(tmp_path: Path) -> None:
    """A source file whose name holds escape sequences: DWARF carries it to every table."""
    name = "x\x1b[2J\x1b]0;pwned\x07.c"
    (tmp_path / name).write_text((ROOT / "examples" / "packed_header.c").read_text())
    prog = build_program(tmp_path / "prog", name, cwd=tmp_path)
    for args in (["audit", str(prog)], ["trace", "--", str(prog)]):
        r = run_cli(*args, timeout=120)
        assert r.returncode in (0, 1), r.explain()
        text = r.stdout + r.stderr
        assert "\x1b" not in text and "x\\x1b[2J" in text, r.explain()


def test_the_console_escapes_whatever_reaches_it() -> None:
    """The last line of defence (render/console.py): a string no renderer escaped."""
    import io

    from ualdbg.render.console import make_console, shown

    buf = io.StringIO()
    make_console(buf).print(HOSTILE + "\nnext line", "\udcff")
    assert buf.getvalue() == "evil\\x1b]0;pwned\\x1b[2J\\u202eright\nnext line \\xff\n", repr(buf.getvalue())
    assert shown("a\nb\tc") == "a\\nb\\tc" and shown("a\nb\tc", newlines=True) == "a\nb\tc"
