"""Cost classes (issue 33) without a program: the class of an access at the line and page edges,
the --fail-on filter, the classes a native engine's counters make, the probe's output read as a
price table, what Linux's split-lock detection does from /proc, and the agent buffers of
before the class counters (640-byte sites, 64-byte patch entries) still read."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from ualdbg.agent import buffer as ab
from ualdbg.ci.costfilter import RANK, filtered, noun, selected, selected_total
from ualdbg.core.cost import CLASSES, CostTable, cost_class, rank_by_time, split_counts
from ualdbg.core.model import AccessKind, SourceLoc
from ualdbg.core.result import ProgramInfo, Record, Site, TraceResult
from ualdbg.isa.alignment import ProbeError
from ualdbg.isa.costclass import costs_from_probe, is_locked, is_vector, split_lock_detection
from ualdbg.isa.decode import decoder_for


@pytest.mark.parametrize("va,size,locked,want", [
    (4, 8, False, "inside-line"), (56, 8, False, "inside-line"), (57, 8, False, "line-split"),
    (63, 2, False, "line-split"), (4092, 8, False, "page-split"), (4095, 2, True, "split-lock"),
    (60, 8, True, "split-lock"), (4, 8, True, "inside-line"), (48, 16, False, "inside-line"),
    (56, 16, False, "line-split"), (0x7fff_0ff8, 16, False, "page-split"), (5, None, False, "unknown"),
])
def test_cost_class_at_the_edges(va: int, size: int | None, locked: bool, want: str) -> None:
    assert cost_class(va, size, locked) == want
    assert cost_class(va, size, locked, strict=True) == "traps"


def test_fail_on_selects_the_class_and_costlier_ones() -> None:
    table = {f: [c for c in ("inside-line", "line-split", "page-split", "split-lock", "traps", "unknown")
                 if selected(c, f)] for f in ("split-lock", "page-split", "line-split", "any")}
    assert table == {
        "split-lock": ["split-lock", "traps", "unknown"],
        "page-split": ["page-split", "split-lock", "traps", "unknown"],
        "line-split": ["line-split", "page-split", "split-lock", "traps", "unknown"],
        "any": ["inside-line", "line-split", "page-split", "split-lock", "traps", "unknown"],
    }
    def site(pc: int, count: int, classes: dict[str, int] | None = None) -> Site:
        return Site(SourceLoc(pc=pc), count, {8}, AccessKind.READ, classes=classes or {})

    def record(pc: int, cls: str) -> Record:
        return Record(0, 0.0, None, None, None, pc, None, None, None, cost=cls)

    doc = TraceResult(None, None, "x86_64", "", ProgramInfo(), None, None, 10, 0, {}, None, True, [
        site(1, 6, {"inside-line": 4, "split-lock": 2}),
        site(2, 3, {"line-split": 3}),
        site(3, 1),  # no classes (an older document): counted under every filter
    ], [record(1, "split-lock"), record(1, "inside-line"), record(2, "line-split")], 0)
    assert [selected_total(doc, f) for f in ("split-lock", "page-split", "line-split", "any")] == [3, 3, 6, 10]
    only = filtered(doc, "split-lock")
    assert only.faults_total == 3 and [s.count for s in only.sites] == [2, 1]
    assert only.sites[0].classes == {"split-lock": 2} and list(only.records) == [record(1, "split-lock")]
    assert only.fail_on == "split-lock" and doc.sites[0].count == 6  # a copy: the trace itself is unchanged
    assert filtered(doc, "any") is doc
    assert noun("split-lock", 1) == "1 split lock" and noun("any", 2) == "2 unaligned accesses"
    assert tuple(sorted(RANK, key=RANK.__getitem__)) == CLASSES  # ci's ranks name core's classes


def test_native_counters_make_classes() -> None:
    assert split_counts(10, 4, 1, False) == {"inside-line": 6, "line-split": 3, "page-split": 1}
    assert split_counts(10, 4, 1, True) == {"inside-line": 6, "split-lock": 4}


@pytest.mark.parametrize("code,locked,vector", [
    (bytes.fromhex("f048830001"), True, False),   # lock add qword [rax], 1
    (bytes.fromhex("488700"), True, False),       # xchg [rax], rax: locked without a prefix
    (bytes.fromhex("4887c0"), False, False),      # xchg rax, rax: no memory
    (bytes.fromhex("488b00"), False, False),      # mov rax, [rax]
    (bytes.fromhex("f20f1000"), False, True),     # movsd xmm0, [rax]
    (bytes.fromhex("c5fe6f00"), False, True),     # vmovdqu ymm0, [rax]
])
def test_locked_and_vector_from_the_instruction(code: bytes, locked: bool, vector: bool) -> None:
    insn = decoder_for("x86_64").decode(code, 0x1000, "")
    assert insn is not None
    assert (is_locked(insn), is_vector(insn)) == (locked, vector), insn.text


PROBE = ["aligned 1.0", "inside-line 1.0", "line-split 1.5", "page-split 2.0", "locked-aligned 5.0",
         "split-lock 1005.0", "meta iterations 10", "meta rounds 7", "meta unroll 8", "meta cpu 1"]


def test_probe_output_is_a_price_table() -> None:
    t = costs_from_probe(PROBE, "a CPU")
    assert dict(t.ns) == {"inside-line": 0.0, "line-split": 0.5, "page-split": 1.0, "split-lock": 1000.0}
    assert t.estimate_ns({"inside-line": 100, "split-lock": 2}) == 2000.0
    assert t.estimate_ns({"traps": 1}) is None  # no price: no estimate
    sites = [Site(SourceLoc(pc=1), 1000, {8}, None, classes={"line-split": 1000}),
             Site(SourceLoc(pc=2), 1, {8}, None, classes={"split-lock": 1}), Site(SourceLoc(pc=3), 5000, {8}, None)]
    assert [n for _s, n in rank_by_time(sites, t)] == [1000.0, 500.0, None]
    killed = costs_from_probe([*PROBE[:5], "meta split-lock-killed 7"], "a CPU")
    assert "split-lock" not in killed.ns and "killed" in killed.note
    with pytest.raises(ProbeError):
        costs_from_probe(["garbage"], "a CPU")
    assert isinstance(t, CostTable)


def test_split_lock_detection_from_proc() -> None:
    amd = "processor: 0\nflags\t\t: fpu sse2 avx2\n"
    text, fatal = split_lock_detection(amd, "quiet")
    assert not fatal and "neither split_lock_detect nor bus_lock_detect" in text
    intel = "processor: 0\nflags\t\t: fpu split_lock_detect\n"
    text, fatal = split_lock_detection(intel, "quiet split_lock_detect=fatal")
    assert fatal and "split_lock_detect=fatal" in text and "not measured" in text
    text, fatal = split_lock_detection(intel, "quiet split_lock_detect=ratelimit:10")
    assert not fatal and "ratelimit:10" in text
    assert not split_lock_detection(intel, "quiet")[1]  # warn, the default


def _old_buffer(path: Path) -> None:
    """A buffer as the agent wrote it before issue 33: 640-byte sites, no class counters."""
    site_size, cap = 640, 4
    raw = bytearray(ab.HEADER_SIZE + cap * site_size + 2 * ab.RECORD_SIZE + 4096)
    raw[0:8] = ab.MAGIC
    struct.pack_into("<IIIIII", raw, 8, ab.VERSION, ab.HEADER_SIZE, site_size, ab.RECORD_SIZE, cap, 2)
    struct.pack_into("<QQQQ", raw, 32, 4096, ab.HEADER_SIZE, ab.HEADER_SIZE + cap * site_size,
                     ab.HEADER_SIZE + cap * site_size + 2 * ab.RECORD_SIZE)
    struct.pack_into("<QQII", raw, ab.HEADER_SIZE + site_size, 0x401000, 7, ab.SITE_READY, ab.SITE_IN_SCOPE)
    path.write_bytes(bytes(raw))


def test_old_buffers_still_read(tmp_path: Path) -> None:
    _old_buffer(tmp_path / "1.0.buf")
    with ab.AgentBuffer(str(tmp_path / "1.0.buf")) as buf:
        [site] = list(buf.sites())
    assert (site.pc, site.count, site.line_splits) == (0x401000, 7, None)  # classes not known: none made
