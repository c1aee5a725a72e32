"""core/result.py: what every engine hands render/ (a TraceResult), the merge of one instruction's
sites over process images (the agent's, issue 19 item 4: objects, not JSON dicts), and the JSON
document core/document.py builds from it."""
from __future__ import annotations

from dataclasses import replace

from ualdbg.core.document import build_document, shape_problem
from ualdbg.core.model import AccessKind, Fault, SourceLoc
from ualdbg.core.result import FEW_TRAPS, ProgramInfo, Site, TraceResult, sites_of
from ualdbg.core.sections import StepSummary
from ualdbg.core.trace import TraceBuffer


def site(count: int, access: AccessKind | None = AccessKind.READ, sizes: set[int] | None = None, **kw: object) -> Site:
    return Site(SourceLoc(pc=0x401000), count, sizes or {4}, access, **kw)  # type: ignore[arg-type]


def test_absorb_adds_counts_sizes_and_accesses() -> None:
    a = site(3, AccessKind.READ, {4})
    a.absorb(site(2, AccessKind.WRITE, {8}))
    assert (a.count, a.sizes, a.access, a.patched, a.trapped) == (5, {4, 8}, AccessKind.READ_WRITE, False, None)
    b = site(1, None)
    b.absorb(site(1, AccessKind.WRITE))
    assert b.access is AccessKind.WRITE
    b.absorb(site(1, None))
    assert b.access is AccessKind.WRITE


def test_absorb_keeps_what_trapped_of_patched_sites() -> None:
    # patched + patched: the traps add up
    a = site(100, patched=True, trapped=2)
    a.absorb(site(50, patched=True, trapped=3))
    assert (a.count, a.patched, a.trapped) == (150, True, 5)
    # unpatched first (every fault trapped), then patched
    b = site(7)
    b.absorb(site(50, patched=True, trapped=2))
    assert (b.count, b.patched, b.trapped) == (57, True, 9)
    # patched first, then unpatched: its faults all trapped
    c = site(50, patched=True, trapped=2)
    c.absorb(site(7))
    assert (c.count, c.patched, c.trapped) == (57, True, 9)


def test_absorb_leaves_the_site_it_was_copied_from() -> None:
    first = site(1, sizes={4})
    merged = replace(first)
    merged.absorb(site(1, sizes={8}))
    assert first.sizes == {4} and merged.sizes == {4, 8}


def trace(buf: TraceBuffer, step: StepSummary | None = None, **kw: object) -> TraceResult:
    result = TraceResult.of_buffer(buf, engine="trap", debugger="gdb", arch="x86_64", version="0",
                                   program=ProgramInfo("/bin/prog", ["1"], 42, 0), scope="the program",
                                   sites=sites_of(buf, lambda pc: SourceLoc(pc=pc)), recording=True,
                                   **kw)  # type: ignore[arg-type]
    result.step = step
    return result


def test_document_of_a_trace_result() -> None:
    buf = TraceBuffer(2)
    for seq in range(1, 4):
        buf.add(Fault(seq=seq, time=0.5, pid=42, tid=42, cpu=0, pc=0x401000 + (seq == 3), va=0x1001, size=8,
                      access=AccessKind.READ, insn="mov", policy="ac", explained=True))
    buf.ignore("libc.so.6", 5)
    doc = build_document(trace(buf))
    assert shape_problem(doc) is None
    assert (doc["faults_total"], doc["faults_ignored"], doc["ignored_by_module"]) == (3, 5, {"libc.so.6": 5})
    assert [(s["pc"], s["count"], s["sizes"], s["access"]) for s in doc["sites"]] == [
        ("0x401000", 2, [8], "read"), ("0x401001", 1, [8], "read")]
    assert len(doc["records"]) == 2 and doc["records_dropped"] == 1 and "step" not in doc
    # faults counted without a record (the agent's patched sites) are not dropped from the ring
    assert build_document(trace(buf, unrecorded=1))["records_dropped"] == 0
    assert build_document(trace(buf, unrecorded=5))["records_dropped"] == 0
    step = build_document(trace(buf, step=StepSummary("bump", "natural", 10, 2, 0)))["step"]
    assert step == {"scope": "bump", "policy": "natural", "steps": 10, "entries": 2, "calls_run": 0}


def test_patched_and_unpatchable_sites_in_the_document() -> None:
    buf = TraceBuffer(10)
    buf.count_site(0x401000, 100).sizes.add(8)
    buf.count_site(0x402000, 3).sizes.add(4)
    t = trace(buf)
    t.sites[0].patched, t.sites[0].trapped = True, 2
    t.sites[1].unpatchable = "rip-relative"
    sites = build_document(t)["sites"]
    assert list(sites[0])[-2:] == ["patched", "trapped"] and (sites[0]["patched"], sites[0]["trapped"]) == (True, 2)
    assert sites[1]["unpatchable"] == "rip-relative" and "patched" not in sites[1]


def test_a_site_of_several_processes_keeps_the_reason_it_kept_trapping() -> None:
    """Sites of the same code in several process images add up (the agent's report): where one
    process refused to patch it and others trapped too few times to try, the refusal is the
    reason shown (issue 34)."""
    buf = TraceBuffer(10)
    buf.count_site(0x401000, 1).sizes.add(4)
    few, refused = trace(buf).sites[0], trace(buf).sites[0]
    few.unpatchable, refused.unpatchable = FEW_TRAPS, "indirect jump in its function"
    few.absorb(refused)
    assert (few.count, few.unpatchable) == (2, "indirect jump in its function")
    refused.absorb(trace(buf).sites[0])  # a process where it has no reason keeps the refusal
    assert refused.unpatchable == "indirect jump in its function"
