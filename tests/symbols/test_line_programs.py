"""The C line-program decoder (ualdbg/agent/src/lines/lines.c) against the Python one it replaces
where it can be built (symbols/lineprogram.py, the reference): the same tables on every unit of
real binaries (the examples, DWARF 4 and 5, and the agent itself), on fuzzed programs and header
fields, and on real programs with bytes changed; a program whose values do not fit the C
decoder's integers is decoded by Python. The names these tables give are checked against gdb
itself by test_corpus.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ualdbg.symbols import lineprogram
from ualdbg.symbols.dwarfindex import Unit
from ualdbg.symbols.elfindex import ElfIndex
from ualdbg.symbols.lineprogram import LineParams, decode_lines_in_python


def _plain(found: tuple[dict[object, Any], dict[object, int]]) -> tuple[list[tuple[object, tuple[list[int], ...]]], dict[object, int]]:
    """Tables as lists, in their order (the table order is part of the answer)."""
    tables, index_of = found
    return [(subfile, tuple(list(column) for column in columns)) for subfile, columns in tables.items()], index_of


def _same(code: bytes, params: LineParams, subfiles: list[object]) -> bool:
    """Both decoders' tables are equal; False: the C decoder handed the program back."""
    in_c = lineprogram._decode_in_c(code, params, subfiles)
    reference = decode_lines_in_python(code, params, subfiles)
    if in_c is None:
        return False
    c_tables, c_index = _plain(in_c)
    py_tables, py_index = _plain(reference)
    assert c_tables == py_tables
    # Each subfile is named by one of its file indexes (any one: they name the same path).
    for subfile in dict(py_tables):
        assert subfiles[c_index[subfile]] == subfile if c_index[subfile] < len(subfiles) else subfile == ("?", c_index[subfile])
    return True


def _programs(path: Path) -> list[tuple[bytes, LineParams, list[object]]]:
    """Every unit's line program of `path`, as UnitLines hands it to the decoders."""
    found: list[tuple[bytes, LineParams, list[object]]] = []
    dwarf = ElfIndex(str(path)).dwarf
    assert dwarf is not None, path
    original = lineprogram._decode_in_c

    def keep(code: bytes, params: LineParams, subfiles: Any) -> None:
        found.append((code, params, list(subfiles)))
        return None

    lineprogram._decode_in_c = keep  # type: ignore[assignment]
    try:
        for cu in dwarf.dwarfinfo.iter_CUs():
            Unit(dwarf, cu).lines._lines  # noqa: B018 (decodes it)
    finally:
        lineprogram._decode_in_c = original  # type: ignore[assignment]
    return found


@pytest.fixture(scope="module")
def binaries(dwarf_binaries: list[Path]) -> list[Path]:
    return dwarf_binaries


def test_the_c_decoder_is_built_and_used() -> None:
    assert lineprogram._library() is not None


def test_real_units_decode_alike(binaries: list[Path]) -> None:
    units = rows = 0
    for path in binaries:
        for code, params, subfiles in _programs(path):
            assert _same(code, params, subfiles), f"{path}: the C decoder handed back a real unit"
            units += 1
            rows += len(code)
    assert units >= 20 and rows > 10_000


