"""arm64 under qemu-aarch64: plain misaligned accesses do not trap (no report, by design of
signal mode), acquire/release ones do and are reported and performed; an exclusive load is
reported and then left to kill the program, as it would on the hardware."""
from __future__ import annotations

import json
from pathlib import Path

from crossrun import require_cross
from support.build import build_program
from support.cli import run_cli
from support.expected import by_location

SRC = Path(__file__).resolve().parent / "programs" / "exclusive_arm64.c"


def build(tmp_path: Path) -> Path:
    require_cross("aarch64")
    exe = tmp_path / "exclusive_arm64"
    build_program(exe, SRC, flags=("-g", "-O1", "-Wall", "-static"), compiler="aarch64-linux-gnu-gcc")
    return exe


def test_acquire_release_are_caught_and_performed(tmp_path: Path) -> None:
    exe = build(tmp_path)
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), "acqrel", "7")
    assert p.returncode == 0, p.explain()
    assert "flag=7 plain=21" in p.stdout, p.explain()  # 0+1+...+6: the performed ldar/stlr were right
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["arch"] == "aarch64"
    # line 15: ldar in acquire(), line 17: stlr in release(); the plain loads of line 13: none
    assert dict(by_location(doc)) == {"exclusive_arm64.c:15": 7, "exclusive_arm64.c:17": 7}, p.explain()
    assert {s["access"] for s in doc["sites"]} == {"read", "write"}


def test_exclusive_is_reported_then_the_program_gets_its_sigbus(tmp_path: Path) -> None:
    exe = build(tmp_path)
    p = run_cli("trace", "--json", str(tmp_path / "t.json"), "--", str(exe), "exclusive")
    assert p.returncode == -7, p.explain()  # the CLI dies of the program's SIGBUS, as a shell sees it
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["program"]["exit_signal"] == 7
    assert dict(by_location(doc)) == {"exclusive_arm64.c:24": 1}, p.explain()
    rec = doc["records"][0]
    assert (rec["size"], rec["access"]) == (8, "read") and int(rec["va"], 16) % 8 == 1
