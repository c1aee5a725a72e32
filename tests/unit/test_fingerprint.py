"""Site keys (ualdbg/ci/fingerprint.py, issue 31) on documents made by hand: occurrence indexes,
blanks, the inline chain, and keys that a cost filter does not shift."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ualdbg.ci import baseline
from ualdbg.ci.fingerprint import LINE, TEXT, instruction_key, keyed_sites
from ualdbg.core.document import load_document, read_document
from ualdbg.core.result import TraceResult


def _site(path: Path, line: int, offset: str, function: str = "f", chain: list[dict[str, Any]] | None = None,
          classes: dict[str, int] | None = None) -> dict[str, Any]:
    site: dict[str, Any] = {"pc": offset, "module": "prog", "offset": offset, "function": function, "function_offset": "0x0",
                            "file": path.name, "path": str(path), "line": line, "inlined_from": chain or [],
                            "count": 2, "sizes": [8], "access": "read"}
    if classes is not None:
        site["classes"] = classes
    return site


def _doc(*sites: dict[str, Any]) -> TraceResult:
    return load_document({"schema": 1, "tool": "ualdbg", "version": "0", "program": {"path": "/nonexistent/prog", "args": []},
                          "arch": "x86_64", "sites": list(sites), "faults_total": sum(s["count"] for s in sites),
                          "faults_ignored": 0, "records": [], "records_dropped": 0})


def test_two_pcs_on_one_line_are_two_keys_in_address_order(tmp_path: Path) -> None:
    src = tmp_path / "a.c"
    src.write_text("int x;\n  *p = *p + 3;\n")
    read, write = _site(src, 2, "0x1010"), _site(src, 2, "0x1018")
    doc = _doc(write, read)
    keys = {k.site.loc.offset: k.key for k in keyed_sites(doc)}
    assert keys[0x1010].endswith("#0") and keys[0x1018].endswith("#1")
    assert keys[0x1010][:-2] == keys[0x1018][:-2]
    assert instruction_key(doc.sites[0]) != instruction_key(doc.sites[1])


def test_blanks_and_lines_elsewhere_do_not_change_a_key_and_the_text_does(tmp_path: Path) -> None:
    src = tmp_path / "a.c"
    src.write_text("int x;\n  *p = *p + 3;\n")
    (before,) = keyed_sites(_doc(_site(src, 2, "0x10")))
    src.write_text("// new\n\nint x;\n\t*p   =  *p+3;  \n")
    (after,) = keyed_sites(_doc(_site(src, 4, "0x30")))
    assert before.key == after.key and before.kind == after.kind == TEXT
    src.write_text("int x;\n  *p = *p + 4;\n")
    (changed,) = keyed_sites(_doc(_site(src, 2, "0x10")))
    assert changed.key != before.key


def test_the_inline_chain_is_in_the_key(tmp_path: Path) -> None:
    src = tmp_path / "a.c"
    src.write_text("return *(u32 *)p;\ns += read32(b + 1);\ns ^= read32(b + 5);\n")
    one = _site(src, 1, "0x10", "read32", [{"function": "sum", "file": "a.c", "path": str(src), "line": 2}])
    two = _site(src, 1, "0x18", "read32", [{"function": "sum", "file": "a.c", "path": str(src), "line": 3}])
    a, b = keyed_sites(_doc(one, two))
    assert a.key.endswith("#0") and b.key.endswith("#0") and a.key != b.key


def test_an_unreadable_source_is_a_weaker_key_that_says_so(tmp_path: Path) -> None:
    doc = _doc(_site(tmp_path / "gone.c", 7, "0x10"))
    (k,) = keyed_sites(doc)
    assert k.kind == LINE and "gone.c:7" in k.key
    assert "keyed by file:line" in str(baseline.build(doc).get("note"))


def test_a_cost_filter_does_not_shift_an_occurrence_index(tmp_path: Path) -> None:
    """The read of `*p += 3` inside a line, the write across one: under --fail-on line-split the
    write alone counts, and keeps the key it has in the whole document."""
    src = tmp_path / "a.c"
    src.write_text("*p += 3;\n")
    read = _site(src, 1, "0x10", classes={"inside-line": 2})
    write = _site(src, 1, "0x18", classes={"line-split": 2})
    doc = _doc(read, write)
    every = {s["where"] + s["key"][-2:]: s["key"] for s in baseline.build(doc)["sites"]}
    (split,) = baseline.build(doc, "line-split")["sites"]
    assert split["key"] == every["a.c:1#1"] and split["count"] == 2
    assert [s.loc.offset for s in baseline.new_sites(doc, set(), "line-split")] == [0x18]


def test_a_hostile_path_is_not_read(tmp_path: Path) -> None:
    """A JSON given to `report` may name a device or a FIFO as a source: a weaker key, no hang."""
    fifo = tmp_path / "fifo.c"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        (k,) = keyed_sites(_doc(_site(path, 1, "0x10")))
        assert k.kind == LINE


def test_the_loader_checks_what_a_key_reads(tmp_path: Path) -> None:
    """A site's path and its inline frames' fields are typed before a fingerprint reads them."""
    src = tmp_path / "a.c"
    src.write_text("x;\n")
    base = {"schema": 1, "tool": "ualdbg", "version": "0", "program": {"path": None, "args": []},
            "faults_total": 2, "faults_ignored": 0, "records": [], "records_dropped": 0}
    good = _site(src, 1, "0x10", "read32", [{"function": "sum", "file": "a.c", "path": str(src), "line": 1}])
    for bad, needle in ((dict(good, path=5), "sites[0].path"),
                        (dict(good, inlined_from=[{"function": "sum", "line": "1"}]), "inlined_from[0].line"),
                        (dict(good, count=3), "faults_total")):
        f = tmp_path / "t.json"
        f.write_text(json.dumps(dict(base, sites=[bad])))
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            read_document(str(f))
    f.write_text(json.dumps(dict(base, sites=[good])))
    assert read_document(str(f)).sites[0].loc.path == str(src)
    f.unlink()  # a document made by hand, in no order ualdbg writes: not one for the round-trip check
