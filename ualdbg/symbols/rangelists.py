"""A DIE's range list read from the section's bytes, for dwarfindex.die_ranges.

pyelftools parses a range list with `construct`, entry by entry (about 5% of `ualdbg check` on
sqlite3's shell, issue 34: every inlined call with two or more pieces of code has one). This reads
the same section the same way into pyelftools' own RangeEntry and BaseAddressEntry tuples: DWARF
5's .debug_rnglists or DWARF 4's .debug_ranges, chosen as DWARFInfo.range_lists() and its
RangeListsPair choose, and the same ELFParseError where a list runs off its section or names an
unknown entry kind. A list with an entry that indexes .debug_addr (DW_RLE_*x) is left to
pyelftools (None). tests/symbols/test_rangelists.py compares the two on every list of real
binaries and on lists with bytes changed."""

from __future__ import annotations

from typing import Any

from elftools.common.exceptions import ELFParseError
from elftools.dwarf.ranges import BaseAddressEntry, RangeEntry

from ualdbg.symbols.bytereader import fixed, uleb

Entry = RangeEntry | BaseAddressEntry


def section_bytes(info: Any, name: str) -> bytes:
    cache = info.__dict__.setdefault("_ualdbg_section_bytes", {})
    data = cache.get(name)
    if data is None:
        section = getattr(info, name)
        section.stream.seek(0)
        data = cache[name] = section.stream.read(section.size)
    return data


def range_list(info: Any, offset: int, cu: Any) -> list[Entry] | None:
    """The entries of the range list at `offset` (a DW_AT_ranges value) for unit `cu`, as
    pyelftools' get_range_list_at_offset gives them; [] where the file has no range section;
    None: leave it to pyelftools (an indexed entry, or an unusual address size)."""
    v5_sec, v4_sec = info.debug_rnglists_sec, info.debug_ranges_sec
    if v5_sec is None and v4_sec is None:
        return []
    v5 = v4_sec is None or (v5_sec is not None and cu.header.version >= 5)
    size = info.structs.address_size
    if size not in (4, 8) or not isinstance(offset, int) or offset < 0:
        return None
    order: Any = "little" if info.config.little_endian else "big"
    data = section_bytes(info, "debug_rnglists_sec" if v5 else "debug_ranges_sec")
    return (_v5 if v5 else _v4)(data, offset, size, order)


def _v5(data: bytes, pos: int, size: int, order: Any) -> list[Entry] | None:
    out: list[Entry] = []
    while True:
        start = pos
        kind, pos = fixed(data, pos, 1, order)
        if kind == 0:  # DW_RLE_end_of_list
            return out
        if kind in (1, 2, 3):  # base_addressx, startx_endx, startx_length: .debug_addr
            return None
        if kind == 4:  # offset_pair
            lo, pos = uleb(data, pos)
            hi, pos = uleb(data, pos)
            out.append(RangeEntry(start, pos - start, lo, hi, False))
        elif kind == 5:  # base_address
            base, pos = fixed(data, pos, size, order)
            out.append(BaseAddressEntry(start, base))
        elif kind == 6:  # start_end
            lo, pos = fixed(data, pos, size, order)
            hi, pos = fixed(data, pos, size, order)
            out.append(RangeEntry(start, pos - start, lo, hi, True))
        elif kind == 7:  # start_length
            lo, pos = fixed(data, pos, size, order)
            length, pos = uleb(data, pos)
            out.append(RangeEntry(start, pos - start, lo, lo + length, True))
        else:
            raise ELFParseError(f"range list entry kind {kind}")


def _v4(data: bytes, pos: int, size: int, order: Any) -> list[Entry]:
    max_addr = (1 << (8 * size)) - 1
    out: list[Entry] = []
    while True:
        start = pos
        if pos + 2 * size > len(data):  # both read before either is looked at, as pyelftools does
            raise ELFParseError("a range list runs off its section")
        begin, pos = fixed(data, pos, size, order)
        end, pos = fixed(data, pos, size, order)
        if begin == 0 and end == 0:
            return out
        if begin == max_addr:
            out.append(BaseAddressEntry(start, end))
        else:
            out.append(RangeEntry(start, pos - start, begin, end, False))
