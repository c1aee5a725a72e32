"""Unit tests of the core of issue 9 without a debugger: the DWARF expression evaluator, the
address-space classification from maps text, a global's element path from a real ELF, and the
choice of advice."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from datarun import decl_line
from elftools.dwarf.dwarf_expr import DWARFExprParser
from support.env import BUILD

from ualdbg.core.advice import ALIGN, COPY_ONCE, LAYOUT, MEMCPY, advise
from ualdbg.core.dataref import DataRef, Via
from ualdbg.core.model import AccessKind, SourceLoc
from ualdbg.core.result import Record, Site, TraceResult
from ualdbg.symbols.data import Frame, describe, module_data
from ualdbg.symbols.elfindex import elf_index
from ualdbg.symbols.layout import Evaluator, Layouts, Unreadable, ref
from ualdbg.symbols.maps import ModuleMap

REGS = {"rdi": 0x1000, "rsi": 0x2000, "rsp": 0x7FFF_0000, "rbp": 0x7FFF_0040}


def evaluator(**kw: object) -> Evaluator:
    index = elf_index(str(BUILD / "mpi_status"))
    assert index is not None and index.dwarf is not None
    return Evaluator(DWARFExprParser(index.dwarf.dwarfinfo.structs), REGS, **kw)  # type: ignore[arg-type]


def test_evaluator_ops() -> None:
    ev = evaluator(bias=0x5555_0000, cfa=0x7FFF_0010, frame_base=[0x9C])
    assert ev.evaluate([0x75, 0x0E, 0x9F]).value == 0x100E  # DW_OP_breg5 14; stack_value
    assert ev.evaluate([0x75, 0x04]).address == 0x1004  # DW_OP_breg5 4: in memory
    assert ev.evaluate([0x54]).value == 0x2000  # DW_OP_reg4: the value is in rsi
    assert ev.evaluate([0x91, 0x70]).address == 0x7FFF_0000  # DW_OP_fbreg -16, frame base = CFA
    assert ev.evaluate([0x03, *(0x4040).to_bytes(8, "little")]).address == 0x5555_4040  # DW_OP_addr + bias
    with pytest.raises(Unreadable):
        ev.evaluate([0xA3, 0x01, 0x55, 0x9F])  # DW_OP_entry_value: not a place


MAPS = """\
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff7d00000-7ffff7e00000 rw-p 00000000 00:00 0
7ffff7f00000-7ffff7f10000 r--p 00002000 08:01 42                         /usr/share/zoneinfo/UTC
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
"""


def test_regions_from_maps() -> None:
    mm = ModuleMap.from_text(MAPS)
    assert describe(0x555555559010, mm).kind == "heap"
    anon = describe(0x7FFFF7D00020, mm)
    assert anon.kind == "anonymous" and anon.mapping_offset == 0x20
    f = describe(0x7FFFF7F00010, mm)
    assert f.kind == "file" and f.mapping_offset == 0x2010 and "/usr/share/zoneinfo/UTC" in f.text
    st = describe(0x7FFFFFFFE000, mm, Frame(pid=77, tid=78, regs={"rsp": 0x7FFFF7D00100}))
    assert st.kind == "stack" and st.tid == 77 and "stack of thread 77" in st.text
    # the faulting thread's stack pointer is in the anonymous mapping: it is that thread's stack
    own = describe(0x7FFFF7D00200, mm, Frame(pid=77, tid=78, regs={"rsp": 0x7FFFF7D00100}))
    assert own.kind == "stack" and own.tid == 78
    other = describe(0x7FFFF7D00200, mm, Frame(pid=77, tid=78, thread_sps={79: 0x7FFFF7D00500}))
    assert other.kind == "stack" and other.tid == 79
    assert describe(0x1234, mm).kind == "unknown" and describe(0x1234, None).kind == "unknown"


def test_common_member_from_elf() -> None:
    path = str(BUILD / "common_block")
    index = elf_index(path)
    assert index is not None
    base = 0x555555554000
    lines = []
    for seg in index.segments:
        lo = (seg.vaddr & ~0xFFF) + base
        hi = ((seg.vaddr + seg.memsz + 0xFFF) & ~0xFFF) + base
        perms = "r-xp" if seg.executable else "rw-p"
        lines.append(f"{lo:x}-{hi:x} {perms} {seg.offset & ~0xFFF:08x} 08:01 1 {path}")
    mm = ModuleMap.from_text("\n".join(lines) + "\n")
    data_ = next(s for s in module_data(index).symbols if s.name == "data_")
    ref = describe(base + data_.start + 4 + 4 * 3 + 2, mm)  # r2 starts 4 bytes into COMMON /data/
    assert (ref.kind, ref.path, ref.offset, ref.container) == ("common", "r2[3]", 2, "COMMON /data/")
    assert ref.line == decl_line("common_block.f90", r"^\s*real :: r2\(n\)")
    i1 = describe(base + data_.start, mm)
    assert (i1.path, i1.offset, i1.element_type) == ("i1", 0, "integer(kind=4)")


def site(data: DataRef | None, count: int = 50, access: str = "read", sizes: tuple[int, ...] = (8,)) -> Site:
    return Site(SourceLoc(pc=1), count, set(sizes), AccessKind(access), data)


def test_advice_rules() -> None:
    packed = DataRef("static", "h", 0x1001, via=Via("h", "struct h *", "h->seq+0", "f", packed=True, struct="struct h",
                                                     member="seq"))
    a = advise(site(packed))
    assert a is not None and a.remedy == LAYOUT and "legal, but costs 50 traps" in a.text
    common = DataRef("common", "r2", 0x1004, path="r2[0]", name="r2", container="COMMON /data/")
    a = advise(site(common))
    assert a is not None and a.remedy == ALIGN and "COMMON layout" in a.text
    var = DataRef("global", "g", 0x100c, path="g.a[1]", name="g", element_type="int", element_size=4)
    a = advise(site(var))
    assert a is not None and a.remedy == ALIGN and "alignas(8)" in a.text and "4 mod 8" in a.text
    # the same small datum read many times: copy it once
    hot = advise(site(var, count=400), vas=[0x100c, 0x1014] * 200, read_only=True)
    assert hot is not None and hot.remedy == COPY_ONCE and "read 200 times" in hot.text
    # below the count that makes it worth it, written, or written meanwhile (or not known): not copy-once
    assert advise(site(var, count=40), vas=[0x100c] * 40, read_only=True).remedy == ALIGN  # type: ignore[union-attr]
    assert advise(site(var, count=400, access="write"), vas=[0x100c] * 400, read_only=True).remedy == ALIGN  # type: ignore[union-attr]
    assert advise(site(var, count=400), vas=[0x100c, 0x1014] * 200, read_only=False).remedy == ALIGN  # type: ignore[union-attr]
    assert advise(site(var, count=400), vas=[0x100c, 0x1014] * 200).remedy == ALIGN  # type: ignore[union-attr]
    assert advise(site(None)) is None


def test_advice_per_data_class() -> None:
    """Issue 31: each data class's right fix, and none where none follows from what is known."""
    heap = DataRef("heap", "heap", 0x5555555592a1, mapping="[heap]", mapping_offset=673)
    a = advise(site(heap))
    assert a is not None and a.remedy == ALIGN and "1 mod 8 into its block" in a.text
    assert advise(site(replace(heap, va=0x5555555592a8))) is None  # aligned for its 8 bytes: nothing to fix
    mapped = DataRef("file", "f", 0x7ffff7fc1003, mapping="/data/f.bin", mapping_offset=4099)
    a = advise(site(mapped, sizes=(4,)))
    assert a is not None and a.remedy == MEMCPY and "offset 4099 of the mapped file /data/f.bin (3 mod 4)" in a.text
    # a stack slot no variable names (argv/environment strings among them): no advice
    assert advise(site(DataRef("stack", "stack", 0x7fffffffe4d2, mapping="[stack]"))) is None
    local = DataRef("local", "input1", 0x7fffffffe4d2, path="input1", name="input1", type="const uint64_t",
                    element_type="const uint64_t", element_size=8, storage="frame")
    a = advise(site(local))
    assert a is not None and a.remedy == ALIGN and "alignas(8)" in a.text
    # optimised code: a const local whose DWARF location is its caller's buffer cannot take alignas
    assert advise(site(replace(local, storage="elsewhere"))) is None
    assert advise(site(replace(local, kind="parameter"))) is None
    # a packed member reached through a plain scalar pointer (the packed attribute lost): memcpy
    member = DataRef("static", "recs", 0x1001, path="recs[0].value", packed=True, struct="struct rec", member="value",
                     via=Via("p", "uint32_t *", "p[0]+0", "f"))
    a = advise(site(member, sizes=(4,)))
    assert a is not None and a.remedy == MEMCPY and "loses the packed attribute" in a.text