def test_real_programs_with_bytes_changed_decode_alike(binaries: list[Path]) -> None:
    """Hostile programs grown from real ones: a byte in every few changed, cut short, or values
    that do not fit 64 bits (those the C decoder hands back)."""
    import random

    rng = random.Random(34)
    programs = [p for path in binaries for p in _programs(path)]
    handed_back = 0
    for round_ in range(400):
        code, params, subfiles = programs[round_ % len(programs)]
        data = bytearray(code[: rng.randrange(1, len(code) + 1)] if round_ % 3 == 0 else code)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.choice((0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        handed_back += not _same(bytes(data), params, subfiles)
    assert handed_back < 200  # most are decoded in C: the comparison compares


def test_values_past_64_bits_are_decoded_by_python() -> None:
    """An address that advances past 2^64 and a line past 2^63: Python's integers have no width,
    the C decoder's do, so it hands such programs back. A sequence at the linker's -1 tombstone
    records nothing past it, and stays in C."""
    params = LineParams(1, 1, True, -5, 14, 13, (0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1), 8, False, 0x1000)
    subfiles: list[object] = ["a.c", "a.c", "b.h"]
    end = b"\x00\x01\x01"
    past_2_64 = b"\x00\x09\x02" + (2**64 - 16).to_bytes(8, "little") + b"\x01\x02\x20\x03\x01\x01" + end
    far_line = b"\x00\x09\x02" + (0x1000).to_bytes(8, "little") + b"\x03" + b"\xff" * 9 + b"\x00\x01" + end
    for code in (past_2_64, far_line):
        assert lineprogram._decode_in_c(code, params, subfiles) is None
        assert _plain(lineprogram.decode_lines(code, params, subfiles)) == _plain(decode_lines_in_python(code, params, subfiles))
    assert max(decode_lines_in_python(past_2_64, params, subfiles)[0]["a.c"][0]) >= 2**64
    tombstone = b"\x00\x09\x02" + b"\xff" * 8 + b"\x01\x02\x10\x01" + end
    assert _same(tombstone, params, subfiles)
    normal = b"\x00\x09\x02" + (0x1000).to_bytes(8, "little") + b"\x01\x21\x04\x02\x21\x02\x04\x00\x01\x01"
    assert _same(normal, params, subfiles)
    tables, _ = lineprogram.decode_lines(normal, params, subfiles)
    assert {subfile: list(columns[2]) for subfile, columns in tables.items()} == {"a.c": [1, 2, 0], "b.h": [3, 0]}


_byte = st.integers(0, 255)
_opcodes = st.lists(st.one_of(
    st.sampled_from([b"\x00\x01\x01", b"\x01", b"\x06", b"\x08", b"\x07", b"\x0a", b"\x0b", b"\x0c"]),
    st.builds(lambda a: b"\x00\x09\x02" + a.to_bytes(8, "little"), st.integers(0, 2**64 - 1)),
    st.builds(lambda a: b"\x00\x05\x02" + a.to_bytes(4, "big"), st.integers(0, 2**32 - 1)),
    st.builds(lambda n: b"\x02" + bytes([n | 0x80, n & 0x7F]), _byte),
    st.builds(lambda n: b"\x03" + bytes([n]), st.integers(0, 127)),
    st.builds(lambda n: b"\x04" + bytes([n]), st.integers(0, 12)),
    st.builds(lambda n: b"\x00\x02\x04" + bytes([n]), st.integers(0, 127)),
    st.builds(lambda n: b"\x09" + n.to_bytes(2, "little"), st.integers(0, 65535)),
    st.builds(lambda n: b"\x05" + bytes([n]), st.integers(0, 127)),
    st.builds(bytes, st.lists(_byte, min_size=1, max_size=4)),
    st.builds(lambda n: bytes([n]), st.integers(13, 255)),
), max_size=60).map(b"".join)
_params = st.builds(
    LineParams,
    min_len=st.integers(0, 8), max_ops=st.integers(1, 4), default_stmt=st.booleans(),
    line_base=st.integers(-10, 3), line_range=st.integers(1, 20), opcode_base=st.sampled_from([0, 1, 4, 10, 13, 13, 13, 40]),
    std_lengths=st.lists(st.integers(0, 3), max_size=12).map(tuple), address_size=st.sampled_from([0, 4, 8, 8, 16]),
    big_endian=st.booleans(), low_pc=st.sampled_from([0, 0x1000]),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(code=_opcodes, params=_params, n_files=st.integers(0, 6), same_path=st.booleans())
def test_fuzzed_programs_decode_alike(code: bytes, params: LineParams, n_files: int, same_path: bool) -> None:
    subfiles: list[object] = [f"/src/{0 if same_path and i % 2 else i}.c" for i in range(n_files)]
    if n_files > 2:
        subfiles[2] = ("?", 2)  # a file index whose entry names nothing
    found = lineprogram._decode_in_c(code, params, subfiles)
    if found is not None:
        assert _plain(found)[0] == _plain(decode_lines_in_python(code, params, subfiles))[0]
    else:
        assert _plain(lineprogram.decode_lines(code, params, subfiles))[0] == _plain(decode_lines_in_python(code, params, subfiles))[0]
