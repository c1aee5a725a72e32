"""A compile unit's DWARF line program decoded as gdb 13 records it (dwarf2/read.c
lnp_state_machine, buildsym.c record_line): each source file's recorded entries, which
dwarfindex._LineTables answers a PC from as symtab.c find_pc_sect_line does.

Two decoders give the same tables: `decode_lines_in_python`, the reference, and the C one
(agent/src/lines/lines.c, loaded with ctypes), which `decode_lines` uses where it can be built: a
unit's program can have hundreds of thousands of rows (sqlite3's amalgamation, CPython's eval loop)
and the Python loop took half the time of naming a run's sites (issue 34). The C decoder hands a
program back to Python where a value would not fit its integers. tests/unit/test_line_programs.py
requires both to agree on every unit of real binaries and on fuzzed programs.

Where gdb and binutils differ, gdb wins (issue 18), and the DWARF standard with it:
- the file register starts at 1 in every sequence, in every DWARF version (DWARF 5, 6.2.2, table
  6.4); binutils' addr2line starts DWARF 5 sequences on file 0;
- several rows at one address: the last is_stmt one;
- consecutive rows of one line are coalesced when the line has a non-zero discriminator (gdb PR
  17276): the first row's line holds until the line changes;
- a file switch ends the previous file's range at that address (its rows there are dropped),
  unless the new row is not a statement and one was seen at that address."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..lazyclass import dataclass

_MINUS_1 = 0xFFFFFFFFFFFFFFFF
_MINUS_2 = 0xFFFFFFFFFFFFFFFE

# Per subfile (a source file, by path; ("?", index) for a file index the table does not name), its
# entries as columns (addresses, orders, lines, is_stmt), sorted as gdb orders them: by address,
# end markers (line 0) first, then as recorded (the order is unique). Columns, not a tuple per
# entry: making 225,000 tuples took longer than the C decoder's whole run.
Columns = tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int]]
Tables = dict[object, Columns]


class FileSubfiles(Sequence[object]):
    """The subfile of each file index of a unit, named on first use: `name(index)` gives it."""

    def __init__(self, count: int, name: Callable[[int], object]) -> None:
        self._count = count
        self._name = name
        self._named: dict[int, object] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> object:  # type: ignore[override]
        if not 0 <= index < self._count:
            raise IndexError(index)
        if index not in self._named:
            self._named[index] = self._name(index)
        return self._named[index]


@dataclass(frozen=True)
class LineParams:
    """A line program's header fields, as the decoders read them."""

    min_len: int
    max_ops: int
    default_stmt: bool
    line_base: int
    line_range: int
    opcode_base: int
    std_lengths: tuple[int, ...]
    address_size: int
    big_endian: bool
    low_pc: int  # the unit's lowest address: a sequence at 0 in a unit elsewhere was dropped by the linker


def decode_lines(code: bytes, params: LineParams, file_subfiles: Sequence[object]) -> tuple[Tables, dict[object, int]]:
    """The tables of `code` (the line program's opcodes) and a file index that names each
    subfile. `file_subfiles[i]`: the subfile of file index i (several indexes may share one);
    an index past them is ("?", index)."""
    if params.line_range == 0 or params.max_ops == 0:
        return {}, {}
    found = _decode_in_c(code, params, file_subfiles)
    return found if found is not None else decode_lines_in_python(code, params, file_subfiles)


def decode_lines_in_python(code: bytes, params: LineParams, file_subfiles: Sequence[object]) -> tuple[Tables, dict[object, int]]:
    """The reference decoder."""
    entries, index_of = _record_in_python(code, params, file_subfiles)
    tables: Tables = {}
    for subfile, table in entries.items():
        table.sort()
        tables[subfile] = ([e[0] >> 1 for e in table], [e[1] for e in table], [e[2] for e in table],
                           [e[3] for e in table])
    return tables, index_of


