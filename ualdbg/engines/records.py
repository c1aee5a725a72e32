"""The ring's records as they are: the agent's raw 176-byte records (in sequence order), read as
columns, explained once per PC, and written to JSON without one Python object per record.

A record of the trace document is `{"seq", "time", "cpu", "pid", "tid", "pc", "va", "size",
"access"}` (ARCHITECTURE.md). Of these, seq, time, cpu, pid, tid and pc are in the raw record;
va, size and access come from decoding the instruction at the PC and evaluating its memory
operands with the record's saved registers. That is done per PC, not per record: the
instruction is decoded once, each operand's address is computed for all the PC's records at
once from register columns, and the records of a site share a *shape* (whether there is a VA,
the size and the access), so that a record is (raw bytes, va, shape). `RecordTable` is that
table; it is a read-only sequence of the TraceResult's records (core/result.py: Record, built
on demand, one per access), and writes their JSON lines itself (`json_chunks`): in C
(agent/src/records/records.c) when the record writer builds, else json.dumps per record.
"""
from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

from ..agent import buffer as ab
from ..core.model import Access, AccessKind
from ..core.result import Record
from ..isa.alignment import AcPolicy
from ..isa.costclass import is_locked

if TYPE_CHECKING:  # the decoder's tables (capstone) are imported at the first record explained: a
    from ..isa.insn import Insn, MemOperand  # run with no record in scope needs none (issue 34)

RECORD_SIZE = ab.RECORD_SIZE
_WORDS = RECORD_SIZE // 8  # the record as 8-byte words: seq, time_ns, pc, pid|tid, cpu|flags, 16 GPRs, seg base
_W_SEQ, _W_TIME, _W_PC, _W_GPR, _W_SEG = 0, 1, 2, 5, 21
_GPR_INDEX = {name: i for i, name in enumerate(ab.GPR_NAMES)}
_HEAD = struct.Struct("<QQQIIi")
CHUNK = 16384  # records per chunk of JSON text


class Shape(NamedTuple):
    """What the records of one site have in common, past their registers."""

    has_va: bool
    size: int | None
    access: str | None
    cost: str | None = None  # the record's cost class (issue 33; core/cost.py)


def _column(words: memoryview, word: int, rows: Sequence[int] | None) -> list[int]:
    col = words[word::_WORDS].tolist()
    return col if rows is None else [col[i] for i in rows]


def _gpr_column(words: memoryview, name: str, rows: Sequence[int] | None) -> list[int]:
    from ..isa.arch.x86_64 import GPR_SLICES

    full, shift, bits = GPR_SLICES[name]
    col = _column(words, _W_GPR + _GPR_INDEX[full], rows)
    if shift == 0 and bits == 64:
        return col
    mask = (1 << bits) - 1
    return [(v >> shift) & mask for v in col]


def _fast(insn: Insn, policy: Any) -> bool:
    """Whether the columns below compute exactly what decode.accesses and the policy say: x86-64
    operands of general registers (no gather/scatter, no bit-string offset) under the AC rule."""
    from ..isa.arch.x86_64 import GPR_SLICES, RIP_NAMES

    if insn.arch != "x86_64" or type(policy) is not AcPolicy:
        return False
    for op in insn.operands:
        if op.vsib is not None or op.bit_offset is not None:
            return False
        if op.base is not None and op.base not in RIP_NAMES and op.base not in GPR_SLICES:
            return False
        if op.index is not None and op.index not in GPR_SLICES:
            return False
        if op.segment is not None and op.segment not in ("fs", "gs"):
            return False
    return True


