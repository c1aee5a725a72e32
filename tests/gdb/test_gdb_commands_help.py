"""gdb niceties (issue 32): `--help` on every prefix and sub-command, option completion through
gdb's `complete`, and ualdbg's catchpoints made again after a habitual `delete`."""
from __future__ import annotations

from support.debuggers import run_gdb
from support.env import BUILD

PROG = [str(BUILD / "not_aligned"), "3"]


def test_prefix_help_and_unknown_subcommand() -> None:
    r = run_gdb(PROG, ["ualdbg trace --help", "ualdbg --help", "ualdbg trace frob"])
    out = r.stdout + r.stderr
    assert "ualdbg trace clear, ualdbg trace save, ualdbg trace show, ualdbg trace start, ualdbg trace stop" in out, r.explain()
    assert "commands: ualdbg audit, ualdbg break" in out, r.explain()
    assert "Undefined ualdbg trace command" not in out, r.explain()
    assert "no command `ualdbg trace frob`" in out, r.explain()


def test_options_complete() -> None:
    r = run_gdb(PROG, ["complete ualdbg trace start --e", "complete ualdbg trace start --engine t",
                       "complete catch unaligned --mo", "complete ualdbg trace show --by l"])
    lines = set(r.stdout.splitlines())
    assert {"ualdbg trace start --engine", "ualdbg trace start --everywhere", "ualdbg trace start --engine trap",
            "catch unaligned --module", "ualdbg trace show --by line"} <= lines, r.explain()


def test_delete_does_not_silently_disarm() -> None:
    """`delete` at a break stop took ualdbg's catchpoints: the next fault became gdb's plain
    "Program received signal SIGBUS" while `ualdbg status` still said breaking."""
    r = run_gdb(PROG, ["ualdbg break", "run", "delete", "continue", "continue", "continue"])
    assert "removed ualdbg's catchpoints" in r.stdout, r.explain()
    assert "Program received signal SIGBUS" not in r.stdout, r.explain()
    assert r.stdout.count("Unaligned data access: virtual address") == 3, r.explain()
    assert "iterations=3 sum=3" in r.stdout, r.explain()
