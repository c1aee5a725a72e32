"""ualdbg's DIE reader (symbols/dieparse.py) against pyelftools' own parser: every DIE of real
binaries (the examples, Fortran and 32-bit among them, DWARF 4 and 5 at -O2, the agent) has the
same tag, children flag, size and attributes (name, form, value, raw value, offset), and units
with bytes changed give the same DIEs or the same error."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile

from ualdbg.symbols.abbrevs import install as install_abbrevs
from ualdbg.symbols.dieparse import install
from ualdbg.symbols.dwarfindex import DWARF_ERRORS


@pytest.fixture(scope="module")
def binaries(dwarf_binaries: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in dwarf_binaries]


def _dies(data: bytes, fast: bool, limit: int | None = None) -> Any:
    info = ELFFile(io.BytesIO(data)).get_dwarf_info()
    if fast:
        install(install_abbrevs(info))
    out = []
    try:
        for cu in info.iter_CUs():
            for die in cu.iter_DIEs():
                out.append((die.offset, die.tag, die.has_children, die.size, die.abbrev_code,
                            [tuple(a) for a in die.attributes.values()]))
                if limit is not None and len(out) >= limit:
                    return out
    except DWARF_ERRORS as exc:
        out.append(f"error {type(exc).__name__}")
    return out


def test_real_dies_read_alike(binaries: list[bytes]) -> None:
    total = 0
    for data in binaries:
        ours, theirs = _dies(data, True), _dies(data, False)
        assert ours == theirs
        assert not any(isinstance(d, str) for d in ours)
        total += len(ours)
    assert total > 5000


def test_units_with_bytes_changed_read_alike(binaries: list[bytes]) -> None:
    rng = random.Random(34)
    errors = 0
    for round_ in range(60):
        data = binaries[round_ % len(binaries)]
        header = next(s for s in ELFFile(io.BytesIO(data)).iter_sections() if s.name == ".debug_info")
        start, size = header["sh_offset"], header["sh_size"]
        changed = bytearray(data)
        for _ in range(rng.randrange(1, 10)):
            changed[start + rng.randrange(min(size, 3000))] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        ours, theirs = _dies(bytes(changed), True, 3000), _dies(bytes(changed), False, 3000)
        assert ours == theirs
        errors += bool(ours) and isinstance(ours[-1], str)
    assert 0 < errors < 60
