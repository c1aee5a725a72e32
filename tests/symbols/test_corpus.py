"""ualdbg's resolver against gdb's own frames on real optimised binaries nobody here wrote
(issue 18): Debian's sources of xxHash, LZ4, fmtlib and MINPACK, built at test time. `make test`
checks an evenly spread sample (at least 2,000 memory-access instructions over at least five
binaries); `make corpus` checks every memory-access instruction of every variant."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corpus import VARIANTS, build, tools_missing
from differential import SAMPLE_PER_BINARY, compare, report
from support.env import require_tool

SAMPLE = [v for v in VARIANTS if v.sample]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("gcc", "g++", "gfortran", "objcopy", "gdb"):
        require_tool(tool)
    assert not tools_missing()
    return tmp_path_factory.mktemp("corpus")


def test_sample_covers_what_the_issue_names() -> None:
    notes = {n for v in SAMPLE for n in v.notes}
    for kind in ("header-only library in one .c", "AVX2 intrinsics", "C++ templates and lambdas",
                 "Fortran 77", "DWARF 4", "DWARF 5", "compressed debug sections",
                 "separate debug file by build-id", "shared library", "PIE"):
        assert kind in notes, kind
    assert len(SAMPLE) >= 5
    assert {v.flags[1] if len(v.flags) > 1 else "" for v in VARIANTS} >= {"-O0", "-O2", "-O3"}


@pytest.mark.parametrize("variant", SAMPLE, ids=[v.name for v in SAMPLE])
def test_sample_agrees_with_gdb(work: Path, variant) -> None:  # noqa: ANN001
    binary = build(variant, work, work / "debug")
    outcome = compare(variant.name, binary, work / "debug", SAMPLE_PER_BINARY)
    # The sample is large enough to mean something: 2,000 PCs over the sample's binaries.
    assert outcome.pcs >= 2000 // len(SAMPLE), outcome.pcs
    assert not outcome.mismatches, report([outcome]) + "\n" + "\n".join(outcome.mismatches[:10])


def test_split_debug_is_really_split(work: Path) -> None:
    """The split variant's DWARF is only in the debug-file directory: without it, no lines."""
    from ualdbg.symbols.elfindex import clear_cache, elf_index

    variant = next(v for v in SAMPLE if v.split_debug)
    binary = build(variant, work, work / "debug")
    saved = os.environ.pop("UALDBG_DEBUG_FILE_DIRECTORY", None)
    try:
        clear_cache()
        index = elf_index(str(binary))
        assert index is not None and index.dwarf is None
        os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = str(work / "debug")
        clear_cache()
        index = elf_index(str(binary))
        assert index is not None and index.dwarf is not None
    finally:
        os.environ.pop("UALDBG_DEBUG_FILE_DIRECTORY", None)
        if saved is not None:
            os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = saved
        clear_cache()


def test_lambda_bodies_read_by_their_symbol_agree_with_the_full_walk(work: Path) -> None:
    """A lambda's operator() inside a template is found by reading only the abstract instance
    that holds it (located by its ELF symbol's address in the unit's bytes). Without symbols the
    resolver reads every abstract instance: both must name every PC alike, and the narrow read
    must really be the one taken."""
    from differential import memory_access_pcs

    from ualdbg.symbols.dwarfindex import DwarfIndex
    from ualdbg.symbols.elfindex import clear_cache, elf_index

    variant = next(v for v in VARIANTS if v.name == "fmt-O0")  # -O2 inlines its lambdas away
    binary = build(variant, work, work / "debug")
    clear_cache()
    index = elf_index(str(binary))
    assert index is not None and index.dwarf is not None
    narrow = index.dwarf
    full = DwarfIndex(narrow.dwarfinfo, narrow._is_code, narrow.symbol_name_at)  # no symbol starts
    deep = 0
    for pc in memory_access_pcs(binary):
        unit = narrow._unit_at(pc)
        if unit is None or unit.scopes._scopes[1].find(pc) is not None:
            continue
        deep += 1
        assert narrow.frames_at(pc) == full.frames_at(pc), hex(pc)
    read_narrow = sum(len(u.scopes._narrow) for u in narrow._units.values() if u is not None)
    assert deep >= 20 and read_narrow >= 1, (deep, read_narrow)
    assert all(u is None or "_deep_scopes" not in u.scopes.__dict__ for u in narrow._units.values())
    clear_cache()


@pytest.mark.parametrize("variant", SAMPLE, ids=[v.name for v in SAMPLE])
def test_narrow_reads_agree_with_the_full_walks(work: Path, variant) -> None:  # noqa: ANN001
    """The data naming's and the resolver's narrow reads (issue 34) against the full walks, on
    every 4th byte of the sample's data and 500 of its memory-access PCs (`make corpus`: every
    PC of every build)."""
    from datadiff import compare

    binary = build(variant, work, work / "debug")
    saved = os.environ.get("UALDBG_DEBUG_FILE_DIRECTORY")
    os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = str(work / "debug")
    try:
        outcome = compare(variant.name, binary, every=4, pcs_limit=SAMPLE_PER_BINARY)
    finally:
        if saved is None:
            os.environ.pop("UALDBG_DEBUG_FILE_DIRECTORY", None)
        else:
            os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = saved
    assert outcome.variables > 0 and outcome.pcs >= 400, outcome
    assert not outcome.mismatches, "\n".join(outcome.mismatches[:10])
