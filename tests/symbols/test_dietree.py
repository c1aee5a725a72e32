"""The units' shapes read from .debug_info's bytes (symbols/dietree.py) against pyelftools' own
tree, and on hostile bytes: a sibling reference that points back (a cycle for a reader that
follows it) costs a linear scan, cut bytes one clear DWARF error, never a hang or a traceback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from elftools.common.exceptions import DWARFError
from support.env import BUILD

from ualdbg.symbols.dietree import CodeHolders, DieTree, Node, UnitShape
from ualdbg.symbols.elfindex import ElfIndex


def _tree(name: str) -> tuple[DieTree, object]:
    index = ElfIndex(str(BUILD / name))
    assert index.dwarf is not None
    return DieTree(index.dwarf.dwarfinfo), index.dwarf


@pytest.mark.parametrize("name", ["common_block", "packed_header", "threads", "stack_double"])
def test_the_shape_is_pyelftools_tree(name: str) -> None:
    tree, dwarf = _tree(name)
    checked = 0
    for cu in dwarf.dwarfinfo.iter_CUs():  # type: ignore[attr-defined]
        shape = tree.shape_at(cu.cu_die_offset)
        assert shape is not None
        stack = [(cu.get_top_DIE(), shape.top_node())]
        while stack:
            die, node = stack.pop()
            kids, nodes = list(die.iter_children()), shape.children(node)
            assert [(k.offset, k.tag) for k in kids] == [(n.offset, n.tag) for n in nodes]
            for k, n in zip(kids, nodes):
                assert [p.offset for p in shape.path_to(n.offset)][-1] == k.offset
                checked += 1
                if k.has_children:
                    stack.append((k, n))
    assert checked > 50


def _with_sibling(shape: UnitShape, dwarf: object) -> tuple[Node, int]:
    """A top-level DIE with a DW_AT_sibling of form ref4, and where that reference is written."""
    for node in shape.children(shape.top_node()):
        die = shape.cu.get_DIE_from_refaddr(node.offset)
        attr = die.attributes.get("DW_AT_sibling")
        if attr is not None and attr.form == "DW_FORM_ref4":
            return node, attr.offset
    raise AssertionError("no DW_AT_sibling of form ref4")


@pytest.mark.parametrize("target", ["itself", "the unit's start"])
def test_a_sibling_pointing_back_costs_a_scan_not_a_cycle(target: str) -> None:
    tree, dwarf = _tree("common_block")
    shape = tree.shape_at(tree.unit_offsets[0][0])
    assert shape is not None
    want = [(n.offset, n.end) for n in shape.children(shape.top_node())]
    node, at = _with_sibling(shape, dwarf)
    data = bytearray(tree.data)
    back = node.offset - shape.offset if target == "itself" else 0
    data[at:at + 4] = back.to_bytes(4, "little")
    hostile = DieTree(dwarf.dwarfinfo)  # type: ignore[attr-defined]
    hostile.__dict__["data"] = bytes(data)
    bad = hostile.shape_at(tree.unit_offsets[0][0])
    assert bad is not None
    assert [(n.offset, n.end) for n in bad.children(bad.top_node())] == want


def test_cut_bytes_are_one_dwarf_error() -> None:
    tree, dwarf = _tree("common_block")
    start, end = tree.unit_offsets[0]
    cut = DieTree(dwarf.dwarfinfo)  # type: ignore[attr-defined]
    cut.__dict__["data"] = tree.data[: start + (end - start) // 2]
    shape = cut.shape_at(start)
    assert shape is not None
    with pytest.raises(DWARFError):
        shape.children(shape.top_node())
    holders = CodeHolders(cut, dwarf.die_ranges)  # type: ignore[attr-defined]
    top = shape.cu.get_top_DIE()
    assert holders.children_holding(shape.cu, top, 0x1189) is None  # unknown: the caller reads it all
    assert holders.nested_holding(shape.cu, 0x1189) is None


class _Decl(dict):  # type: ignore[type-arg]
    def has_children(self) -> bool:
        return False


class _OneDieUnit:
    """A unit of one top DIE whose one attribute is DW_FORM_udata: what UnitShape reads of a
    unit (offsets, sizes, its abbreviation table)."""

    cu_offset, cu_die_offset = 0, 11
    structs = SimpleNamespace(dwarf_format=32)

    def __init__(self, size: int) -> None:
        self.size = size

    def __getitem__(self, key: str) -> int:
        return {"address_size": 8, "version": 5}[key]

    def get_abbrev_table(self) -> object:
        decl = _Decl(tag="DW_TAG_compile_unit", attr_spec=[SimpleNamespace(name="DW_AT_const_value", form="DW_FORM_udata")])
        return SimpleNamespace(get_abbrev=lambda code: decl)


def test_a_long_leb128_costs_its_length_not_its_square() -> None:
    """A hostile run of 0xff bytes read as one LEB128: before, each byte shifted a growing
    integer (400 KB: 26 s, 4 MB: most of an hour); past 64 bits the value is no size or offset."""
    import time

    data = bytes(11) + b"\x01" + b"\xff" * 400_000 + b"\x01"
    shape = UnitShape(data, _OneDieUnit(len(data)), little=True)
    t = time.perf_counter()
    top = shape.top_node()
    assert top.attrs_end == len(data) and time.perf_counter() - t < 5
