"""ualdbg's range-list reader (symbols/rangelists.py) against pyelftools': the same entries for
every DW_AT_ranges of real binaries (the examples, DWARF 4 and 5, the agent), and the same
answer, entries or an error, on sections with bytes changed or cut short."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile

from ualdbg.symbols.dwarfindex import DWARF_ERRORS
from ualdbg.symbols.rangelists import range_list


def _answer(fn: Any) -> Any:
    try:
        return list(fn())
    except DWARF_ERRORS as exc:
        return f"error {type(exc).__name__}"


@pytest.fixture(scope="module")
def lists(dwarf_binaries: list[Path]) -> list[tuple[bytes, list[tuple[int, int]]]]:
    """Per binary, its bytes and (unit offset, DW_AT_ranges value) of every DIE with ranges."""
    paths = dwarf_binaries
    found = []
    for path in paths:
        data = path.read_bytes()
        info = ELFFile(io.BytesIO(data)).get_dwarf_info()
        refs = [(cu.cu_offset, die.attributes["DW_AT_ranges"].value)
                for cu in info.iter_CUs() for die in cu.iter_DIEs() if "DW_AT_ranges" in die.attributes]
        if refs:
            found.append((data, refs))
    return found


def _both(data: bytes, refs: list[tuple[int, int]]) -> list[tuple[Any, Any]]:
    info = ELFFile(io.BytesIO(data)).get_dwarf_info()
    units = {cu.cu_offset: cu for cu in info.iter_CUs()}
    pairs = []
    for cu_offset, offset in refs:
        cu = units[cu_offset]
        theirs = _answer(lambda o=offset, c=cu: (info.range_lists() or _Empty()).get_range_list_at_offset(o, cu=c))
        ours = _answer(lambda o=offset, c=cu: _or_none(range_list(info, o, c)))
        if ours == [None]:  # an indexed entry: die_ranges asks pyelftools
            continue
        pairs.append((ours, theirs))
    return pairs


def _or_none(found: list[Any] | None) -> list[Any]:
    return [None] if found is None else found


class _Empty:
    def get_range_list_at_offset(self, offset: int, cu: Any) -> list[Any]:
        return []


def test_real_lists_read_alike(lists: list[tuple[bytes, list[tuple[int, int]]]]) -> None:
    count = entries = 0
    for data, refs in lists:
        for ours, theirs in _both(data, refs):
            assert ours == theirs
            assert isinstance(ours, list)
            count += 1
            entries += len(ours)
    assert count >= 50 and entries >= 100
    assert len(lists) >= 3


def test_sections_with_bytes_changed_read_alike(lists: list[tuple[bytes, list[tuple[int, int]]]]) -> None:
    rng = random.Random(34)
    errors = answers = 0
    for round_ in range(120):
        data, refs = lists[round_ % len(lists)]
        info = ELFFile(io.BytesIO(data)).get_dwarf_info()
        section = info.debug_rnglists_sec or info.debug_ranges_sec
        header = next(s for s in ELFFile(io.BytesIO(data)).iter_sections()
                      if s.name in (".debug_rnglists", ".debug_ranges"))
        start, size = header["sh_offset"], header["sh_size"]
        assert section is not None and size > 0
        changed = bytearray(data)
        for _ in range(rng.randrange(1, 12)):
            changed[start + rng.randrange(size)] = rng.choice((0, 1, 4, 5, 6, 7, 8, 0x80, 0xFF, rng.randrange(256)))
        for ours, theirs in _both(bytes(changed), rng.sample(refs, min(len(refs), 20))):
            assert ours == theirs
            answers += 1
            errors += isinstance(ours, str)
    assert answers > 300 and 0 < errors < answers