def _record_in_python(code: bytes, params: LineParams,
                      file_subfiles: Sequence[object]) -> tuple[dict[object, list[tuple[int, int, int, int]]], dict[object, int]]:
    """Per subfile, its entries in recording order: (address * 2 + (line != 0), order, line,
    is_stmt), tuples that sort as gdb orders them with no key function."""
    min_len, max_ops, default_stmt = params.min_len, params.max_ops, params.default_stmt
    line_base, line_range, opcode_base = params.line_base, params.line_range, params.opcode_base
    std_lengths, address_size, low_pc = params.std_lengths, params.address_size, params.low_pc
    byteorder: Any = "big" if params.big_endian else "little"
    tables: dict[object, list[tuple[int, int, int, int]]] = {}
    subfiles: dict[int, object] = {}
    order = 0

    def subfile_of(index: int) -> object:
        if index not in subfiles:
            subfiles[index] = file_subfiles[index] if index < len(file_subfiles) else ("?", index)
        return subfiles[index]

    def record(subfile: object, line: int, addr: int, is_stmt: bool) -> None:
        nonlocal order
        table = tables.get(subfile)
        if table is None:
            table = tables[subfile] = []
        if line == 0:
            last_line: int | None = None
            while table:
                last_line = table[-1][2]
                if table[-1][0] >> 1 != addr:
                    break
                table.pop()
            if last_line is None or last_line == 0:
                return
        order += 1
        table.append((addr * 2 + (line != 0), order, line, int(is_stmt)))

    def uleb(pos: int, signed: bool = False) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = code[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if signed and byte & 0x40:
                    value -= 1 << shift
                return value, pos

    pos, size = 0, len(code)
    try:
        while pos < size:
            # One sequence: gdb's lnp_state_machine, fresh (the file register starts at 1).
            address = op_index = 0
            file_reg, line = 1, 1
            is_stmt = default_stmt
            disc = 0
            has_disc = False
            last_subfile: object = None
            last_line = 0
            last_address = 0
            stmt_at_address = False
            recording = True
            end = False
            while pos < size and not end:
                op = code[pos]
                pos += 1
                row = False
                if op >= opcode_base:
                    adj = op - opcode_base
                    advance = adj // line_range
                    address += min_len * ((op_index + advance) // max_ops)
                    op_index = (op_index + advance) % max_ops
                    delta = line_base + adj % line_range
                    line += delta
                    if delta:
                        has_disc = disc != 0
                    row = True
                elif op == 0:  # extended
                    length, pos = uleb(pos)
                    after = pos + length
                    sub = code[pos] if length else 0
                    if sub == 1:  # end_sequence
                        end = row = True
                    elif sub == 2:  # set_address
                        address = int.from_bytes(code[pos + 1 : pos + 1 + address_size], byteorder)
                        op_index = 0
                        # gdb ignores sequences of functions the linker dropped (PR 12528).
                        if (address == 0 and low_pc > 0) or address in (_MINUS_1, _MINUS_2):
                            recording = False
                    elif sub == 4:  # set_discriminator: the line has one from now on
                        disc, _ = uleb(pos + 1)
                        has_disc |= disc != 0
                    pos = after
                elif op == 1:  # copy
                    row = True
                elif op == 5:  # set_column: its operand skipped (one byte, mostly)
                    if code[pos] < 0x80:
                        pos += 1
                    else:
                        _, pos = uleb(pos)
                elif op == 2:  # advance_pc
                    advance, pos = uleb(pos)
                    address += min_len * ((op_index + advance) // max_ops)
                    op_index = (op_index + advance) % max_ops
                elif op == 3:  # advance_line
                    byte = code[pos]
                    if byte < 0x80:  # one byte, mostly
                        delta = byte - 0x80 if byte & 0x40 else byte
                        pos += 1
                    else:
                        delta, pos = uleb(pos, signed=True)
                    line += delta
                    if delta:
                        has_disc = disc != 0
                elif op == 4:  # set_file
                    file_reg, pos = uleb(pos)
                    has_disc = disc != 0
                elif op == 6:  # negate_stmt
                    is_stmt = not is_stmt
                elif op == 8:  # const_add_pc
                    advance = (255 - opcode_base) // line_range
                    address += min_len * ((op_index + advance) // max_ops)
                    op_index = (op_index + advance) % max_ops
                elif op == 9:  # fixed_advance_pc
                    address += int.from_bytes(code[pos : pos + 2], byteorder)
                    op_index = 0
                    pos += 2
                else:  # column, basic_block, prologue/epilogue, isa, unknown: skip operands
                    for _ in range(std_lengths[op - 1] if op - 1 < len(std_lengths) else 0):
                        _, pos = uleb(pos)
                if not row:
                    continue
                # gdb's record_line
                if op_index == 0 or end:
                    subfile = subfiles[file_reg] if file_reg in subfiles else subfile_of(file_reg)
                    changed = last_subfile != subfile
                    ignore = (changed and not end and last_address == address and not is_stmt and stmt_at_address) or (
                        not end and line == 0
                    )
                    # gdb turns recording back on at the end of a sequence, before its end marker.
                    if ((changed and not ignore) or end) and last_subfile is not None and (recording or end):
                        record(last_subfile, 0, address, True)
                    if not end and not ignore and (changed or line != last_line or not has_disc):
                        last_subfile = subfile
                        if recording:  # record() of a line (not 0: `ignore` otherwise), inline
                            table = tables.get(subfile)
                            if table is None:
                                table = tables[subfile] = []
                            order += 1
                            table.append((address * 2 + 1, order, line, 1 if is_stmt else 0))
                        last_line = line
                if last_address != address:
                    stmt_at_address = False
                    last_address = address
                stmt_at_address |= is_stmt
                disc = 0
    except IndexError:
        pass  # a truncated program: the rows read before the end count
    # A file index per subfile, to name the answer (any index of that path names it alike).
    index_of = {subfile: index for index, subfile in subfiles.items()}
    return tables, index_of


# -- the C decoder ----------------------------------------------------------------------------------
_LIB: Any = None
_LIB_TRIED = False


def _library() -> Any:
    """The C decoder (ctypes), or None when it cannot be built or loaded here."""
    global _LIB, _LIB_TRIED
    if not _LIB_TRIED:
        _LIB_TRIED = True
        import ctypes

        from ualdbg.agent.build import BuildError, build_lines

        try:
            lib = ctypes.CDLL(str(build_lines()))
        except (BuildError, OSError):
            return None
        lib.ualdbg_lines_decode.restype = ctypes.c_long
        lib.ualdbg_lines_decode.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(_Params),
                                            ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(_Out)]
        lib.ualdbg_lines_free.restype = None
        lib.ualdbg_lines_free.argtypes = [ctypes.POINTER(_Out)]
        _LIB = lib
    return _LIB


def _structs() -> tuple[Any, Any]:
    import ctypes

    u64, i64, i32 = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32

    class Params(ctypes.Structure):
        _fields_ = [("min_len", u64), ("max_ops", u64), ("line_base", i64), ("line_range", u64),
                    ("opcode_base", u64), ("address_size", u64), ("low_pc", u64), ("default_stmt", i32),
                    ("big_endian", i32), ("std_lengths", ctypes.c_char_p), ("n_std_lengths", u64)]

    class Out(ctypes.Structure):
        _fields_ = [("n", u64), ("addr", ctypes.POINTER(u64)), ("order", ctypes.POINTER(u64)),
                    ("line", ctypes.POINTER(i64)),
                    ("stmt", ctypes.POINTER(ctypes.c_uint8)), ("n_unknown", u64), ("unknown", ctypes.POINTER(u64)),
                    ("n_touched", u64), ("touched", ctypes.POINTER(i32)), ("counts", ctypes.POINTER(u64))]

    return Params, Out


_Params: Any = None  # the ctypes structures, made when the C decoder is first used
_Out: Any = None


def _decode_in_c(code: bytes, params: LineParams, file_subfiles: Sequence[object]) -> tuple[Tables, dict[object, int]] | None:
    """The C decoder's tables, or None: it is not built here, or a value of this program does not
    fit its integers (Python decodes it then).

    The file indexes are named lazily, as the Python decoder names them: the first run maps none,
    so each index the program uses gets an id of its own, and only those are named (a C++ unit's
    table can list thousands of headers, few of them with lines). Where two used indexes name one
    file (gcc's DWARF 5 lists the primary file as 0 and 1) it runs again with them merged; the
    indexes a program uses do not depend on the map."""
    global _Params, _Out
    if _Params is None:
        _Params, _Out = _structs()
    lib = _library()
    fields = (params.min_len, params.max_ops, params.line_range, params.opcode_base, params.address_size, params.low_pc)
    if lib is None or not all(0 <= v < 1 << 64 for v in fields) or not -(1 << 63) <= params.line_base < 1 << 63:
        return None
    if not all(0 <= v < 256 for v in params.std_lengths):
        return None
    from array import array

    p = _Params(params.min_len, params.max_ops, params.line_base, params.line_range, params.opcode_base,
                params.address_size, params.low_pc, int(params.default_stmt), int(params.big_endian),
                bytes(params.std_lengths), len(params.std_lengths))
    found = _run(lib, code, p, array("i"), 0)
    if found is None:
        return None
    columns, used, touched = found
    n_files = len(file_subfiles)
    named = [file_subfiles[index] if index < n_files else ("?", index) for index in used]
    subfile_by_id: list[object] = named
    if len(set(named)) != len(named):
        ids: dict[object, int] = {}
        file_map = array("i", [-1]) * (1 + max(index for index in used if index < n_files))
        for index, subfile in zip(used, named):
            if index < n_files:
                file_map[index] = ids.setdefault(subfile, len(ids))
        found = _run(lib, code, p, file_map, len(ids))
        if found is None:
            return None
        columns, unknown, touched = found
        subfile_by_id = [*ids, *(("?", index) for index in unknown)]
    index_of: dict[object, int] = {}
    for index, subfile in zip(used, named):
        index_of.setdefault(subfile, index)
    addrs, orders, lines_, stmts = columns
    tables: Tables = {}
    start = 0
    for sid, count in touched:  # the entries come table by table, in the order the tables were made
        stop = start + count
        tables[subfile_by_id[sid]] = (addrs[start:stop], orders[start:stop], lines_[start:stop], stmts[start:stop])
        start = stop
    return tables, index_of


def _run(lib: Any, code: bytes, p: Any, file_map: Any, n_known: int) -> tuple[Columns, list[int], list[tuple[int, int]]] | None:
    """One call of the C decoder: its columns, the file indexes it did not find in `file_map`
    (in the order of first use) and (subfile id, entries) per table; None: hand it to Python."""
    import ctypes
    from array import array

    out = _Out()
    rc = lib.ualdbg_lines_decode(code, len(code), ctypes.byref(p), file_map.buffer_info()[0] if file_map else None,
                                 len(file_map), n_known, ctypes.byref(out))
    if rc != 0:
        return None
    try:
        n = out.n

        def column(pointer: Any, code_: str, size: int) -> array:  # type: ignore[type-arg]
            col = array(code_)
            if n:
                col.frombytes(ctypes.string_at(pointer, n * size))
            return col

        columns = (column(out.addr, "Q", 8), column(out.order, "Q", 8), column(out.line, "q", 8),
                   column(out.stmt, "B", 1))
        unknown = [out.unknown[k] for k in range(out.n_unknown)]
        touched = [(out.touched[k], out.counts[k]) for k in range(out.n_touched)]
    finally:
        lib.ualdbg_lines_free(ctypes.byref(out))
    return columns, unknown, touched
