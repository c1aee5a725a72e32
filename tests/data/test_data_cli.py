"""`site.data` in the CLI's JSON (the agent engine, the trap engine), the summary's data and
advice table and the SARIF message, on the examples: the Fortran COMMON block, the packed
headers, the MPI-style int array, the heap, static buffers, and a file without DWARF."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from datarun import cli_trace, decl_line
from support.cli import run_cli
from support.env import BUILD, require_tool


def test_common_block_member_and_fortran_view(tmp_path: Path) -> None:
    doc, log = cli_trace("common_block", "100", tmp_path=tmp_path)
    r2_line = decl_line("common_block.f90", r"^\s*real :: r2\(n\)")
    assert len(doc["sites"]) == 4, log
    for s in doc["sites"]:
        d = s["data"]
        assert d["kind"] == "common" and d["name"] == "r2" and d["container"] == "COMMON /data/", log
        # The first fault of each loop is x(1), the first element of r2: r2[0]+0.
        assert d["path"] == "r2[0]" and d["offset"] == 0 and d["element_type"] == "real(kind=4)", log
        assert (d["file"], d["line"]) == ("common_block.f90", r2_line), log
        assert d["text"].startswith("r2[0]+0 in COMMON /data/"), log
        # ... reached through the REAL*8 dummy array x of the routine that faulted
        assert d["via"]["pointer"] == "x" and d["via"]["function"] == s["function"], log
        assert d["via"]["path"] == "x[0]+0" and d["via"]["pointer_misaligned"] is True, log
        assert int(d["va"], 16) % 8 == 4, log


def test_mpi_status_static_struct_member(tmp_path: Path) -> None:
    doc, log = cli_trace("mpi_status", "50", tmp_path=tmp_path)
    line = decl_line("mpi_status.c", r"static struct request req;")
    printed = int(re.search(r"&status\[1\]=(0x[0-9a-f]+)", log).group(1), 16)  # type: ignore[union-attr]
    funcs = set()
    for s in doc["sites"]:
        d = s["data"]
        assert d["kind"] == "static" and d["container"] == "main" and d["name"] == "req", log
        assert d["path"] == "req.status[1]" and d["offset"] == 0 and (d["file"], d["line"]) == ("mpi_status.c", line), log
        assert int(d["va"], 16) == printed, log
        assert d["struct"] == "struct request" and d["member"] == "status", log
        assert d["via"]["pointer"] == "status" and d["via"]["path"] == "status[1]+0", log
        funcs.add(d["via"]["function"])
    assert funcs == {"fake_recv", "fake_get_count"}, log


def test_packed_header_members_through_pointers(tmp_path: Path) -> None:
    doc, log = cli_trace("packed_header", "20", tmp_path=tmp_path)
    ring = int(re.search(r"ring=(0x[0-9a-f]+)", log).group(1), 16)  # type: ignore[union-attr]
    ring_line = decl_line("packed_header.c", r"static unsigned char ring\[")
    by_member = {}
    for s in doc["sites"]:
        d = s["data"]
        va = int(d["va"], 16)
        assert d["kind"] == "static" and d["name"] == "ring" and d["line"] == ring_line, log
        assert d["path"] == f"ring[{va - ring}]" and d["offset"] == 0, log
        by_member[d["via"]["member"]] = d["via"]
    assert set(by_member) == {"saddr", "daddr", "seq", "stamp", "len"}, log
    # struct ip_hdr is laid out naturally: its fields fault because `ip` points 2 mod 4
    for m, off in (("saddr", 12), ("daddr", 16)):
        v = by_member[m]
        assert v["struct"] == "struct ip_hdr" and v["member_offset"] == off and v["pointer"] == "ip", log
        assert v["pointer_misaligned"] is True and not v.get("packed"), log
    # struct app_hdr is packed: seq at 1, len at 5, stamp at 7
    for m, off, align in (("seq", 1, 4), ("len", 5, 2), ("stamp", 7, 8)):
        v = by_member[m]
        assert v["struct"] == "struct app_hdr" and v["packed"] is True, log
        assert (v["member_offset"], v["member_align"], v["path"]) == (off, align, f"app->{m}+0"), log
    # the read32 memcpy is in the inlined app_seq: its own parameter names the member
    assert by_member["seq"]["function"] == "app_seq", log


def test_heap_and_the_pointer_into_it(tmp_path: Path) -> None:
    doc, log = cli_trace("not_aligned", "200", tmp_path=tmp_path)
    p = int(re.search(r"p=(0x[0-9a-f]+)", log).group(1), 16)  # type: ignore[union-attr]
    (s,) = doc["sites"]
    d = s["data"]
    va = int(d["va"], 16)
    assert d["kind"] == "heap" and d["mapping"] == "[heap]", log
    assert (va - p) % 8 == 0 and d["via"]["path"] == f"p[{(va - p) // 8}]+0", log
    assert d["via"]["type"] == "int64_t *" and d["via"]["pointer_misaligned"] is True, log


def test_without_dwarf_the_mapping_only(tmp_path: Path) -> None:
    doc, log = cli_trace("not_aligned_nodwarf", "50", tmp_path=tmp_path)
    (s,) = doc["sites"]
    assert s["data"]["kind"] == "heap" and "via" not in s["data"], log


def test_trap_engine_names_the_same_data(tmp_path: Path) -> None:
    require_tool("gdb")
    agent, log_a = cli_trace("mpi_status", "5", tmp_path=tmp_path)
    trap, log_t = cli_trace("mpi_status", "5", tmp_path=tmp_path, engine="trap")
    assert trap["engine"] == "trap"
    assert [s["data"] for s in agent["sites"]] == [s["data"] for s in trap["sites"]], log_a + log_t


def test_summary_and_sarif_carry_data_and_advice(tmp_path: Path) -> None:
    sarif = tmp_path / "out.sarif"
    p = run_cli("check", "--sarif", str(sarif), "--", str(BUILD / "packed_header"), "20")
    assert p.returncode == 1 and sarif.exists(), p.explain()
    # table cells wrap: look for words that fit in one line of a cell
    # a packed member read through its struct is legal C: the fix is the layout, not memcpy (issue 31)
    assert "data and advice per site" in p.stderr and "layout: app->seq+0" in p.stderr, p.explain()
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    assert len(results) == 5
    for r in results:
        text = r["message"]["text"]
        assert "Data: ring[" in text and "Fix (" in text and "20 accesses" in text, text
        assert r["properties"]["data"]["name"] == "ring"
        # struct app_hdr places its members off their alignment: legal C, the layout is the fix;
        # struct ip_hdr does not (DWARF cannot tell it is packed): the pointer is off its alignment
        packed = "app->" in r["properties"]["data"]["via"]["path"]
        assert r["properties"]["advice"]["remedy"] == ("layout" if packed else "memcpy"), text
        assert ("legal, but costs 20 traps" in text) == packed, text


@pytest.mark.parametrize("prog,args,remedy,needle", [
    ("common_block", ["100"], "align", "fix the COMMON layout"),
    ("mpi_status", ["50"], "align", "alignas(8)"),
    # copy-once needs a record of every read (--no-patch): the reuse is counted from them
    ("memalign", ["100", "5", "--no-patch"], "copy-once", "each address is read 5 times"),
])
def test_advice_per_example(prog: str, args: list[str], remedy: str, needle: str, tmp_path: Path) -> None:
    from ualdbg.core.advice import advice_by_pc
    from ualdbg.core.document import load_document

    options = tuple(a for a in args if a.startswith("--"))
    doc, log = cli_trace(prog, *[a for a in args if not a.startswith("--")], tmp_path=tmp_path, options=options)
    advice = advice_by_pc(load_document(doc))
    hits = [a for a in advice.values() if a.remedy == remedy and needle in a.text]
    assert hits, (log, advice)
    p = run_cli("report", "--summary", str(tmp_path / f"{prog}.json"))
    assert p.returncode == 0 and "data and advice per site" in p.stdout and f"{remedy}:" in p.stdout, p.explain()


def test_advice_counts_make_it_worth_it(tmp_path: Path) -> None:
    from ualdbg.core.advice import advise
    from ualdbg.core.document import load_document

    doc, log = cli_trace("mpi_status", "50", tmp_path=tmp_path)
    for s in load_document(doc).sites:
        a = advise(s)
        assert a is not None and f"{s.count} accesses here" in a.text, log


def test_agent_names_the_faulting_frames_local_not_its_callers(stack_locals: Path, tmp_path: Path) -> None:
    """The agent saves registers, not the stack: the faulting frame's locals are found (CFA from
    the CFI), a caller's are not, and the report says only whose stack it is."""
    out = tmp_path / "s.json"
    p = run_cli("trace", "--json", str(out), "--", str(stack_locals), "4")
    assert out.exists(), p.explain()
    doc = json.loads(out.read_text())
    by_func = {s["function"]: s for s in doc["sites"]}
    own = by_func["own_local"]["data"]
    assert (own["kind"], own["path"], own["offset"], own["frame"]) == ("local", "r.words[1]", 1, 0), p.explain()
    caller = by_func["read8"]["data"]
    assert caller["kind"] == "stack" and caller["tid"] == doc["program"]["pid"], p.explain()
    assert caller["text"] == f"stack of thread {doc['program']['pid']}, no local or parameter of the faulting frame holds it"
    assert caller["via"]["path"] == "p[0]+0" and by_func["read8"]["count"] == 4, p.explain()


