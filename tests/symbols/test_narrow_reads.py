"""The narrow reads that name a site's data and code (issue 34) give what the full walks gave, on
every example (every byte of their data, every memory-access PC), and really are narrow: naming
one address of a big program reads a small part of its DWARF. The corpus's sample is compared in
test_corpus.py, sqlite3 and CPython by `tests/symbols/datadiff.py` (docs/SYMBOLS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from datadiff import compare
from support.env import BUILD

from ualdbg.symbols.data import ModuleData
from ualdbg.symbols.elfindex import ElfIndex

EXAMPLES = ["not_aligned", "mpi_status", "common_block", "packed_header", "pair_stream", "threads", "rep_string",
            "sigbus_handler", "split_lines", "stack_double", "memalign", "not_aligned_nodwarf"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_are_named_as_by_the_full_walks(name: str) -> None:
    outcome = compare(name, BUILD / name, every=1)
    assert outcome.addresses > 1000 and outcome.pcs > 0, outcome
    assert not outcome.mismatches, "\n".join(outcome.mismatches[:10])


def test_the_comparison_sees_a_difference() -> None:
    """The comparison is not vacuous: a narrow read that answers differently is reported."""
    import datadiff

    from ualdbg.symbols import data

    original = data.ModuleData.global_at
    try:
        data.ModuleData.global_at = lambda self, addr: None  # type: ignore[method-assign]
        outcome = datadiff.compare("common_block", BUILD / "common_block", every=4)
    finally:
        data.ModuleData.global_at = original  # type: ignore[method-assign]
    assert any("variable at" in m for m in outcome.mismatches)


def _dies_read(md: ModuleData) -> int:
    assert md.dwarf is not None
    return sum(len(cu._dielist) for cu in md.dwarf.dwarfinfo._cu_cache)


def test_one_address_reads_a_small_part_of_the_dwarf(tmp_path: Path) -> None:
    """A program of many globals and functions (generated: 400 of each in one unit, as sqlite3's
    amalgamation is one unit): naming one global, and the scopes of one PC, read a few DIEs;
    the full walk reads them all."""
    from support.build import build_source

    src = tmp_path / "many.c"
    parts = [f"int g{i}[{i + 1}];\nint f{i}(int x) {{ int y = x * {i}; g{i}[0] += y; return y + g{i}[{i}]; }}\n"
             for i in range(400)]
    src.write_text("".join(parts) + "int main(void) { return f1(2); }\n")
    binary = build_source(src, tmp_path, flags=("-g", "-O1"))
    narrow = ModuleData(ElfIndex(str(binary)))
    g = next(s for s in narrow.symbols if s.name == "g200")
    found = narrow.global_at(g.start + 8)
    assert found is not None and (found.name, found.kind, found.size) == ("g200", "global", 804)
    f = next(s for s in narrow.index.symbols._values if s.name == "f300")
    assert narrow.scopes_at(f.start + 1)[0][0] == "f300"
    assert narrow.index.lookup(f.start + 1).function == "f300"
    read = _dies_read(narrow)
    full = ModuleData(ElfIndex(str(binary)))
    assert full.globals.find(g.start + 8) == found
    total = _dies_read(full)
    assert total > 3000 and read * 50 < total, (read, total)
