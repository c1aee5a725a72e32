"""Fuzzing the parsers with hypothesis (issue 17): real ELF files (with DWARF) and real JSON traces,
mutated (bytes overwritten, flipped, inserted, cut), through every parser a user's file reaches.
Zero uncaught exceptions. The normal run tries a seed corpus and a few hundred inputs per
parser; the long run is `make fuzz` (UALDBG_FUZZ_EXAMPLES=10000 per parser)."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import run_cli
from support.env import BUILD
from targets import baseline_target, elf_target, json_target

EXAMPLES = int(os.environ.get("UALDBG_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("UALDBG_FUZZ_RANDOM") is None,
                    suppress_health_check=list(HealthCheck), database=None)

ELF_SEEDS = ["not_aligned", "packed_header", "common_block"]


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
}


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
}


@pytest.mark.parametrize("case", sorted(JSON_CORPUS))
def test_json_seed_corpus(case: str, tmp_path: Path) -> None:
    json_target(JSON_CORPUS[case], tmp_path)
    baseline_target(JSON_CORPUS[case], tmp_path)


# --- hypothesis: mutations of real files -------------------------------------------------------

@pytest.mark.parametrize("seed", ELF_SEEDS)
def test_fuzz_elf_parsers(seed: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("fuzz-elf")
    original = _elf(seed)

    @SETTINGS
    @given(mutated(original))
    def run(data: bytes) -> None:
        elf_target(data, folder)

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
