"""The bounded DWARF walks (symbols/dwarfindex.py: children, parent, unit_dies, issue 29) give what
pyelftools gives on well-formed DWARF (every DIE of the examples, C, C++ and Fortran), and end on
a hostile one: a DW_AT_sibling pointing back at its own DIE, where pyelftools loops forever."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from support.env import BUILD

from ualdbg.symbols.dwarfindex import children, parent, unit_dies

EXAMPLES = ["not_aligned", "packed_header", "common_block", "stack_double", "threads", "mpi_status"]


def _units(data: bytes) -> list:  # type: ignore[type-arg]
    return list(ELFFile(io.BytesIO(data)).get_dwarf_info().iter_CUs())


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_walks_give_what_pyelftools_gives(name: str) -> None:
    data = (BUILD / name).read_bytes()
    theirs = {cu.cu_offset: [(d.offset, [c.offset for c in d.iter_children()], (d.get_parent() or d).offset)
                             for d in cu.iter_DIEs() if not d.is_null()] for cu in _units(data)}
    ours = {cu.cu_offset: [(d.offset, [c.offset for c in children(d)], (parent(d) or d).offset)
                           for d in unit_dies(cu) if not d.is_null()] for cu in _units(data)}
    assert ours == theirs and sum(len(v) for v in ours.values()) > 20


def test_a_cyclic_sibling_ends_the_walk(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    from test_fuzz import _cyclic_sibling

    data = _cyclic_sibling((BUILD / "stack_double").read_bytes())
    for cu in _units(data):
        for d in unit_dies(cu):
            if d.tag == "DW_TAG_subprogram" and d.attributes.get("DW_AT_name") and \
                    d.attributes["DW_AT_name"].value == b"main":
                kids = [c.offset for c in children(d)]  # pyelftools: the first child forever
                assert len(kids) == len(set(kids)) and kids == sorted(kids) and kids, kids
                assert all(parent(c) is d for c in children(d))
                return
    raise AssertionError("no main")

