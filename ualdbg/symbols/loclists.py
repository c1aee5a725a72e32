"""A variable's location list read from the section's bytes, for data.ModuleData.location_expr.

pyelftools parses a location list with `construct`, entry by entry (about 6% of `ualdbg check` on
sqlite3's shell, issue 34: an optimised function's variables mostly have lists). This reads the
list LocationParser.parse_from_attribute would read, from the section DWARFInfo.location_lists()
and its LocationListsPair would pick (DWARF 5's .debug_loclists or DWARF 4's .debug_loc), into
pyelftools' own LocationEntry and BaseAddressEntry tuples, with the same ELFParseError where a
list runs off its section or names an unknown entry kind. Anything else (a location expression,
a list with an entry indexing .debug_addr, an attribute that is no list) is left to pyelftools.
tests/symbols/test_loclists.py compares the two."""

from __future__ import annotations

from typing import Any

from elftools.common.exceptions import ELFParseError
from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry, LocationParser

from ualdbg.symbols.bytereader import block, fixed, uleb
from ualdbg.symbols.rangelists import section_bytes

Entry = LocationEntry | BaseAddressEntry


def parse_location(parser: LocationParser, attr: Any, version: int, die: Any) -> Any:
    """parser.parse_from_attribute(attr, version, die), a location list read by location_list."""
    entries = location_list(die.dwarfinfo, attr, version, die)
    return entries if entries is not None else parser.parse_from_attribute(attr, version, die)


def location_list(info: Any, attr: Any, version: int, die: Any) -> list[Entry] | None:
    """The entries parse_from_attribute(attr, version, die) gives when `attr` points at a
    location list; None: ask pyelftools."""
    # A location is an expression or a list (LocationParser.attribute_has_location); an expression
    # is DW_FORM_exprloc, or before DWARF 4 a block (not a constant value).
    expression = attr.form == "DW_FORM_exprloc" or (
        version < 4 and attr.form.startswith("DW_FORM_block") and attr.name != "DW_AT_const_value")
    if expression or not LocationParser.attribute_has_location(attr, version):
        return None
    v5_sec, v4_sec = info.debug_loclists_sec, info.debug_loc_sec
    if v5_sec is None and v4_sec is None:
        return None
    v5 = v4_sec is None or (v5_sec is not None and die.cu.header.version >= 5)
    size = info.structs.address_size
    offset = attr.value
    if size not in (4, 8) or not isinstance(offset, int) or offset < 0:
        return None
    order: Any = "little" if info.config.little_endian else "big"
    data = section_bytes(info, "debug_loclists_sec" if v5 else "debug_loc_sec")
    return (_v5 if v5 else _v4)(data, offset, size, order)


def _v5(data: bytes, pos: int, size: int, order: Any) -> list[Entry] | None:
    out: list[Entry] = []
    while True:
        start = pos
        kind, pos = fixed(data, pos, 1, order)
        if kind == 0:  # DW_LLE_end_of_list
            return out
        if kind in (1, 2, 3):  # base_addressx, startx_endx, startx_length: .debug_addr
            return None
        if kind == 6:  # base_address
            base, pos = fixed(data, pos, size, order)
            out.append(BaseAddressEntry(start, pos - start, base))
            continue
        if kind == 4:  # offset_pair
            lo, pos = uleb(data, pos)
            hi, pos = uleb(data, pos)
            absolute = False
        elif kind == 5:  # default_location
            lo = hi = -1
            absolute = True
        elif kind == 7:  # start_end
            lo, pos = fixed(data, pos, size, order)
            hi, pos = fixed(data, pos, size, order)
            absolute = True
        elif kind == 8:  # start_length
            lo, pos = fixed(data, pos, size, order)
            length, pos = uleb(data, pos)
            hi, absolute = lo + length, True
        else:
            raise ELFParseError(f"location list entry kind {kind}")
        length, pos = uleb(data, pos)  # a counted location description
        expr, pos = block(data, pos, length)
        out.append(LocationEntry(start, pos - start, lo, hi, expr, absolute))


def _v4(data: bytes, pos: int, size: int, order: Any) -> list[Entry]:
    max_addr = (1 << (8 * size)) - 1
    out: list[Entry] = []
    while True:
        start = pos
        if pos + 2 * size > len(data):  # both read before either is looked at, as pyelftools does
            raise ELFParseError("a location list runs off its section")
        begin, pos = fixed(data, pos, size, order)
        end, pos = fixed(data, pos, size, order)
        if begin == 0 and end == 0:
            return out
        if begin == max_addr:
            out.append(BaseAddressEntry(start, pos - start, end))
            continue
        length, pos = fixed(data, pos, 2, order)
        expr, pos = block(data, pos, length)
        out.append(LocationEntry(start, pos - start, begin, end, expr, False))
