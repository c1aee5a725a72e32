"""The agent's records as columns (ualdbg/engines/records.py) against the per-record path they
replace: per PC, the columns must give every record the VA, size and access that
engines/agent.SavedCode.explain gives it from its own registers; the C writer must write exactly
json.dumps of each record object (times included: repr(round(t, 6))); merged processes must come
out in the order and numbering of the dict-based merge."""
from __future__ import annotations

import io
import json
import os
import platform
import random
import struct
from dataclasses import replace
from typing import Any

import pytest
from support.env import require_tool

from ualdbg.agent import buffer as ab
from ualdbg.core.document import record_json, write_document
from ualdbg.engines import records as ar
from ualdbg.engines.agent import SavedCode
from ualdbg.isa.alignment import ZEN3_RULES, AcPolicy, NaturalPolicy

PC0 = 0x401000
# (code, what the tests want of it): every operand form the columns compute, and the ones they
# leave to the per-record path.
CODES = {
    "488b44cb10": "base + index*8 + disp",
    "488b0500010000": "RIP-relative",
    "ff30": "push [rax]: two operands, the implicit one RSP-adjusted",
    "f348a5": "rep movsq: two operands, none when rcx is 0",
    "48a5": "movsq without rep",
    "64488b00": "fs: segment base",
    "678b01": "32-bit address size",
    "8f442408": "pop [rsp+8]: RSP-adjusted destination",
    "c3": "ret",
    "90": "no memory operand",
    "06": "does not decode",
    "c5fd6f00": "vmovdqa: #GP, never #AC",
    "66010424": "2-byte read-modify-write at rsp",
    "f30f6f00": "movdqu 16 bytes",
    "480fa308": "bt [rax], rcx: bit-string offset (per-record path)",
    "c4e27592048f": "vgatherdps: VSIB (per-record path)",
}


def _writer_or_fail() -> Any:
    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent needs an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")
    lib = ar.writer()
    assert lib is not None, "the record writer (agent/src/records/records.c) did not build"
    return lib


def record(seq: int, time_ns: int, pc: int, gprs: list[int], seg: int = 0, pid: int = 100, tid: int = 101,
           cpu: int = 1) -> bytes:
    return struct.pack("<QQQIIiI17Q", seq, time_ns, pc, pid, tid, cpu, 0, *gprs, seg)


def random_regs(rng: random.Random) -> list[int]:
    out = []
    for _ in range(16):
        kind = rng.randrange(4)
        out.append(rng.randrange(1 << 64) if kind == 0 else rng.randrange(1 << 48) if kind == 1
                   else rng.randrange(8) if kind == 2 else (1 << 64) - rng.randrange(1, 64))
    return out


@pytest.mark.parametrize("policy", [AcPolicy(ZEN3_RULES), AcPolicy(), NaturalPolicy()],
                         ids=["ac-zen3", "ac-measured", "natural"])
def test_columns_explain_every_record_as_the_per_record_path(policy: Any) -> None:
    rng = random.Random(21)
    code = {PC0 + 0x40 * i: bytes.fromhex(h) + b"\x90" * 15 for i, h in enumerate(CODES)}
    pcs = list(code)
    raws = []
    for seq in range(1, 3001):
        gprs = random_regs(rng)
        if rng.random() < 0.2:
            gprs[1] = 0  # rcx = 0: a rep instruction makes no access
        raws.append(record(seq, 10**9 + seq, rng.choice(pcs), gprs, seg=rng.randrange(1 << 47)))
    raw = b"".join(raws)
    fast, slow_code = SavedCode(code, policy), SavedCode(code, policy)

    def slow(pc: int, regs: ab.Registers) -> Any:
        return fast.explain(pc, regs.mapping())[1]

    ex = ar.explain(raw, fast.insn, fast.policy, slow)
    seen = set()
    for i in range(len(raws)):
        _seq, _t, pc = struct.unpack_from("<QQQ", raw, i * ar.RECORD_SIZE)
        values = struct.unpack_from("<17Q", raw, i * ar.RECORD_SIZE + 40)
        _insn, acc = slow_code.explain(pc, ab.Registers(values[:16], values[16]).mapping())
        shape = ex.shapes[ex.shape[i]]
        got = (shape.has_va, ex.va[i] if shape.has_va else None, shape.size, shape.access)
        want = (acc is not None, acc.va if acc else None, acc.size if acc else None, acc.kind.value if acc else None)
        assert got == want, (CODES[code[pc][:len(code[pc]) - 15].hex()], i)
        seen.add((pc, got[0], got[2], got[3]))
    # every instruction was exercised, and the two-operand ones both ways
    assert {pc for pc, *_ in seen} == set(pcs)
    push = PC0 + 0x40 * list(CODES).index("ff30")
    if isinstance(policy, AcPolicy):
        assert {s[3] for s in seen if s[0] == push} == {"read", "write"}


def table_of(rows: list[bytes], started: float, shapes: list[ar.Shape], shape: list[int], va: list[int],
             seq: list[int] | None = None) -> ar.RecordTable:
    return ar.RecordTable(b"".join(rows), started, ar.Explained(va, shape, shapes), seq=seq)


