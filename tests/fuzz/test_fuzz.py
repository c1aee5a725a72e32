"""Fuzzing the parsers with hypothesis (issue 17): real ELF files (with DWARF) and real JSON traces,
mutated (bytes overwritten, flipped, inserted, cut), through every parser a user's file reaches.
Zero uncaught exceptions, zero hangs (each input has a deadline: targets.deadline) and nothing
raw on the console. The normal run tries a seed corpus and 150 inputs per parser; the long run
is `make fuzz` (UALDBG_FUZZ_EXAMPLES=10000 per parser). The commands themselves (audit,
stackcheck, trace, report, --merge, --baseline, SARIF) run on the corpus and on seeded mutations
(UALDBG_FUZZ_CLI of each, default 8) and must never print a traceback or "internal error"
(issue 29)."""
from __future__ import annotations

import copy
import io
import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import run_cli
from support.env import BUILD
from targets import baseline_target, elf_target, json_target, stackcheck_target

EXAMPLES = int(os.environ.get("UALDBG_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("UALDBG_FUZZ_RANDOM") is None,
                    suppress_health_check=list(HealthCheck), database=None)

ELF_SEEDS = ["not_aligned", "packed_header", "common_block"]
STACKCHECK_SEEDS = ["stack_double", "not_aligned"]
CLI_INPUTS = int(os.environ.get("UALDBG_FUZZ_CLI", "8"))


def _seed_trace() -> bytes:
    """A real trace: the agent on memalign (sites with data naming, records, processes)."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"ualdbg-fuzz-seed-{os.getpid()}.json"
    if not out.exists():
        r = run_cli("trace", "--json", str(out), "--buffer", "20", "--", str(BUILD / "memalign"), "10", "2", timeout=120)
        assert r.returncode == 0, r.explain()
    return out.read_bytes()


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["set", "flip", "insert", "delete", "word"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif kind == "word" and len(data) >= pos + 8:  # an offset or size field made huge or zero
            data[pos:pos + 8] = draw(st.sampled_from([b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff\x00\x00\x00\x00"]))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


# --- the seed corpus: hand-made cases each parser must refuse in one line --------------------

def _elf(name: str) -> bytes:
    return (BUILD / name).read_bytes()


ELF_CORPUS = {
    "first-100-bytes": lambda: _elf("not_aligned")[:100],
    "first-64-bytes": lambda: _elf("not_aligned")[:64],
    "magic-only": lambda: b"\x7fELF",
    "empty": lambda: b"",
    "phoff-past-end": lambda: _elf("not_aligned")[:32] + b"\xff" * 8 + _elf("not_aligned")[40:],
    "shoff-past-end": lambda: _elf("not_aligned")[:40] + b"\xff" * 8 + _elf("not_aligned")[48:],
    "zeroed-debug-info": lambda: _zero_section(_elf("packed_header"), b".debug_info"),
    "zeroed-debug-line": lambda: _zero_section(_elf("not_aligned"), b".debug_line"),
    "cut-in-dwarf": lambda: _elf("common_block")[: len(_elf("common_block")) * 3 // 4],
    "a-script": lambda: b"#!/no/such/interpreter\n",
    # A DW_AT_sibling pointing back at its own DIE: pyelftools' iter_children looped forever
    # (audit and stackcheck spun for minutes, issue 29).
    "cyclic-sibling-stack_double": lambda: _cyclic_sibling(_elf("stack_double")),
    "cyclic-sibling-packed_header": lambda: _cyclic_sibling(_elf("packed_header")),
    "cyclic-sibling-not_aligned": lambda: _cyclic_sibling(_elf("not_aligned")),
    # A unit pyelftools parses into a DIE whose abbreviation is not in the table: stackcheck
    # printed `internal error (KeyError ...)` (issue 29).
    "unknown-abbrev": lambda: _first_abbrev_code(_elf("stack_double"), 0x7F),
}


def _cyclic_sibling(data: bytes) -> bytes:
    """main's first child with a DW_AT_sibling (form ref4) made to point at itself."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    info = elf.get_section_by_name(".debug_info")
    for cu in elf.get_dwarf_info().iter_CUs():
        for die in cu.iter_DIEs():
            name = die.attributes.get("DW_AT_name")
            if die.tag != "DW_TAG_subprogram" or name is None or name.value != b"main":
                continue
            for child in die.iter_children():
                sib = child.attributes.get("DW_AT_sibling")
                if sib is not None and sib.form == "DW_FORM_ref4":
                    out = bytearray(data)
                    at = info["sh_offset"] + sib.offset
                    out[at:at + 4] = (child.offset - cu.cu_offset).to_bytes(4, "little")
                    return bytes(out)
    raise AssertionError("no DW_AT_sibling in main: the seed changed")


def _first_abbrev_code(data: bytes, code: int) -> bytes:
    """The abbreviation code of main's first child set to one the table does not have."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    info = elf.get_section_by_name(".debug_info")
    for cu in elf.get_dwarf_info().iter_CUs():
        for die in cu.iter_DIEs():
            name = die.attributes.get("DW_AT_name")
            if die.tag == "DW_TAG_subprogram" and name is not None and name.value == b"main" and die.has_children:
                out = bytearray(data)
                out[info["sh_offset"] + die.offset + die.size] = code  # a one-byte ULEB128
                return bytes(out)
    raise AssertionError("no main with children: the seed changed")


def _zero_section(data: bytes, name: bytes) -> bytes:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    sec = elf.get_section_by_name(name.decode())
    out = bytearray(data)
    if sec is not None:
        start = sec["sh_offset"]
        out[start:start + sec["sh_size"]] = b"\xa5" * sec["sh_size"]
    return bytes(out)


@pytest.mark.parametrize("case", sorted(ELF_CORPUS))
def test_elf_seed_corpus(case: str, tmp_path: Path) -> None:
    elf_target(ELF_CORPUS[case](), tmp_path)
    stackcheck_target(ELF_CORPUS[case](), tmp_path)


JSON_CORPUS = {
    "not-json": b"nope",
    "a-list": b"[]",
    "wrong-schema": b'{"tool": "ualdbg", "schema": 2}',
    "sites-not-list": b'{"tool": "ualdbg", "schema": 1, "program": {}, "faults_total": 1, "faults_ignored": 0, "sites": 3, "records": []}',
    "count-a-string": b'{"tool": "ualdbg", "schema": 1, "program": {}, "faults_total": 1, "faults_ignored": 0, '
                      b'"sites": [{"pc": "0x1", "count": "7"}], "records": []}',
    "pc-not-hex": b'{"tool": "ualdbg", "schema": 1, "program": {}, "faults_total": 1, "faults_ignored": 0, '
                  b'"sites": [{"pc": "zz", "count": 7}], "records": []}',
    "deep": b"[" * 100000,
    "binary": bytes(range(256)),
    "blind-spots-not-a-list": b'{"tool": "ualdbg", "schema": 1, "program": {}, "faults_total": 0, "faults_ignored": 0, '
                              b'"sites": [], "records": [], "blind_spots": {"kind": 1}}',
    "blind-spot-count-a-string": b'{"tool": "ualdbg", "schema": 1, "program": {}, "faults_total": 0, "faults_ignored": 0, '
                                 b'"sites": [], "records": [], "blind_spots": [{"kind": "x", "count": "1", "text": "t"}]}',
}


def _hostile_trace() -> bytes:
    """A real trace whose names carry terminal escapes, bidirectional overrides and a lone
    surrogate (a JSON \\udcff): shown escaped, never raw, and never a UnicodeEncodeError."""
    doc = json.loads(_seed_trace())
    bad = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b31m\udcff"
    doc["program"]["path"] += bad
    for site in doc["sites"]:
        site["function"], site["file"], site["module"] = f"f{bad}", f"/src/{bad}.c", f"m{bad}"
        site["inlined_from"] = [{"function": bad, "file": bad, "line": 3}]
    doc["blind_spots"] = [{"kind": bad, "count": 1, "text": bad}]
    doc["notes"] = [bad]
    return json.dumps(doc).encode()


@pytest.mark.parametrize("case", sorted(JSON_CORPUS))
def test_json_seed_corpus(case: str, tmp_path: Path) -> None:
    json_target(JSON_CORPUS[case], tmp_path)
    baseline_target(JSON_CORPUS[case], tmp_path)


def test_json_with_hostile_names(tmp_path: Path) -> None:
    json_target(_hostile_trace(), tmp_path)


# --- hypothesis: mutations of real files -------------------------------------------------------

@pytest.mark.parametrize("parser,seed", [("elf", s) for s in ELF_SEEDS] + [("stackcheck", s) for s in STACKCHECK_SEEDS])
def test_fuzz_elf_parsers(parser: str, seed: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp(f"fuzz-{parser}")
    original = _elf(seed)
    target = {"elf": elf_target, "stackcheck": stackcheck_target}[parser]

    @SETTINGS
    @given(mutated(original))
    def run(data: bytes) -> None:
        target(data, folder)

    run()


def test_fuzz_json_traces(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("fuzz-json")
    seed = _seed_trace()
    json.loads(seed)  # a real trace to start from

    @SETTINGS
    @given(st.one_of(mutated(seed), st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                                  lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4))
                     .map(lambda v: json.dumps(v).encode())))
    def run(data: bytes) -> None:
        json_target(data, folder)
        baseline_target(data, folder)

    run()


def test_fuzz_structured_traces(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Well-formed JSON of the right schema with fields of the wrong type or value."""
    folder = tmp_path_factory.mktemp("fuzz-doc")
    doc = json.loads(_seed_trace())
    values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                       st.text(max_size=12), st.just([]), st.just({}), st.just("0x10"), st.just(-1))

    @SETTINGS
    @given(st.lists(st.tuples(st.sampled_from(["top", "site", "record", "program", "data"]), st.text(max_size=16), values),
                    min_size=1, max_size=6))
    def run(changes: list[tuple[str, str, object]]) -> None:
        d = json.loads(json.dumps(doc))
        for where, key, value in changes:
            if not (isinstance(d.get("sites"), list) and isinstance(d.get("records"), list) and isinstance(d.get("program"), dict)
                    and all(isinstance(x, dict) for x in d["sites"][:1] + d["records"][:1])):
                break  # an earlier change broke the shape this harness walks: the document goes as it is
            data = d["sites"][0].get("data") if d["sites"] else None
            target = {"top": d, "site": d["sites"][0] if d["sites"] else d, "record": d["records"][0] if d["records"] else d,
                      "program": d["program"], "data": data if isinstance(data, dict) else d}[where]
            keys = list(target)
            name = keys[sum(map(ord, key)) % len(keys)] if keys and key else key
            target[name] = copy.deepcopy(value)  # st.just({}) is one object: never share it
        json_target(json.dumps(d).encode(), folder)

    run()


