"""DIEs read from .debug_info's bytes, for pyelftools.

pyelftools parses each DIE's attributes with `construct`, a parser object per form: reading the
scopes, variables and types of a site's frame, and each PC's inline chain, was 10-18% of `ualdbg
check` on the real workloads in py-spy (issue 34). `install` makes the DIEs of one DWARFInfo
read their raw attribute values from the section's bytes with plain code, then hands each raw
value to pyelftools' own `DIE._translate_attr_value` (strings from .debug_str, flags, indexed
forms), so the DIE is pyelftools' DIE, attribute for attribute: the same tag, names, forms,
values, raw values and offsets. Forms not read here (DW_FORM_indirect, the indexed strx and addrx
forms, data16, the supplementary-file forms) and anything that runs off the section make the
DIE be parsed by pyelftools itself, errors included. tests/symbols/test_dieparse.py compares the
two on every DIE of real binaries and on units with bytes changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elftools.common.exceptions import ELFParseError
from elftools.construct import ConstructError
from elftools.dwarf.die import DIE, AttributeValue

from ualdbg.symbols.bytereader import block, fixed, sleb, uleb
from ualdbg.symbols.rangelists import section_bytes

_ORIGINAL: Callable[[DIE], None] = DIE._parse_DIE
_STATE = "_ualdbg_dies"

# A reader: (bytes, position) -> (raw value, position after it); raises ELFParseError past the end.
Reader = Callable[[bytes, int], tuple[Any, int]]


def _fixed(size: int, order: Any) -> Reader:
    def read(data: bytes, pos: int) -> tuple[int, int]:
        return fixed(data, pos, size, order)

    return read


def _block(length: Reader) -> Reader:
    def read(data: bytes, pos: int) -> tuple[list[int], int]:
        n, pos = length(data, pos)
        return block(data, pos, n)

    return read


class _Unread(Exception):
    """A form this module does not read, or a unit shape it has no readers for."""


def _cstring(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\0", pos)
    if end < 0:
        raise ELFParseError("a string runs off its section")
    return data[pos:end], end + 1


def _flag_present(data: bytes, pos: int) -> tuple[bytes, int]:
    return b"", pos


def _readers(address_size: int, offset_size: int, version: int, order: Any) -> dict[str, Reader]:
    u8, u16, u32, u64 = (_fixed(n, order) for n in (1, 2, 4, 8))
    addr, offset = _fixed(address_size, order), _fixed(offset_size, order)
    return {
        "DW_FORM_addr": addr,
        "DW_FORM_data1": u8, "DW_FORM_data2": u16, "DW_FORM_data4": u32, "DW_FORM_data8": u64,
        "DW_FORM_sdata": sleb, "DW_FORM_udata": uleb,
        "DW_FORM_string": _cstring, "DW_FORM_strp": offset, "DW_FORM_line_strp": offset,
        "DW_FORM_flag": u8, "DW_FORM_flag_present": _flag_present,
        "DW_FORM_ref1": u8, "DW_FORM_ref2": u16, "DW_FORM_ref4": u32, "DW_FORM_ref8": u64,
        "DW_FORM_ref_udata": uleb, "DW_FORM_ref_addr": addr if version == 2 else offset,
        "DW_FORM_ref_sig8": u64, "DW_FORM_sec_offset": offset,
        "DW_FORM_exprloc": _block(uleb), "DW_FORM_block": _block(uleb),
        "DW_FORM_block1": _block(u8), "DW_FORM_block2": _block(u16), "DW_FORM_block4": _block(u32),
    }


class _Section:
    """One DWARFInfo's .debug_info bytes and its readers per unit shape."""

    def __init__(self, info: Any) -> None:
        self.stream = info.debug_info_sec.stream
        self.data = section_bytes(info, "debug_info_sec")
        self.order: Any = "little" if info.config.little_endian else "big"
        self._readers: dict[tuple[int, int, int], dict[str, Reader]] = {}

    def readers(self, structs: Any) -> dict[str, Reader] | None:
        key = (structs.address_size, structs.dwarf_format, structs.dwarf_version)
        found = self._readers.get(key)
        if found is None:
            if key[0] not in (4, 8) or key[1] not in (32, 64):
                return None
            found = self._readers[key] = _readers(key[0], 4 if key[1] == 32 else 8, key[2], self.order)
        return found


def _parse_die(die: DIE) -> None:
    """DIE._parse_DIE, the raw values read from the section's bytes where `install` was called
    on the DIE's DWARFInfo."""
    section = die.dwarfinfo.__dict__.get(_STATE)
    if section is None or die.stream is not section.stream:
        return _ORIGINAL(die)
    try:
        _read(die, section)
    except ConstructError as exc:  # from a translation (a string past its table): as pyelftools wraps it
        raise ELFParseError(str(exc)) from None
    except (_Unread, ELFParseError):  # pyelftools parses it, and raises its own error past the end
        die.attributes = {}
        die.tag = die.has_children = die.abbrev_code = None
        die.size = 0
        return _ORIGINAL(die)
    return None


def _read(die: DIE, section: _Section) -> None:
    readers = section.readers(die.cu.structs)
    if readers is None:
        raise _Unread
    data = section.data
    start = die.offset
    code, pos = uleb(data, start)
    if code == 0:
        die.abbrev_code = 0
        die.size = pos - start
        return
    decl = die.cu.get_abbrev_table().get_abbrev(code)  # KeyError as pyelftools raises it
    attributes: dict[str, Any] = {}
    translate = die._translate_attr_value
    for spec in decl["attr_spec"]:
        form = spec.form
        offset = pos
        if form == "DW_FORM_implicit_const":
            raw = value = spec.value
        else:
            reader = readers.get(form)
            if reader is None:
                raise _Unread
            raw, pos = reader(data, pos)
            value = translate(form, raw)
        attributes[spec.name] = AttributeValue(spec.name, form, value, raw, offset, 0)
    die.abbrev_code = code
    die.tag = decl["tag"]
    die.has_children = decl.has_children()
    die.attributes = attributes
    die.size = pos - start
    die.stream.seek(pos)


def install(info: Any) -> Any:
    """Make the DIEs of `info` read as above (pyelftools' parser stays for every other
    DWARFInfo)."""
    if getattr(info, "debug_info_sec", None) is not None and _STATE not in info.__dict__:
        info.__dict__[_STATE] = _Section(info)
        if DIE._parse_DIE is _ORIGINAL:
            DIE._parse_DIE = _parse_die  # type: ignore[method-assign,assignment]
    return info