def to_text(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    write_document(doc, out)
    return out.getvalue()


def test_c_writer_writes_what_json_dumps_writes() -> None:
    lib = _writer_or_fail()
    rng = random.Random(5)
    shapes = [ar.Shape(True, 8, "read-write"), ar.Shape(False, None, None), ar.Shape(True, 2, "read"),
              ar.Shape(True, 16, "write")]
    rows, shape, va = [], [], []
    started = 12345.678901
    for seq in range(1, 2001):
        t = int((started + rng.choice([rng.random() * 100, rng.random() * 1e-4, -rng.random() * 1e-6, 0.0])) * 1e9)
        rows.append(record(seq * 3, t, rng.choice([0, 0x401136, (1 << 64) - 1]), [0] * 16,
                           pid=rng.randrange(1 << 32), tid=rng.randrange(1 << 32), cpu=rng.choice([-1, 0, 7, 2**31 - 1])))
        shape.append(rng.randrange(len(shapes)))
        va.append(rng.choice([0, 1, rng.randrange(1 << 64)]))
    for seq_override in (None, list(range(7, 7 + len(rows)))):
        table = table_of(rows, started, shapes, shape, va, seq_override)
        want = ",\n".join("    " + json.dumps(record_json(r)) for r in table)
        for chunk in (1, 3, 1000, ar.CHUNK):
            assert "".join(table.json_chunks("    ", chunk)) == want
            assert "".join(table._py_chunks("    ", chunk, 0)) == want  # the writer without C
    assert lib is ar.writer()
    doc = {"schema": 1, "records": table, "records_dropped": 0}
    assert to_text(doc) == to_text({**doc, "records": [record_json(r) for r in table]})  # streamed or not
    assert json.loads(to_text(doc))["records"] == [record_json(r) for r in table]


def test_times_are_python_repr_of_round() -> None:
    _writer_or_fail()
    rng = random.Random(7)
    values = [0.0, -0.0, 1e-9, -1e-9, 5e-7, 5.000001e-7, 1e-6, 1.5e-6, 9.9e-5, 9.99994e-5, 9.99996e-5, 1e-4, 0.5,
              1.0, 2.0, 123.456, 1 / 3, 1 / 128, 3 / 128, 1023 / 128, 12345 + 1 / 128, 2.0**29, 2.0**30 - 1e-3]
    values += [rng.random() * 10 ** rng.randrange(-7, 9) * rng.choice([1, -1]) for _ in range(20000)]
    values += [rng.randrange(1 << 20) / 128 for _ in range(2000)]  # exact ties at the 7th decimal
    for x in values:
        assert ar.format_time(x) == repr(round(x, 6)), x
    for x in (2.0**30, 1e12, float("inf"), float("nan")):
        assert ar.format_time(x) is None  # out of its range: Python writes those records


def test_a_time_the_writer_cannot_write_falls_back_to_python() -> None:
    _writer_or_fail()
    rows = [record(i, i * 10**9, 0x401000, [0] * 16) for i in range(1, 6)]
    table = table_of(rows, -2.0**31, [ar.Shape(True, 8, "read")], [0] * 5, [16] * 5)  # times of ~2^31 s
    assert "".join(table.json_chunks("    ", 2)) == ",\n".join("    " + json.dumps(record_json(r)) for r in table)


def test_merged_tables_order_and_number_as_the_dict_merge() -> None:
    rng = random.Random(9)
    started = 100.0
    tables, dicts = [], []
    for pid in (300, 200, 400):
        rows, shape, va = [], [], []
        for seq in range(1, 200):
            t = int((started + rng.randrange(50) * 1e-6) * 1e9)  # many equal times: pid and seq decide
            rows.append(record(seq, t, 0x401000 + rng.randrange(3), [0] * 16, pid=pid, tid=pid))
            shape.append(0)
            va.append(rng.randrange(1 << 40))
        table = table_of(rows, started, [ar.Shape(True, 4, "write")], shape, va)
        tables.append(table)
        dicts.extend(table)
    total = 1000  # counted faults: more than the records kept
    for capacity in (1, 250, 10_000):
        dicts_sorted = sorted(dicts, key=lambda r: (r.time, r.pid, r.seq))[-capacity:]
        first = total - len(dicts_sorted)
        want = [replace(r, seq=first + i + 1) for i, r in enumerate(dicts_sorted)]
        assert list(ar.merged(tables, started, capacity, total)) == want


@pytest.mark.parametrize("sites,shape_of", [(3, lambda i: i % 2), (1, lambda i: 0), (1, lambda i: int(i == 7))],
                         ids=["three sites, some without VA", "one site", "one site, one record without VA"])
def test_vas_by_pc_matches_the_records(sites: int, shape_of: Any) -> None:
    rows = [record(i, 10**9, 0x401000 + i % sites, [0] * 16) for i in range(1, 31)]
    shapes = [ar.Shape(True, 8, "read"), ar.Shape(False, None, None)]
    table = table_of(rows, 0.0, shapes, [shape_of(i) for i in range(30)], [i * 8 + (i == 3) for i in range(30)])
    want: dict[int, list[int]] = {}
    for r in table:
        if r.va is not None:
            want.setdefault(r.pc, []).append(r.va)
    assert table.vas_by_pc() == want
    assert sum(map(len, want.values())) == 30 - sum(shape_of(i) for i in range(30))
