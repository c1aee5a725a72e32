"""Step scopes (ualdbg.engines.scope): every instance of a function (same-named statics in two
units, gcc clones) from a real compiled program, ranges, and the one-line errors."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.build import build_program
from support.env import BUILD
from support.step import PROGRAMS

from ualdbg.core.model import Module
from ualdbg.engines.scope import ScopeError, StepScope, function_ranges, parse_range, resolve_scope


@pytest.fixture(scope="module")
def scope_prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_program(tmp_path_factory.mktemp("scope") / "scope", PROGRAMS / "scope_a.c", PROGRAMS / "scope_b.c",
                         flags=("-O2", "-g"))


def _nm(path: Path) -> dict[str, list[tuple[int, int]]]:
    """name -> [(start, end)] from `nm -S` (binutils), an independent reader of the same table."""
    out: dict[str, list[tuple[int, int]]] = {}
    text = subprocess.run(["nm", "-S", str(path)], check=True, capture_output=True, text=True).stdout
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            start, size = int(parts[0], 16), int(parts[1], 16)
            out.setdefault(parts[3], []).append((start, start + size))
    return out


def test_static_functions_of_two_units_are_both_found(scope_prog: Path) -> None:
    nm = _nm(scope_prog)
    assert len(nm["helper"]) == 2
    assert function_ranges(str(scope_prog), "helper") == sorted(nm["helper"])


def test_gcc_clones_belong_to_their_function(scope_prog: Path) -> None:
    nm = _nm(scope_prog)
    clones = [n for n in nm if n.startswith("scale.")]
    assert clones, "gcc -O2 was expected to clone scale()"
    want = sorted(r for n in ["scale", *clones] for r in nm.get(n, []))
    assert function_ranges(str(scope_prog), "scale") == want


def test_load_bias_is_added(scope_prog: Path) -> None:
    plain = function_ranges(str(scope_prog), "main")
    biased = function_ranges(str(scope_prog), "main", 0x555555554000)
    assert biased == [(lo + 0x555555554000, hi + 0x555555554000) for lo, hi in plain]


def test_unknown_function_is_one_line(scope_prog: Path) -> None:
    with pytest.raises(ScopeError, match=r"^no function named nosuch in scope$"):
        function_ranges(str(scope_prog), "nosuch")
    # a prefix of a real name is not that function
    with pytest.raises(ScopeError):
        function_ranges(str(scope_prog), "scal")


def test_resolve_scope_over_modules(scope_prog: Path) -> None:
    exe = Module(path=str(scope_prog), base=0x1000000, start=0x1000000, end=0x1004000)
    scope = resolve_scope([exe], functions=["helper", "main"])
    assert scope.kind == "function" and scope.label == "helper,main"
    nm = _nm(scope_prog)
    for lo, hi in nm["helper"] + nm["main"]:
        assert scope.contains(lo + 0x1000000) and scope.contains(hi - 1 + 0x1000000)
        assert not scope.contains(hi + 0x1000000) or any(a <= hi + 0x1000000 < b for a, b in scope.ranges)
    with pytest.raises(ScopeError, match=r"^no function named nosuch in scope or its libraries$"):
        resolve_scope([exe], functions=["nosuch"])


@pytest.mark.parametrize(("text", "want"), [("0x401000,0x401200", (0x401000, 0x401200)),
                                            ("0x401000-0x401200", (0x401000, 0x401200)),
                                            (" 16 , 32 ", (16, 32))])
def test_parse_range(text: str, want: tuple[int, int]) -> None:
    assert parse_range(text) == want


@pytest.mark.parametrize(("text", "msg"), [("0x200,0x100", "empty range"), ("0x100,0x100", "empty range"),
                                           ("0x100", "two addresses"), ("a,b", "not a number"), ("1,2,3", "two addresses")])
def test_bad_ranges(text: str, msg: str) -> None:
    with pytest.raises(ScopeError, match=msg) as info:
        parse_range(text)
    assert "\n" not in str(info.value)


def test_scope_kinds() -> None:
    assert resolve_scope([], everywhere=True) == StepScope("everywhere", "everywhere")
    assert StepScope("everywhere", "everywhere").contains(0x1234)
    r = resolve_scope([], range_text="0x10,0x20")
    assert r.kind == "range" and r.ranges == ((0x10, 0x20),)
    assert r.contains(0x10) and r.contains(0x1F) and not r.contains(0x20) and not r.contains(0xF)
    with pytest.raises(ScopeError, match="do not combine"):
        resolve_scope([], everywhere=True, range_text="0x10,0x20")
    with pytest.raises(ScopeError, match="say where to step"):
        resolve_scope([])


def test_examples_function_is_found() -> None:
    # the example the CLI tests step through; a guard that BUILD is what the table says
    assert function_ranges(str(BUILD / "not_aligned"), "bump")
