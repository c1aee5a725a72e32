"""The debugger-neutral core of stackcheck with a fake Measurer (unit tests): ranges, variants,
the initial-stack parser, verdicts, timing analysis and the exit decision."""
from __future__ import annotations

import struct

import pytest

from ualdbg.tools.stackcheck.check import (
    Item,
    Plan,
    Raw,
    Request,
    StackcheckError,
    make_variants,
    parse_initial_stack,
    parse_lengths,
    stackcheck_document,
    timing_analysis,
    verdict,
)


def test_parse_lengths() -> None:
    assert parse_lengths("1-4", minimum=1, what="x") == (1, 2, 3, 4)
    assert parse_lengths("0-64/16", minimum=0, what="x") == (0, 16, 32, 48, 64)
    assert parse_lengths("8,3,5-6", minimum=0, what="x") == (3, 5, 6, 8)
    for bad in ("4-1", "", "a", "1-2/0", "0"):
        with pytest.raises(StackcheckError):
            parse_lengths(bad, minimum=1, what="x")


def request(**kw: object) -> Request:
    base = dict(argv=["./prog", "a"], exec_path="./prog", base_env=("A=1", "UALDBG_PAD=old", "B=2"))
    base.update(kw)
    return Request(**base)  # type: ignore[arg-type]


def test_variants_cross_argv0_and_padding_then_aslr() -> None:
    vs = make_variants(request(argv0_lengths=(1, 9), env_pad=(0, 3), aslr_runs=2))
    assert [v.label for v in vs] == ["argv0=1 pad=0", "argv0=1 pad=3", "argv0=9 pad=0", "argv0=9 pad=3", "ASLR on #1", "ASLR on #2"]
    assert vs[0].launch.argv == ("p", "a") and vs[2].launch.argv == ("prog_____", "a")
    # the user's own UALDBG_PAD is replaced; the padding goes last
    assert vs[0].launch.env == ("A=1", "B=2") and vs[1].launch.env == ("A=1", "B=2", "UALDBG_PAD=xxx")
    assert [v.aslr for v in vs] == [False] * 4 + [True] * 2 and vs[4].launch.argv == ("./prog", "a")


def test_initial_stack_parser() -> None:
    base = 0x1000
    strings = b"prog\0arg\0HOME=/h\0PATH=/bin\0"
    s0 = base + 64
    words = [2, s0, s0 + 5, 0, s0 + 9, s0 + 17, 0, 0]
    blob = struct.pack("<8Q", *words) + strings
    argc, argv, env = parse_initial_stack(blob, base, 8)
    assert argc == 2 and argv == [s0, s0 + 5] and env == [(s0 + 9, "HOME"), (s0 + 17, "PATH")]
    blob32 = struct.pack("<8I", *[w - 32 if w > 100 else w for w in words]) + strings
    assert parse_initial_stack(blob32, base, 4)[2] == [(s0 - 32 + 9, "HOME"), (s0 - 32 + 17, "PATH")]


def test_verdicts() -> None:
    item = Item("main:d", "variable", 8, "double")
    labels = {"v0": "a", "v1": "b", "v2": "c"}
    bad = verdict(item, {"v0": 0x1000, "v1": 0x1004, "v2": None}, labels)
    assert bad["verdict"] == "misaligned" and bad["misaligned_in"] == ["v1"] and bad["not_reached_in"] == ["v2"]
    moves = verdict(item, {"v0": 0x1000, "v1": 0x1040, "v2": 0x1010}, labels)
    assert moves["verdict"] == "moves" and moves["moves_modulo"] == [32, 64, 4096]
    stable = verdict(item, {"v0": 0x1008, "v1": 0x3008}, labels)
    assert stable["verdict"] == "stable" and "0x8" in stable["text"]
    chars = verdict(Item("argv[1]", "argv", 1, "char[]", judged=False), {"v0": 0x1001, "v1": 0x1002}, labels)
    assert chars["verdict"] == "moves" and chars["distinct"]["8"] == [1, 2]


def test_timing_tracks_an_alignment_split() -> None:
    item = Item("main:d", "variable", 8, "double")
    addrs = {"main:d": {"v0": 0x1000, "v1": 0x1008, "v2": 0x1004, "v3": 0x100c}}
    per = {v: {"median_s": m, "spread_pct": 1.0} for v, m in (("v0", 1.0), ("v1", 1.01), ("v2", 1.5), ("v3", 1.52))}
    t = timing_analysis([item], per, addrs, max_spread=10.0)
    assert t["exceeded"] and round(t["spread_pct"]) == 52
    assert t["tracks"][0]["tracks"] and t["tracks"][0]["by"] == "alignment"
    per["v3"]["median_s"] = 1.0  # the misaligned group overlaps the aligned one: no tracking
    assert not timing_analysis([item], per, addrs, None)["tracks"][0]["tracks"]


def test_document_exit_status_on_a_misaligned_variable() -> None:
    req = request(env_pad=(0, 4))
    vs = make_variants(req)
    items = [Item("sp_entry", "sp_entry", 16, "sp"), Item("main:d", "variable", 8, "double")]
    plan = Plan("/prog", 8, 0x1000, {"register": "rsi"}, [], vs, False, ())
    raws = [Raw("v0", sp_main=0x7ff0, argv_ptr=0x8008, vars={"main:d": 0x7000}),
            Raw("v1", sp_main=0x7fe0, argv_ptr=0x7ff8, vars={"main:d": 0x6ffc})]
    doc = stackcheck_document(req, plan, items, raws, None, None, "x86_64", [], 0.1)
    assert doc["exit"] == 1 and doc["reasons"] == ["main:d is misaligned in 1 variant(s)"]
    assert doc["variants"][1]["addresses"]["main:d"] == {"address": "0x6ffc", "align": 4, "16": 12, "32": 28, "64": 60, "4096": 4092}
    assert doc["variants"][0]["addresses"]["sp_entry"]["address"] == "0x8000"
    raws[1].vars["main:d"] = 0x6ff8
    assert stackcheck_document(req, plan, items, raws, None, None, "x86_64", [], 0.1)["exit"] == 0


@pytest.mark.parametrize("kind", ["c", "python"])
def test_exec_helper_sets_argv0_environment_aslr_and_stdio(kind: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import ualdbg.tools.stackcheck.launch as launch

    if kind == "python":  # no C compiler: the Python fallback must do the same
        monkeypatch.setattr(launch.shutil, "which", lambda name, *a, **k: None)
    out = tmp_path / "out.txt"
    with launch.ExecHelper() as helper:
        assert helper.kind == kind
        for aslr, flag in ((False, "00040000"), (True, "00000000")):
            spec = launch.LaunchSpec("/bin/sh", ("NAME-OF-9", "-c", 'echo "$0"; env; cat /proc/self/personality'),
                                     ("ONLY=this", "AND=that"), aslr=aslr, stdin="/dev/null", stdout=str(out), stderr=str(out))
            secs, status = launch.time_native(helper, helper.write(spec))
            lines = out.read_text().splitlines()
            assert status == 0 and secs > 0
            assert lines[0] == "NAME-OF-9" and lines[-1] == flag
            # sh may add PWD of its own; nothing else reaches it
            assert {ln for ln in lines[1:-1] if not ln.startswith("PWD=")} == {"ONLY=this", "AND=that"}
        folder = helper.folder
    assert not os.path.exists(folder)
