"""ualdbg's reader of abbreviation tables (symbols/abbrevs.py) against pyelftools' own: the same
declarations on every table of real binaries (the examples, DWARF 4 and 5, the agent), and the
same answer, a table or an error, on tables with bytes changed or cut short."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest
from elftools.common.exceptions import ELFParseError
from elftools.dwarf.abbrevtable import AbbrevTable
from elftools.elf.elffile import ELFFile
from support.env import BUILD

from ualdbg.symbols.abbrevs import install, parse_table
from ualdbg.symbols.dwarfindex import DWARF_ERRORS
from ualdbg.symbols.elfindex import ElfIndex


def _plain(table: dict[int, Any]) -> dict[int, tuple[Any, ...]]:
    return {code: (decl["tag"], decl["children_flag"], decl.has_children(),
                   [(s.name, s.form, s.value if s.form == "DW_FORM_implicit_const" else None) for s in decl["attr_spec"]])
            for code, decl in table.items()}


def _theirs(info: Any, data: bytes, offset: int) -> dict[int, tuple[Any, ...]] | str:
    stream = io.BytesIO(data)
    try:
        return _plain(AbbrevTable(info.structs, stream, offset)._abbrev_map)
    except DWARF_ERRORS as exc:
        return f"error {isinstance(exc, ELFParseError)}"


def _ours(data: bytes, offset: int) -> dict[int, tuple[Any, ...]] | str:
    try:
        return _plain(parse_table(data, offset))
    except DWARF_ERRORS as exc:
        return f"error {isinstance(exc, ELFParseError)}"


@pytest.fixture(scope="module")
def sections(dwarf_binaries: list[Path]) -> list[tuple[Any, bytes, list[int]]]:
    paths = dwarf_binaries
    found = []
    for path in paths:
        with open(path, "rb") as f:
            info = ELFFile(io.BytesIO(f.read())).get_dwarf_info()
        sec = info.debug_abbrev_sec
        sec.stream.seek(0)
        data = sec.stream.read(sec.size)
        found.append((info, data, sorted({cu["debug_abbrev_offset"] for cu in info.iter_CUs()})))
    return found


def test_real_tables_read_alike(sections: list[tuple[Any, bytes, list[int]]]) -> None:
    tables = decls = 0
    for info, data, offsets in sections:
        for offset in offsets:
            ours = _ours(data, offset)
            assert ours == _theirs(info, data, offset)
            assert isinstance(ours, dict)
            tables += 1
            decls += len(ours)
    assert tables >= 20 and decls > 500


def test_tables_with_bytes_changed_read_alike(sections: list[tuple[Any, bytes, list[int]]]) -> None:
    rng = random.Random(34)
    errors = 0
    for round_ in range(600):
        info, data, offsets = sections[round_ % len(sections)]
        offset = offsets[round_ % len(offsets)]
        cut = bytearray(data[: rng.randrange(offset + 1, len(data) + 1)] if round_ % 3 == 0 else data)
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(offset, min(len(cut), offset + 400))
            cut[at] = rng.choice((0, 1, 2, 0x21, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        ours = _ours(bytes(cut), offset)
        assert ours == _theirs(info, bytes(cut), offset)
        errors += isinstance(ours, str)
    assert 0 < errors < 600  # both kinds of answer were compared


def test_dwarf_reads_its_units_through_it(sections: list[tuple[Any, bytes, list[int]]]) -> None:
    """An ElfIndex's DWARFInfo uses the reader, and DIEs parse through its tables as through
    pyelftools' (every DIE of the examples' units, tag and attributes)."""
    dwarf = ElfIndex(str(BUILD / "not_aligned")).dwarf
    assert dwarf is not None and "get_abbrev_table" in dwarf.dwarfinfo.__dict__
    with open(BUILD / "not_aligned", "rb") as f:
        data = f.read()
    plain = ELFFile(io.BytesIO(data)).get_dwarf_info()
    fast = install(ELFFile(io.BytesIO(data)).get_dwarf_info())

    def dies(info: Any) -> list[tuple[Any, ...]]:
        return [(d.offset, d.tag, d.has_children, sorted((k, repr(v.value), v.form) for k, v in d.attributes.items()))
                for cu in info.iter_CUs() for d in cu.iter_DIEs()]

    assert dies(fast) == dies(plain) and len(dies(plain)) > 100
