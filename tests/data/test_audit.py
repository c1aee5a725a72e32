"""`ualdbg audit` from the shell: packed members, COMMON layouts, a file without DWARF, bad input,
and the findings a traced run hit (--trace)."""
from __future__ import annotations

import json
from pathlib import Path

from datarun import cli_trace, decl_line
from support.cli import run_cli
from support.env import BUILD


def audit_json(tmp_path: Path, *args: str) -> tuple[dict, object]:
    out = tmp_path / "audit.json"
    p = run_cli("audit", "--json", str(out), *args)
    assert out.exists(), p.explain()
    return json.loads(out.read_text()), p


def test_packed_header_members(tmp_path: Path) -> None:
    doc, p = audit_json(tmp_path, str(BUILD / "packed_header"))
    assert p.returncode == 1 and doc["dwarf"] is True, p.explain()  # type: ignore[attr-defined]
    got = {(f["struct"], f["member"]): f for f in doc["findings"] if f["kind"] == "packed-member"}
    assert set(got) == {("struct app_hdr", "seq"), ("struct app_hdr", "len"), ("struct app_hdr", "stamp")}, doc
    for member, offset, align, ctype in (("seq", 1, 4, "uint32_t"), ("len", 5, 2, "uint16_t"), ("stamp", 7, 8, "uint64_t")):
        f = got[("struct app_hdr", member)]
        line = decl_line("packed_header.c", rf"^\s*{ctype} {member};")
        assert (f["offset"], f["align"], f["type"], f["file"], f["line"]) == (offset, align, ctype, "packed_header.c", line), f
    # the packed ip_hdr keeps every member at a multiple of its alignment: nothing to flag
    assert not any(f.get("struct") == "struct ip_hdr" for f in doc["findings"])
    assert "struct app_hdr.seq" in p.stdout and "packed member" in p.stdout, p.explain()  # type: ignore[attr-defined]


def test_common_block_layout(tmp_path: Path) -> None:
    doc, p = audit_json(tmp_path, str(BUILD / "common_block"))
    assert p.returncode == 1, p.explain()  # type: ignore[attr-defined]
    (block,) = doc["commons"]
    assert block["name"] == "data" and block["symbol"] == "data_" and block["line"] == decl_line("common_block.f90", r"^\s*common /data/")
    members = {m["name"]: m for m in block["members"]}
    assert (members["i1"]["offset"], members["i1"]["misaligns_8_byte_view"]) == (0, False)
    assert (members["r2"]["offset"], members["r2"]["misaligns_8_byte_view"]) == (4, True)
    assert members["r2"]["type"] == "real(kind=4)[1000]" and members["r2"]["size"] == 4000
    (f,) = doc["findings"]
    assert f["kind"] == "common-member" and f["common"] == "data" and f["variable"] == "r2" and f["offset"] == 4
    assert (f["file"], f["line"]) == ("common_block.f90", decl_line("common_block.f90", r"^\s*real :: r2\(n\)"))


def test_clean_file_exits_zero(tmp_path: Path) -> None:
    doc, p = audit_json(tmp_path, str(BUILD / "mpi_status"))
    assert p.returncode == 0 and doc["findings"] == [] and doc["checked"]["structs"] >= 1, p.explain()  # type: ignore[attr-defined]


def test_without_dwarf_symbol_table_and_what_is_missing(tmp_path: Path) -> None:
    doc, p = audit_json(tmp_path, str(BUILD / "not_aligned_nodwarf"))
    assert p.returncode == 0 and doc["dwarf"] is False, p.explain()  # type: ignore[attr-defined]
    assert any("no DWARF" in m for m in doc["missing"]) and "missing: no DWARF" in p.stdout  # type: ignore[attr-defined]
    names = {s["name"]: s for s in doc["symbols"]}
    assert "lcg_state" in names and names["lcg_state"]["size"] == 4, doc["symbols"]
    nm = {line.split()[2]: int(line.split()[0], 16) for line in _nm(BUILD / "not_aligned_nodwarf")}
    assert int(names["lcg_state"]["address"], 16) == nm["lcg_state"]


def _nm(path: Path) -> list[str]:
    import subprocess

    out = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if len(line.split()) == 3]


def test_bad_input_one_line_exit_2(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF\n")
    for target, words in ((str(text), "not an ELF file"), (str(tmp_path / "missing"), "no such file"),
                          (str(tmp_path), "is a directory")):
        p = run_cli("audit", target)
        assert p.returncode == 2 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.explain()
        assert "Traceback" not in p.stderr and p.stdout == "", p.explain()
    p = run_cli("audit", "--trace", str(text), str(BUILD / "common_block"))
    assert p.returncode == 2 and "not a ualdbg JSON trace" in p.stderr and "Traceback" not in p.stderr, p.explain()


def test_trace_hits_common_and_packed(tmp_path: Path) -> None:
    trace, log = cli_trace("common_block", "100", tmp_path=tmp_path)
    doc, p = audit_json(tmp_path, "--trace", str(tmp_path / "common_block.json"), str(BUILD / "common_block"))
    (f,) = doc["findings"]
    assert f["hits"] == trace["faults_total"] == sum(s["count"] for s in trace["sites"]), log
    assert sorted(f["sites"]) == sorted({f"{s['file']}:{s['line']}" for s in trace["sites"]})
    assert doc["trace"]["faults_explained"] == trace["faults_total"] and p.returncode == 1, p.explain()  # type: ignore[attr-defined]

    trace, log = cli_trace("packed_header", "20", tmp_path=tmp_path)
    doc, p = audit_json(tmp_path, "--trace", str(tmp_path / "packed_header.json"), str(BUILD / "packed_header"))
    per_line = {s["line"]: s["count"] for s in trace["sites"]}
    hits = {f["member"]: f["hits"] for f in doc["findings"]}
    for member, pattern in (("seq", r"memcpy\(&v, p, sizeof v\)"), ("stamp", r"uint64_t stamp = app->stamp"),
                            ("len", r"uint16_t len = app->len")):
        assert hits[member] == per_line[decl_line("packed_header.c", pattern)], (doc, log)
    # ip->saddr and ip->daddr fault because of where the header sits, not because of a packed layout
    unexplained = {u["site"] for u in doc["trace"]["unexplained"]}
    assert unexplained == {f"packed_header.c:{decl_line('packed_header.c', p_)}" for p_ in (r"saddr = ip->saddr", r"daddr = ip->daddr")}


def test_trace_of_a_clean_run_exits_zero(tmp_path: Path) -> None:
    cli_trace("mpi_status", "5", tmp_path=tmp_path)
    doc, p = audit_json(tmp_path, "--trace", str(tmp_path / "mpi_status.json"), str(BUILD / "mpi_status"))
    assert p.returncode == 0 and doc["trace"]["faults_explained"] == 0 and len(doc["trace"]["unexplained"]) == 2, p.explain()  # type: ignore[attr-defined]
