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


def _off_the_end() -> ELFParseError:
    return ELFParseError("a location list runs off its section")


def _v5(data: bytes, pos: int, size: int, order: Any) -> list[Entry] | None:
    end_of_data = len(data)

    def uleb() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= end_of_data:
                raise _off_the_end()
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    def addr() -> int:
        nonlocal pos
        if pos + size > end_of_data:
            raise _off_the_end()
        pos += size
        return int.from_bytes(data[pos - size : pos], order)

    def expr() -> list[int]:  # a counted location description
        nonlocal pos
        length = uleb()
        if pos + length > end_of_data:
            raise _off_the_end()
        pos += length
        return list(data[pos - length : pos])

    out: list[Entry] = []
    while True:
        start = pos
        if pos >= end_of_data:
            raise _off_the_end()
        kind = data[pos]
        pos += 1
        if kind == 0:  # DW_LLE_end_of_list
            return out
        if kind in (1, 2, 3):  # base_addressx, startx_endx, startx_length: .debug_addr
            return None
        if kind == 4:  # offset_pair
            lo = uleb()
            hi = uleb()
            out.append(LocationEntry(start, 0, lo, hi, expr(), False))
        elif kind == 5:  # default_location
            out.append(LocationEntry(start, 0, -1, -1, expr(), True))
        elif kind == 6:  # base_address
            out.append(BaseAddressEntry(start, 0, addr()))
        elif kind == 7:  # start_end
            lo = addr()
            hi = addr()
            out.append(LocationEntry(start, 0, lo, hi, expr(), True))
        elif kind == 8:  # start_length
            lo = addr()
            length = uleb()
            out.append(LocationEntry(start, 0, lo, lo + length, expr(), True))
        else:
            raise ELFParseError(f"location list entry kind {kind}")
        out[-1] = out[-1]._replace(entry_length=pos - start)


def _v4(data: bytes, pos: int, size: int, order: Any) -> list[Entry]:
    max_addr = (1 << (8 * size)) - 1
    out: list[Entry] = []
    while True:
        start = pos
        if pos + 2 * size > len(data):
            raise _off_the_end()
        begin = int.from_bytes(data[pos : pos + size], order)
        end = int.from_bytes(data[pos + size : pos + 2 * size], order)
        pos += 2 * size
        if begin == 0 and end == 0:
            return out
        if begin == max_addr:
            out.append(BaseAddressEntry(start, pos - start, end))
            continue
        if pos + 2 > len(data):
            raise _off_the_end()
        length = int.from_bytes(data[pos : pos + 2], order)
        pos += 2
        if pos + length > len(data):
            raise _off_the_end()
        pos += length
        out.append(LocationEntry(start, pos - start, begin, end, list(data[pos - length : pos]), False))
