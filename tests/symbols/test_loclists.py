"""ualdbg's location-list reader (symbols/loclists.py) against pyelftools' LocationParser: the
same entries for every DW_AT_location list of real binaries (the examples, DWARF 4 and 5 at -O2,
the agent), and the same answer, entries or an error, on sections with bytes changed."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest
from elftools.dwarf.locationlists import LocationParser
from elftools.elf.elffile import ELFFile

from ualdbg.symbols.dwarfindex import DWARF_ERRORS
from ualdbg.symbols.loclists import location_list


def _answer(fn: Any) -> Any:
    try:
        found = fn()
    except DWARF_ERRORS as exc:
        return f"error {type(exc).__name__}"
    return None if found is None else [tuple(e) for e in found]


@pytest.fixture(scope="module")
def binaries(dwarf_binaries: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in dwarf_binaries]


def _both(data: bytes, sample: random.Random | None = None) -> list[tuple[Any, Any]]:
    info = ELFFile(io.BytesIO(data)).get_dwarf_info()
    parser = LocationParser(info.location_lists())
    dies = [d for cu in info.iter_CUs() for d in cu.iter_DIEs() if "DW_AT_location" in d.attributes]
    if sample is not None:
        dies = sample.sample(dies, min(len(dies), 30))
    pairs = []
    for die in dies:
        attr, version = die.attributes["DW_AT_location"], die.cu["version"]
        ours = _answer(lambda a=attr, v=version, d=die: location_list(info, a, v, d))
        if ours is None:  # not a list, or an indexed entry: data.py asks pyelftools
            continue
        pairs.append((ours, _answer(lambda a=attr, v=version, d=die: parser.parse_from_attribute(a, v, d))))
    return pairs


def test_real_lists_read_alike(binaries: list[bytes]) -> None:
    count = entries = 0
    for data in binaries:
        for ours, theirs in _both(data):
            assert ours == theirs
            assert isinstance(ours, list)
            count += 1
            entries += len(ours)
    assert count >= 50 and entries >= 100


def test_sections_with_bytes_changed_read_alike(binaries: list[bytes]) -> None:
    rng = random.Random(34)
    with_lists = [d for d in binaries if _both(d)]
    assert len(with_lists) >= 3
    errors = answers = 0
    for round_ in range(90):
        data = with_lists[round_ % len(with_lists)]
        header = next(s for s in ELFFile(io.BytesIO(data)).iter_sections() if s.name in (".debug_loclists", ".debug_loc"))
        start, size = header["sh_offset"], header["sh_size"]
        changed = bytearray(data)
        for _ in range(rng.randrange(1, 12)):
            changed[start + rng.randrange(size)] = rng.choice((0, 1, 4, 5, 6, 7, 8, 9, 0x80, 0xFF, rng.randrange(256)))
        for ours, theirs in _both(bytes(changed), rng):
            assert ours == theirs
            answers += 1
            errors += isinstance(ours, str)
    assert answers > 300 and 0 < errors < answers