def test_trace_records_name_their_element(tmp_path: Path) -> None:
    from ualdbg.core.document import load_document
    from ualdbg.render.advice import record_data

    # One record per fault (a patched site keeps only the records of its first traps).
    doc, log = cli_trace("common_block", "5", tmp_path=tmp_path, options=("--no-patch",))
    trace = load_document(doc)
    fill = next(s for s in trace.sites if s.loc.function == "fill")
    d = fill.data
    assert d is not None and d.start is not None
    assert d.size == 4000 and d.start == d.va, log  # r2[0] is where r2 starts
    vas = [r.va for r in trace.records if r.pc == fill.pc]
    # x(i) of the REAL*8 view is r2 elements 2(i-1) and 2(i-1)+1: element 2(i-1), offset 0
    assert [record_data(fill, va) for va in vas] == [f"r2[{2 * i}]+0" for i in range(5)], log
    assert record_data(fill, d.start + 4000) == "-"  # past r2: not said to be r2
    p = run_cli("report", str(tmp_path / "common_block.json"))
    assert p.returncode == 0 and "r2[8]+0" in p.stdout, p.explain()


def test_system_library_data_by_its_symbol(libc_data: Path, tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "l.json"
    p = run_cli("trace", "--json", str(out), "--", str(libc_data))
    assert out.exists(), p.explain()
    (site,) = json.loads(out.read_text())["sites"]
    d = site["data"]
    libc = next(line.split()[2] for line in subprocess.run(["ldd", str(libc_data)], capture_output=True, text=True).stdout.splitlines()
                if "libc.so" in line)
    dyn = subprocess.run(["nm", "-D", "--defined-only", libc], capture_output=True, text=True).stdout
    assert re.search(rf"\sD {re.escape(d['name'])}(@.*)?$", dyn, re.M), (d, p.explain())  # a data symbol of libc
    assert (d["kind"], d["module"], d["offset"]) == ("symbol", "libc.so.6", 1) and "no type" in d["text"], p.explain()


def test_advice_a_reviewer_accepts(advice_programs: dict[str, Path], tmp_path: Path) -> None:
    """Issue 31, problem 4, on programs whose right fix is known."""
    from ualdbg.core.advice import advice_by_pc
    from ualdbg.core.document import load_document

    def trace(name: str, *options: str) -> tuple[dict, dict, str]:
        out = tmp_path / f"{name}.json"
        p = run_cli("trace", "--json", str(out), *options, "--", str(advice_programs[name]), "200")
        assert out.exists(), p.explain()
        doc = json.loads(out.read_text())
        return doc, {f"{pc:#x}": a for pc, a in advice_by_pc(load_document(doc)).items()}, p.explain()

    # a uint64_t read at malloc()+1: advice about the offset in the block (it was "-")
    doc, advice, log = trace("heap_offset")
    (site,) = doc["sites"]
    a = advice[site["pc"]]
    assert site["data"]["kind"] == "heap" and a.remedy == "align", log
    assert "offset of 1 mod 8 into its block" in a.text and "malloc()+1" in a.text, (a, log)
    # the address the line before writes on every iteration: never "copy the data once"
    doc, advice, log = trace("write_then_read", "--no-patch")
    reads = [s for s in doc["sites"] if s["access"] == "read"]
    assert reads and reads[0]["count"] == 200, log
    assert all(a.remedy != "copy-once" for a in advice.values()), (advice, log)
    # a packed member written through its struct: legal, the layout is the fix, not memcpy
    doc, advice, log = trace("packed_write")
    write = next(s for s in doc["sites"] if s["access"] == "write")
    a = advice[write["pc"]]
    assert a.remedy == "layout" and f"legal, but costs {write['count']} traps on strict CPUs" in a.text, (a, log)
    assert "put value at an offset that is a multiple of 4" in a.text and "memcpy" not in a.text, (a, log)


def test_data_rows_by_site_with_the_range_touched(advice_programs: dict[str, Path], tmp_path: Path) -> None:
    """Issue 31, problem 5: rows told apart where a line has several sites, the range of data a
    site touched, offsets in decimal, and the patching note only where records are written."""
    out = tmp_path / "rows.json"
    p = run_cli("trace", "--no-patch", "--json", str(out), "--", str(advice_programs["site_rows"]), "8")
    doc = json.loads(out.read_text())
    bump = [s for s in doc["sites"] if s["function"] == "bump"]
    assert len(bump) == 2 and bump[0]["line"] == bump[1]["line"], p.explain()
    r = run_cli("report", str(out), "--summary")
    text = r.stdout
    for s in bump:  # each row of that line says which site it is
        assert re.search(rf"site_rows\.c:{s['line']}\s.*\n\s+bump {s['pc']}\s", text), r.explain()
    (stamps,) = [s for s in doc["sites"] if s["function"] == "stamps"]
    t = stamps["data"]["touched"]
    assert (t["first"], t["last"], t["distinct"], t["records"]) == ("table[0].stamp+0", "table[3].stamp+0", 4, 8), t
    assert "touched table[0].stamp+0 .." in text and "table[3].stamp+0, 4 distinct" in text, r.explain()  # a cell wraps
    heap = bump[0]["data"]
    assert heap["kind"] == "heap" and f"[heap]+{heap['mapping_offset']} " in heap["text"], heap  # decimal, as elsewhere
    # patched (the default): the summary alone has no patching note; with --json it says how many
    # sites in scope lost records
    plain = run_cli("trace", "--", str(advice_programs["site_rows"]), "50")
    assert "were patched" not in plain.stderr and "hot site" not in plain.stderr, plain.explain()
    out2 = tmp_path / "patched.json"
    saved = run_cli("trace", "--json", str(out2), "--", str(advice_programs["site_rows"]), "50")
    patched = [s for s in json.loads(out2.read_text())["sites"] if s.get("patched")]
    assert len(patched) == 3, saved.explain()
    assert "note: 3 hot sites in scope were patched after 2 traps" in saved.stderr, saved.explain()
