"""A unit's abbreviation table read from its bytes, for pyelftools.

pyelftools parses each abbreviation table with `construct`, one declaration and attribute at a
time: reading a unit's top DIE parses the unit's whole table, and for CPython's 147 units that
took 80% of decoding all their line tables (2.6 of 3.2 s under cProfile: 14,510 declarations),
about a tenth of `ualdbg check`'s time on the real workloads (issue 34). `install` makes a
DWARFInfo build its AbbrevTable objects with this reader instead: the same declarations, the
same names (an unknown tag, attribute or form stays a number, as pyelftools' enums leave it), the
same errors on bytes that end inside a declaration or name an unknown children flag.
tests/symbols/test_abbrevs.py compares the two on real binaries and on fuzzed tables."""

from __future__ import annotations

from types import MethodType
from typing import Any

from elftools.common.exceptions import DWARFError, ELFParseError
from elftools.dwarf.abbrevtable import AbbrevDecl, AbbrevTable
from elftools.dwarf.dwarfinfo import DWARFInfo
from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG

from ualdbg.symbols.bytereader import fixed, sleb, uleb


def _names(enum: dict[str, Any]) -> dict[int, str]:
    # construct's SymmetricMapping: the reversed dict, the last name of a value winning
    return {value: name for name, value in enum.items() if name != "_default_"}


_TAGS = _names(ENUM_DW_TAG)
_ATTRS = _names(ENUM_DW_AT)
_FORMS = _names(ENUM_DW_FORM)
_CHILDREN = {0: "DW_CHILDREN_no", 1: "DW_CHILDREN_yes"}


class AbbrevBytesError(ELFParseError):
    """A children flag is neither 0 nor 1 (where pyelftools raises ELFParseError; a table that
    ends inside a declaration raises ELFParseError from bytereader)."""


class _Spec:
    """One attribute specification, as pyelftools' parsed Container offers it."""

    __slots__ = ("name", "form", "value")

    def __init__(self, name: Any, form: Any, value: int | None) -> None:
        self.name = name
        self.form = form
        self.value = value

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def parse_table(data: bytes, offset: int) -> dict[int, AbbrevDecl]:
    """The declarations of the table at `offset` of the section's bytes `data`, by code."""
    pos = offset
    table: dict[int, AbbrevDecl] = {}
    while True:
        code, pos = uleb(data, pos)
        if code == 0:
            return table
        tag, pos = uleb(data, pos)
        flag, pos = fixed(data, pos, 1, "little")
        if flag not in _CHILDREN:
            raise AbbrevBytesError(f"children flag {flag} in the abbreviation table")
        specs = []
        while True:
            name, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            value = None
            if form == 0x21:  # DW_FORM_implicit_const
                value, pos = sleb(data, pos)
            if name == 0 and form == 0:
                break
            specs.append(_Spec(_ATTRS.get(name, name), _FORMS.get(form, form), value))
        decl = {"tag": _TAGS.get(tag, tag), "children_flag": _CHILDREN[flag], "attr_spec": specs}
        table[code] = AbbrevDecl(code, decl)  # type: ignore[arg-type]


def _get_abbrev_table(self: DWARFInfo, offset: int) -> AbbrevTable:
    """DWARFInfo.get_abbrev_table, its tables read by parse_table."""
    section = self.debug_abbrev_sec
    assert section is not None
    if not offset < section.size:
        raise DWARFError(f"Offset '{offset:#x}' to abbrev table out of section bounds")
    cache = self._abbrevtable_cache
    found = cache.get(offset)
    if found is None:
        data = self.__dict__.get("_ualdbg_abbrev_bytes")
        if data is None:
            section.stream.seek(0)
            data = self.__dict__["_ualdbg_abbrev_bytes"] = section.stream.read(section.size)
        found = AbbrevTable.__new__(AbbrevTable)
        found.structs, found.stream, found.offset = self.structs, section.stream, offset
        found._abbrev_map = parse_table(data, offset)
        cache[offset] = found
    return found


def install(info: DWARFInfo) -> DWARFInfo:
    """Make `info` read its abbreviation tables with parse_table (pyelftools' own reader is used
    where the DWARFInfo has no such cache: another pyelftools version)."""
    if isinstance(getattr(info, "_abbrevtable_cache", None), dict) and "get_abbrev_table" not in info.__dict__:
        info.get_abbrev_table = MethodType(_get_abbrev_table, info)  # type: ignore[method-assign]
    return info