def _addresses(insn: Insn, op: MemOperand, words: memoryview, rows: Sequence[int] | None, n: int) -> list[int]:
    """decode._address for every record of `rows` (all when None), from register columns, in
    one pass over them."""
    from ..isa.arch.x86_64 import GPR_SLICES, MASK32, MASK64, RIP_NAMES

    const = op.disp
    base = index = None
    if op.base is not None and op.base in RIP_NAMES:
        const += insn.next_pc
    elif op.base is not None:
        if op.rsp_adjust and GPR_SLICES[op.base][0] == "rsp":
            const += op.rsp_adjust
        base = _gpr_column(words, op.base, rows)
    if op.index is not None:
        index = _gpr_column(words, op.index, rows)
    mask = MASK32 if op.addr_size == 4 else MASK64
    scale = op.scale
    if base is not None and index is not None:
        ea = [(const + b + x * scale) & mask for b, x in zip(base, index)]
    elif base is not None:
        ea = [(const + b) & mask for b in base]
    elif index is not None:
        ea = [(const + x * scale) & mask for x in index]
    else:
        ea = [const & mask] * n
    if op.segment is not None:  # fs/gs base: the one segment base the agent saves
        return [(a + s) & MASK64 for a, s in zip(ea, _column(words, _W_SEG, rows))]
    return ea


class Explained(NamedTuple):
    """Per record: the VA (0 when none) and the shape's index into `shapes`."""

    va: list[int]
    shape: list[int]
    shapes: list[Shape]


def explain(raw: bytes, decode: Callable[[int], Insn | None], policy: Any,
            slow: Callable[[int, ab.Registers], Access | None], pcs: list[int] | None = None) -> Explained:
    """The VA, size and access of every record: per PC, the access that breaks the policy (else
    the instruction's first access), as engines/agent.SavedCode.explain finds it for one record. `decode`
    gives the instruction at a PC; `slow` explains one record the slow way, for the PCs whose
    instruction the columns do not model (gathers, bit-string operands, other policies). `pcs`:
    the records' PCs, when the caller has them already."""
    n = len(raw) // RECORD_SIZE
    words = memoryview(raw).cast("Q")
    if pcs is None:
        pcs = words[_W_PC::_WORDS].tolist()
    shapes: list[Shape] = []
    shape_ids: dict[Shape, int] = {}

    def shape_of(has_va: bool, size: int | None, access: str | None) -> int:
        key = Shape(has_va, size, access)
        got = shape_ids.get(key)
        if got is None:
            got = shape_ids[key] = len(shapes)
            shapes.append(key)
        return got

    va = [0] * n
    shape = [0] * n
    locked: set[int] = set()
    groups: dict[int, list[int]] = {}
    distinct = list(dict.fromkeys(pcs))  # in order of first record
    if len(distinct) > 1:
        for i, pc in enumerate(pcs):
            groups.setdefault(pc, []).append(i)
    for pc in distinct:
        rows: list[int] | None = groups.get(pc)  # None: every record is at this PC
        count = n if rows is None else len(rows)
        idx: Sequence[int] = range(n) if rows is None else rows
        insn = decode(pc)
        if insn is not None and is_locked(insn):
            locked.add(pc)
        if insn is None:
            none = shape_of(False, None, None)
            for i in idx:
                shape[i] = none
            continue
        if not _fast(insn, policy):
            for i in idx:
                values = struct.unpack_from("<17Q", raw, i * RECORD_SIZE + _W_GPR * 8)
                acc = slow(pc, ab.Registers(values[:16], values[16]))
                if acc is None:
                    shape[i] = shape_of(False, None, None)
                else:
                    shape[i], va[i] = shape_of(True, acc.size, acc.kind.value), acc.va
            continue
        ops = insn.operands
        op_shapes = [shape_of(True, op.size, op.kind.value) for op in ops]
        none = shape_of(False, None, None)
        if not ops:
            for i in idx:
                shape[i] = none
            continue
        cols = [_addresses(insn, op, words, rows, count) for op in ops]
        if len(ops) == 1:
            g_va, g_shape = cols[0], [op_shapes[0]] * count
        else:  # the first operand that breaks the rule, else the first (AcPolicy.violates)
            from ..isa.alignment import ac_rules

            rules = policy.rules if policy.rules is not None else ac_rules()
            aligns = [0 if (op.size <= 1 or insn.vsib or insn.masked or insn.gp_align) else rules.alignment(op.size, insn)
                      for op in ops]
            choice = [next((k for k, (a, al) in enumerate(zip(vas, aligns)) if al and a % al), 0) for vas in zip(*cols)]
            g_va = [cols[k][j] for j, k in enumerate(choice)]
            g_shape = [op_shapes[k] for k in choice]
        if insn.rep:  # a rep string instruction with a zero count makes no access
            from ..isa.arch.x86_64 import MASK32, MASK64

            cmask = MASK32 if ops[0].addr_size == 4 else MASK64
            live = [bool(c & cmask) for c in _column(words, _W_GPR + _GPR_INDEX["rcx"], rows)]
            g_va = [v if alive else 0 for v, alive in zip(g_va, live)]
            g_shape = [s if alive else none for s, alive in zip(g_shape, live)]
        if rows is None:
            va, shape = g_va, g_shape
        else:
            for i, v, sh in zip(rows, g_va, g_shape):
                va[i], shape[i] = v, sh
    return _costed(Explained(va, shape, shapes), pcs, locked)


