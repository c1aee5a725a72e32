"""The byte-level reads the DWARF readers share (abbrevs, dieparse, rangelists, loclists): a
LEB128, a fixed-size integer, a counted block, each from a section's bytes at a position, giving
the value and the position after it. Past the end they raise ELFParseError, as pyelftools' parsers
do where they run off a section."""

from __future__ import annotations

from typing import Any

from elftools.common.exceptions import ELFParseError


def uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ELFParseError("a LEB128 runs off its section")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def sleb(data: bytes, pos: int) -> tuple[int, int]:
    start = pos
    value, pos = uleb(data, pos)
    if data[pos - 1] & 0x40:
        value -= 1 << (7 * (pos - start))
    return value, pos


def fixed(data: bytes, pos: int, size: int, order: Any) -> tuple[int, int]:
    end = pos + size
    if end > len(data):
        raise ELFParseError("a value runs off its section")
    return int.from_bytes(data[pos:end], order), end


def block(data: bytes, pos: int, length: int) -> tuple[list[int], int]:
    end = pos + length
    if end > len(data):
        raise ELFParseError("a block runs off its section")
    return list(data[pos:end]), end