# --- the commands themselves: no traceback, no "internal error", no hang ------------------------

def _mutate(rng: random.Random, data: bytes) -> bytes:
    """The mutations of `mutated`, from a seeded generator (the same inputs on every run)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(["set", "flip", "insert", "delete", "word"])
        pos = rng.randint(0, max(0, len(out) - 1))
        if kind == "set" and out:
            out[pos] = rng.randint(0, 255)
        elif kind == "flip" and out:
            out[pos] ^= 1 << rng.randint(0, 7)
        elif kind == "insert":
            out[pos:pos] = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 16)))
        elif kind == "delete":
            del out[pos:pos + rng.randint(1, 64)]
        elif kind == "word" and len(out) >= pos + 8:
            out[pos:pos + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff\x00\x00\x00\x00"])
    return bytes(out)


def _clean(r: object, allowed: tuple[int, ...]) -> None:
    from support.run import Result

    assert isinstance(r, Result)
    text = r.stdout + r.stderr
    assert not r.timed_out, r.explain()
    assert "Traceback" not in text and "internal error" not in text, r.explain()
    assert r.returncode in allowed, r.explain()


def _elf_inputs(seed: str, n: int) -> list[tuple[str, bytes]]:
    rng = random.Random(f"{seed}-{n}")
    base = _elf(seed)
    return [(f"{seed}-{i}", _mutate(rng, base)) for i in range(n)]


@pytest.mark.parametrize("case", [c for c in sorted(ELF_CORPUS) if c.startswith(("cyclic", "unknown"))]
                         + [f"mutated-{s}" for s in STACKCHECK_SEEDS])
def test_audit_and_stackcheck_commands(case: str, tmp_path: Path) -> None:
    """Before: a cyclic DW_AT_sibling spun for minutes; stackcheck printed internal error (KeyError)."""
    inputs = ([(case, ELF_CORPUS[case]())] if case in ELF_CORPUS
              else _elf_inputs(case.removeprefix("mutated-"), CLI_INPUTS))
    for name, data in inputs:
        prog = tmp_path / name
        prog.write_bytes(data)
        prog.chmod(0o755)
        _clean(run_cli("audit", str(prog), timeout=120, allow_timeout=True), (0, 1, 2))
        # 126/127: a mutation that leaves no ELF at all, or names an interpreter that does not exist
        # (what the shell says of such a program: docs/CI.md)
        _clean(run_cli("stackcheck", "--env-pad", "0-8/8", "--", str(prog), timeout=180, allow_timeout=True), (0, 1, 2, 126, 127))


@pytest.mark.parametrize("case", [c for c in sorted(ELF_CORPUS) if c.startswith(("cyclic", "unknown", "first", "phoff",
                                                                                  "shoff", "magic", "empty"))])
def test_trace_preflight_command(case: str, tmp_path: Path) -> None:
    """trace on a hostile ELF: the program's own status (it runs), or one line and 2 (a corrupt ELF:
    bad input) or 126 (no ELF or #! script at all: cannot execute, as the shell says)."""
    prog = tmp_path / "prog"
    prog.write_bytes(ELF_CORPUS[case]())
    prog.chmod(0o755)
    _clean(run_cli("trace", "--", str(prog), "1", timeout=180, allow_timeout=True),
           tuple(range(0, 125)) + (126,) + tuple(range(128, 160)))


def test_report_merge_baseline_and_sarif_commands(tmp_path: Path) -> None:
    seed = _seed_trace()
    rng = random.Random(f"json-{CLI_INPUTS}")
    inputs = [("hostile", _hostile_trace())] + [(f"mutated-{i}", _mutate(rng, seed)) for i in range(CLI_INPUTS)]
    for name, data in inputs:
        doc = tmp_path / f"{name}.json"
        doc.write_bytes(data)
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        _clean(run_cli("report", str(doc), timeout=120, allow_timeout=True), (0, 2))
        _clean(run_cli("report", "--merge", str(doc), str(doc), "--json", str(out / "m.json"),
                       "--sarif", str(out / "m.sarif"), timeout=120, allow_timeout=True), (0, 2))
        _clean(run_cli("check", "--baseline", str(doc), "--", str(BUILD / "not_aligned"), "1",
                       timeout=120, allow_timeout=True), (0, 1, 2, 3))
        r = run_cli("report", str(doc), "--summary", timeout=120, allow_timeout=True)
        _clean(r, (0, 2))
        assert "\x1b" not in r.stdout + r.stderr, r.explain()