def _costed(ex: Explained, pcs: Sequence[int], locked: set[int]) -> Explained:
    """The same records, each shape split by the record's cost class (core/cost.py's cost_class,
    written out: one comparison or two per record, no call)."""
    from ..core.cost import INSIDE, LINE, LINE_SPLIT, PAGE, PAGE_SPLIT, SPLIT_LOCK, UNKNOWN

    shapes: list[Shape] = []
    ids: dict[tuple[int, str], int] = {}
    sizes = [s.size if s.has_va else None for s in ex.shapes]
    shape = []
    for v, s, pc in zip(ex.va, ex.shape, pcs):
        size = sizes[s]
        if size is None or size <= 0:
            cls = UNKNOWN
        elif (v % LINE) + size <= LINE:
            cls = INSIDE
        elif pc in locked:
            cls = SPLIT_LOCK
        elif (v % PAGE) + size > PAGE:
            cls = PAGE_SPLIT
        else:
            cls = LINE_SPLIT
        got = ids.get((s, cls))
        if got is None:
            got = ids[(s, cls)] = len(shapes)
            shapes.append(ex.shapes[s]._replace(cost=cls))
        shape.append(got)
    return Explained(ex.va, shape, shapes)


# -- writing ---------------------------------------------------------------------------------------
_WRITER: Any = None
_WRITER_TRIED = False


def writer() -> Any:
    """The C record writer (ctypes), or None when it cannot be built or loaded here."""
    global _WRITER, _WRITER_TRIED
    if not _WRITER_TRIED:
        _WRITER_TRIED = True
        import ctypes  # when the records are written: a run with none needs no C writer (issue 34)

        from ..agent.build import BuildError, build_records

        try:
            lib = ctypes.CDLL(str(build_records()))
        except (BuildError, OSError):
            return None
        fn = lib.ualdbg_records_json
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_double, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                       ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.ualdbg_format_time.restype = ctypes.c_int
        lib.ualdbg_format_time.argtypes = [ctypes.c_double, ctypes.c_char_p]
        _WRITER = lib
    return _WRITER


def _address(arr: array) -> int:  # type: ignore[type-arg]
    return arr.buffer_info()[0] if len(arr) else 0