def test_local_storage_from_its_location() -> None:
    from ualdbg.symbols.data import storage_of

    assert storage_of([0x91, 0x70]) == "frame"  # DW_OP_fbreg -16
    assert storage_of([0x77, 0x08]) == "frame"  # DW_OP_breg7 (rsp) +8
    assert storage_of([0x75, 0x02]) == "elsewhere"  # DW_OP_breg5 (rdi) +2: the caller's buffer


def test_advice_for_argument_strings() -> None:
    a = advise(site(DataRef("argv", "argv[1]", 0x7fffffffe9e7, path="argv[1]", name="argv"), sizes=(4,)))
    assert a is not None and a.remedy == MEMCPY and "at no alignment" in a.text


def test_copy_once_only_while_nothing_writes_the_data() -> None:
    """Issue 31: copy-once needs every read recorded and no recorded write (or read-modify-write)
    of the same bytes between the site's first and last read; writes before it are fine."""
    from ualdbg.core.advice import advice_by_pc
    from ualdbg.core.result import ProgramInfo

    var = DataRef("global", "g", 0x100c, path="g.a[1]", name="g", element_type="int", element_size=4)

    def rec(seq: int, pc: int, va: int, access: str) -> Record:
        return Record(seq, 0.0, None, None, None, pc, va, 8, AccessKind(access))

    def trace(between: str | None, before: bool = True) -> TraceResult:
        reads = [rec(10 + i, 1, [0x100c, 0x1014][i % 2], "read") for i in range(400)]
        writes = [rec(1, 2, 0x100c, "write")] if before else []
        if between:
            writes.append(rec(200, 2, 0x1014, between))
        writer = Site(SourceLoc(pc=2), len(writes), {8}, AccessKind.WRITE)
        sites = [site(var, count=400), writer]
        return TraceResult(None, None, None, "", ProgramInfo(), None, None, 400 + len(writes), 0, {}, None, True,
                           sites, writes + reads, 0)

    assert advice_by_pc(trace(None))[1].remedy == COPY_ONCE  # written before the reads only
    assert advice_by_pc(trace("write"))[1].remedy == ALIGN  # written in between: not read-only
    assert advice_by_pc(trace("read-write"))[1].remedy == ALIGN
    patched = trace(None)
    patched.sites[0].patched = True  # records of its first traps only: the reuse is not known
    assert advice_by_pc(patched)[1].remedy == ALIGN


def test_a_type_is_named_alike_whatever_was_read_before(type_chain: Path) -> None:
    """A chain of struct types pointing to one another deeper than the type reader's depth bound
    once made it keep `?` for whatever type it stopped at (here `char`): a string read after the
    chain was `const const ?[10]` of no size, read first `const const char[10]`. The full walk of
    the globals and the lookup of one address read types in different orders: both must name
    them alike."""
    index = elf_index(str(type_chain))
    assert index is not None
    md = module_data(index)
    found = {v.name: v for v in md.dwarf_vars}
    head, msg = (md.die(found[name].die_offset) for name in ("head", "msg"))  # type: ignore[arg-type]
    assert head is not None and msg is not None
    alone = Layouts(8).info(ref(msg, "DW_AT_type"))
    after = Layouts(8)
    assert after.info(ref(head, "DW_AT_type")).name == "struct s0"
    assert after.info(ref(msg, "DW_AT_type")) == alone
    assert alone.size == 10 and alone.name.endswith("char[10]"), alone