class RecordTable(Sequence[Record]):
    """The kept records of one trace, in order: raw agent records plus their explanation.
    Indexing or iterating gives the trace's Records; `json_chunks` writes their JSON lines.
    `seq` (one per record) replaces the agent's sequence numbers (merged processes)."""

    def __init__(self, raw: bytes, started: float, explained: Explained, seq: Sequence[int] | None = None) -> None:
        self.raw = raw
        self.started = started
        self.va = explained.va
        self.shape = explained.shape
        self.shapes = explained.shapes
        self.seq = list(seq) if seq is not None else None
        if len(raw) % RECORD_SIZE or len(self.va) != len(self) or len(self.shape) != len(self):
            raise ValueError("records, VAs and shapes do not line up")

    def __len__(self) -> int:
        return len(self.raw) // RECORD_SIZE

    def _record(self, i: int) -> Record:
        seq, time_ns, pc, pid, tid, cpu = _HEAD.unpack_from(self.raw, i * RECORD_SIZE)
        has_va, size, access, cost = self.shapes[self.shape[i]]
        return Record(self.seq[i] if self.seq is not None else seq, round(time_ns / 1e9 - self.started, 6),
                      None if cpu < 0 else cpu, pid, tid, pc, self.va[i] if has_va else None, size,
                      None if access is None else AccessKind(access), cost=cost)

    def _json(self, i: int) -> dict[str, Any]:
        """The record's JSON object, as core/document.py writes a Record (the C writer's twin)."""
        seq, time_ns, pc, pid, tid, cpu = _HEAD.unpack_from(self.raw, i * RECORD_SIZE)
        has_va, size, access, cost = self.shapes[self.shape[i]]
        return {
            "seq": self.seq[i] if self.seq is not None else seq,
            "time": round(time_ns / 1e9 - self.started, 6),
            "cpu": None if cpu < 0 else cpu,
            "pid": pid,
            "tid": tid,
            "pc": f"{pc:#x}",
            "va": f"{self.va[i]:#x}" if has_va else None,
            "size": size,
            "access": access,
            **({"class": cost} if cost is not None else {}),
        }

    @overload
    def __getitem__(self, i: int) -> Record: ...

    @overload
    def __getitem__(self, i: slice) -> list[Record]: ...

    def __getitem__(self, i: int | slice) -> Record | list[Record]:
        if isinstance(i, slice):
            return [self._record(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("record index out of range")
        return self._record(i)

    def __iter__(self) -> Iterator[Record]:
        return (self._record(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        """Equal to a table or a list of the same Records, or to their JSON objects (a document's
        records, loaded)."""
        if isinstance(other, RecordTable):
            return list(self) == list(other)
        if isinstance(other, list):
            if other and isinstance(other[0], dict):
                return [self._json(i) for i in range(len(self))] == other
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<RecordTable of {len(self)} records>"

    def vas_by_pc(self) -> dict[int, list[int]]:
        """The VAs of the records, by PC, records without a VA left out: what the fix advice
        reads, without a record object per record (core/advice.py)."""
        words = memoryview(self.raw).cast("Q")
        pcs = words[_W_PC::_WORDS].tolist()
        if not pcs:
            return {}
        if len(set(pcs)) == 1 and all(self.shapes[s].has_va for s in set(self.shape)):
            return {pcs[0]: list(self.va)}
        out: dict[int, list[int]] = {}
        has = [s.has_va for s in self.shapes]
        for pc, va, s in zip(pcs, self.va, self.shape):
            if has[s]:
                out.setdefault(pc, []).append(va)
        return out

    def json_chunks(self, indent: str = "    ", chunk: int = CHUNK) -> Iterator[str]:
        """The records' JSON lines, each `indent` + json.dumps(record), joined by ",\\n", in
        pieces of `chunk` records (",\\n" between pieces is part of the next piece)."""
        n = len(self)
        lib = writer() if n else None
        if lib is not None:
            yield from self._c_chunks(lib, indent, chunk)
            return
        yield from self._py_chunks(indent, chunk, 0)

    def _py_chunks(self, indent: str, chunk: int, start: int) -> Iterator[str]:
        n = len(self)
        for lo in range(start, n, chunk):
            text = ",\n".join(indent + json.dumps(self._json(i)) for i in range(lo, min(n, lo + chunk)))
            yield text if lo == 0 else ",\n" + text

    def _c_chunks(self, lib: Any, indent: str, chunk: int) -> Iterator[str]:
        import ctypes

        n = len(self)
        va = array("Q", self.va)
        shape = array("I", self.shape)
        seq = array("Q", self.seq) if self.seq is not None else None
        pre_texts = [b', "va": ' for _ in self.shapes]
        post_texts = [(f', "size": {json.dumps(s.size)}, "access": {json.dumps(s.access)}'
                       + (f', "class": {json.dumps(s.cost)}' if s.cost is not None else "") + "}").encode()
                      for s in self.shapes]
        pre = (ctypes.c_char_p * len(self.shapes))(*pre_texts)
        post = (ctypes.c_char_p * len(self.shapes))(*post_texts)
        has_va = bytes(1 if s.has_va else 0 for s in self.shapes)
        width = len(indent.encode()) + max(len(p) for p in pre_texts) + max(len(p) for p in post_texts) + 300
        out = ctypes.create_string_buffer(width * chunk)
        ind = indent.encode()
        for lo in range(0, n, chunk):
            count = min(chunk, n - lo)
            got = lib.ualdbg_records_json(self.raw, lo, count, self.started, _address(seq) if seq is not None else None,
                                          _address(va), _address(shape), ctypes.addressof(pre), has_va,
                                          ctypes.addressof(post), ind, ctypes.addressof(out), width * chunk)
            if got < 0:  # a time the C writer cannot write exactly (or no room): Python writes the rest
                yield from self._py_chunks(indent, chunk, lo)
                return
            text = ctypes.string_at(out, got).decode("ascii")
            yield text if lo == 0 else ",\n" + text


def format_time(x: float) -> str | None:
    """The C writer's repr(round(x, 6)) (for tests), None when it cannot write it exactly or is
    not available."""
    import ctypes

    lib = writer()
    if lib is None:
        return None
    out = ctypes.create_string_buffer(32)
    if lib.ualdbg_format_time(x, out) != 0:
        return None
    return out.value.decode("ascii")


def table_from(raw: bytes, started: float, decode: Callable[[int], Insn | None], policy: Any,
               slow: Callable[[int, ab.Registers], Access | None], keep: Callable[[int], bool],
               capacity: int) -> RecordTable:
    """The RecordTable of a ring's raw records: those at PCs `keep` accepts, the last `capacity`."""
    n = len(raw) // RECORD_SIZE
    pcs = memoryview(raw).cast("Q")[_W_PC::_WORDS].tolist() if n else []
    verdict = {pc: keep(pc) for pc in set(pcs)}
    if not all(verdict.values()):
        raw = b"".join(raw[i * RECORD_SIZE:(i + 1) * RECORD_SIZE] for i, pc in enumerate(pcs) if verdict[pc])
        pcs = [pc for pc in pcs if verdict[pc]]
    if len(pcs) > capacity:
        raw, pcs = raw[len(raw) - capacity * RECORD_SIZE:], pcs[len(pcs) - capacity:]
    return RecordTable(raw, started, explain(raw, decode, policy, slow, pcs))


def concat(tables: Sequence[RecordTable], started: float) -> tuple[bytes, Explained]:
    """The records of several tables (same `started`) as one table's raw bytes and explanation."""
    raw = b"".join(t.raw for t in tables)
    shapes: list[Shape] = []
    ids: dict[Shape, int] = {}
    va: list[int] = []
    shape: list[int] = []
    for t in tables:
        remap = []
        for s in t.shapes:
            if s not in ids:
                ids[s] = len(shapes)
                shapes.append(s)
            remap.append(ids[s])
        va.extend(t.va)
        shape.extend(remap[s] for s in t.shape)
    return raw, Explained(va, shape, shapes)


def merged(tables: Sequence[RecordTable], started: float, capacity: int, total: int) -> RecordTable:
    """The records of several process images in one ring of `capacity`: ordered by (time, pid,
    seq) as the document shows them, the last `capacity` kept and numbered so that the last
    is `total` (engines/agent._merge, for tables)."""
    raw, ex = concat(tables, started)
    n = len(raw) // RECORD_SIZE
    head = [_HEAD.unpack_from(raw, i * RECORD_SIZE) for i in range(n)]
    order = sorted(range(n), key=lambda i: (round(head[i][1] / 1e9 - started, 6), head[i][3], head[i][0]))
    order = order[max(0, n - capacity):]
    raw = b"".join(raw[i * RECORD_SIZE:(i + 1) * RECORD_SIZE] for i in order)
    first = total - len(order)
    return RecordTable(raw, started, Explained([ex.va[i] for i in order], [ex.shape[i] for i in order], ex.shapes),
                       seq=range(first + 1, first + len(order) + 1))
