#!/usr/bin/env python3
"""The JSON document (and the report) of every example in every engine, for two trees: a change
that must not change behaviour (issue 19) shows here as no difference.

    make -C examples
    .venv/bin/python scripts/compare_examples.py record main /tmp/cmp/before
    .venv/bin/python scripts/compare_examples.py record HEAD /tmp/cmp/after
    .venv/bin/python scripts/compare_examples.py diff /tmp/cmp/before /tmp/cmp/after

`record REV DIR` puts `git archive REV` at one fixed path (/tmp/ualdbg-compare/src, or
`--stage DIR`: one path per person running it, of the same length) and runs
`python -m ualdbg trace --json` from there, in one fixed environment (PATH, HOME, PYTHONPATH,
LANG), for each example and engine: the traced programs see the same environment, so the same
stack layout, whichever tree runs and whoever starts it. `diff` compares the
documents with what varies from run to run left out (durations, pids, tids, cpus, record times and
sequence numbers, thread ids and pids in texts, how long a blind spot lasted, temporary paths)
and the records ordered by (pc, va, size) (threads interleave as they like), and the report's
lines without the duration line.

The cross examples (`make -C examples cross ARCH=...` for each CPU of CROSS, which `record` runs
first) run under qemu-user and gdb-multiarch, as examples/README.md's tables of strict-alignment
CPUs have them; a CPU whose examples cannot be built is left out of both trees alike (`cross: ARCH
not built`)."""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "examples" / "build"
STAGE = Path("/tmp/ualdbg-compare/src")

# (program, args) as examples/README.md's table of expected faults has them.
PROGRAMS = [
    ("not_aligned", ["1000"]), ("not_aligned_nodwarf", ["1000"]), ("not_aligned_stripped", ["1000"]),
    ("memalign", ["100", "5"]), ("memalign_aligned", ["100", "5"]), ("common_block", ["100"]),
    ("mpi_status", ["50"]), ("stack_double", ["100"]), ("packed_header", ["20"]), ("threads", ["10"]),
    ("sigbus_handler", ["3"]), ("rep_string", ["5"]), ("aligned", ["10000"]), ("split_lines", ["10"]),
    ("argv_fields", ["ABCDEFGHIJKLMNOP", "5"]), ("pair_stream", ["1000"]),
]
ENGINES: dict[str, list[str]] = {
    "agent": [],
    "agent-nopatch": ["--no-patch"],
    "trap-gdb": ["--engine", "trap"],
    "trap-lldb": ["--engine", "trap", "--debugger", "lldb"],
    "step-native": ["--engine", "step", "--everywhere"],
}
# A scope and a policy of the native stepper, and the agent over several processes (the merge of
# process images: a shell running examples, one of them twice). The debuggers' step engine is
# not reachable from `trace` (tests/step drive it inside gdb and lldb).
EXTRA: list[tuple[str, list[str], list[str]]] = [
    ("step-native-in", ["--engine", "step", "--in", "main", "--policy", "cacheline"], ["split_lines", "10"]),
    ("agent-procs", [], ["/bin/sh", "-c", f"{BUILD}/not_aligned 100; {BUILD}/not_aligned 50; {BUILD}/memalign 10 2; {BUILD}/threads 3"]),
    ("agent-procs-all", ["--all-modules", "--buffer", "50"], ["/bin/sh", "-c", f"{BUILD}/not_aligned 100; {BUILD}/memalign 10 2"]),
    ("agent-procs-nopatch", ["--no-patch", "--buffer", "300"], ["/bin/sh", "-c", f"{BUILD}/not_aligned 100; {BUILD}/not_aligned 250"]),
]


# Programs of other CPUs under qemu-user and gdb-multiarch (examples/README.md, "Expected faults on
# strict-alignment CPUs", "on arm64 with the step engine", "on 32-bit ARM, MIPS and RISC-V"): signal
# mode on the strict CPUs (the fix-up engine: native traps, prctl, delay slots, ARM's two
# instruction sets) and the debuggers' step engine where the CPU does not trap (aarch64; armhf in
# Thumb-2): (arch, engine options, program and arguments). `record` builds them first.
_SIGNAL = [("not_aligned", ["1000"]), ("memalign", ["100", "5"]), ("memalign_aligned", ["100", "5"]),
           ("mpi_status", ["50"]), ("packed_header", ["20"]), ("aligned", ["10000"]), ("pair_stream", ["40", "13"])]
_PAIR_ACCESSORS = [a for f in ("put_key", "get_key", "put_weight", "get_weight", "put_total", "get_total") for a in ("--in", f)]
CROSS: list[tuple[str, list[str], list[str]]] = [
    *((arch, [], [prog, *args]) for arch in ("sparc64", "alpha", "hppa", "sh4") for prog, args in _SIGNAL),
    ("aarch64", ["--engine", "step", "--in", "bump"], ["not_aligned", "200"]),
    ("aarch64", ["--engine", "step", "--in", "fill", "--in", "total"], ["memalign", "100", "5"]),
    ("aarch64", ["--engine", "step", "--in", "fake_recv", "--in", "fake_get_count"], ["mpi_status", "50"]),
    ("aarch64", ["--engine", "step", "--in", "parse_frame"], ["packed_header", "20"]),
    ("aarch64", [], ["pair_stream", "40", "13"]),
    *((arch, [], ["pair_stream", "40", "13"]) for arch in ("armhf", "armel", "mips", "mipsel", "mips64el")),
    *((arch, [], ["pair_stream", "300", "13"]) for arch in ("armhf", "mips")),
    *((arch, [], ["memalign", "100", "5"]) for arch in ("armhf", "armel", "mips", "mipsel", "mips64el")),
    *((arch, [], ["threads", "25"]) for arch in ("armhf", "armel")),
    *((arch, ["--engine", "step", "--in", "put_key", "--in", "get_key"], ["pair_stream", "40", "13"])
      for arch in ("armhf", "armel")),
    ("armhf", ["--engine", "step", "--in", "bump"], ["not_aligned", "50"]),
    ("riscv64", ["--engine", "step", *_PAIR_ACCESSORS], ["pair_stream", "40", "13"]),
    ("riscv64", [], ["pair_stream", "40", "13"]),  # refused: step only (docs/ARCHITECTURES.md)
]


def runs() -> list[tuple[str, list[str], list[str]]]:
    out = []
    for engine, opts in ENGINES.items():
        for prog, args in PROGRAMS:
            out.append((engine, opts, [str(BUILD / prog), *args]))
    out += [(e, o, p if p[0].startswith("/") else [str(BUILD / p[0]), *p[1:]]) for e, o, p in EXTRA]
    missing = set()
    for arch, opts, (prog, *args) in CROSS:
        if (BUILD / arch / prog).exists():
            engine = f"cross-{arch}" + ("-step" if "step" in opts else "")
            out.append((engine, opts, [str(BUILD / arch / prog), *args]))
        else:
            missing.add(arch)
    for arch in sorted(missing):
        print(f"cross: {arch} not built (make -C examples cross ARCH={arch})", file=sys.stderr)
    return out


def name_of(engine: str, program: list[str]) -> str:
    base = os.path.basename(program[0]) if program[0] != "/bin/sh" else "sh"
    if program[0].startswith(str(BUILD) + "/") and os.path.dirname(program[0]) != str(BUILD):
        base = os.path.relpath(program[0], BUILD).replace("/", "-")  # a cross build: build/ARCH/PROG
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{engine}.{base}.{'_'.join(program[1:])[:40]}")


def stage(rev: str, where: Path) -> None:
    """`git archive REV` at `where`."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(where)


def record(rev: str, out: Path, where: Path = STAGE) -> None:
    stage(rev, where)
    out.mkdir(parents=True, exist_ok=True)
    # One fixed environment, whoever runs this: its size moves the programs' stacks (argv_fields'
    # addresses) and the C library's own unaligned accesses (the counts ignored out of scope).
    env = {k: os.environ[k] for k in ("PATH", "HOME", "XDG_CACHE_HOME") if k in os.environ}
    env.update(PYTHONPATH=str(where), LANG="C.UTF-8")
    for arch in sorted({arch for arch, _o, _p in CROSS}):
        # A missing cross build leaves its runs out of both trees alike: build them in this tree,
        # whichever revision is recorded (a CPU without its toolchain stays `not built`).
        subprocess.run(["make", "-s", "-C", str(ROOT / "examples"), "cross", f"ARCH={arch}"], capture_output=True)
    for engine, opts, program in runs():
        name = name_of(engine, program)
        doc = out / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "ualdbg", "trace", "--json", str(doc), *opts, "--", *program],
                              cwd=where, env=env, capture_output=True, text=True, timeout=600)
        (out / f"{name}.err").write_text(proc.stderr)
        (out / f"{name}.rc").write_text(f"{proc.returncode}\n")
        print(f"{name}: exit {proc.returncode}", flush=True)


# instructions_stepped, decoded_on_demand: the native stepper's counts move by a few dozen (a few)
# from run to run of the same tree on sigbus_handler (the kernel's SIGBUS delivery and libc's
# handler path: 4239 to 4247 decoded in four runs of one tree). seconds: how long a blind spot
# (SIGBUS blocked while armed) lasted, a clock's reading (0.045 and 0.059 s in two runs of one tree).
VOLATILE = {"duration_s", "pid", "ppid", "tid", "cpu", "time", "seq", "seconds_in_scope", "tracer_cpu", "library",
            "environment_added", "instructions_stepped", "decoded_on_demand", "seconds"}


def _texts(line: str) -> str:
    """A text with its thread ids, pids and blind spots' durations left out."""
    line = re.sub(r"\(pid \d+\)", "(pid N)", re.sub(r"thread \d+", "thread N", line))
    return re.sub(r"\([\d.]+ s unwatched\)", "(N s unwatched)", line)


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, str):
        return _texts(value)
    return value


def normal(path: Path) -> Any:
    if not path.exists():
        return None
    doc = clean(json.loads(path.read_text()))
    if isinstance(doc.get("records"), list):
        doc["records"] = sorted(doc["records"], key=lambda r: (r["pc"], r["va"] or "", r["size"] or 0))
    return doc


def report(path: Path) -> list[str]:
    """The report's lines without the duration line, thread ids, pids, blind spots' durations and
    temporary paths; runs of spaces and of a table's rule count as one, as a table widens with its
    widest thread id."""
    lines = path.read_text().splitlines() if path.exists() else []
    out = []
    for line in lines:
        if re.match(r"\s+[\d.]+ s, [\d,.]+/s", line) or re.match(r"\s+[\d.]+ s;", line):
            continue
        line = _texts(re.sub(r"/tmp/ualdbg-\S+", "TMP", line))
        out.append(re.sub("─+", "─", re.sub(r" {2,}", "  ", line)).rstrip())
    return out


def diff(a: Path, b: Path) -> int:
    bad = 0
    for engine, _opts, program in runs():
        name = name_of(engine, program)
        da, db = normal(a / f"{name}.json"), normal(b / f"{name}.json")
        ra, rb = (p.read_text() if p.exists() else "not run" for p in (a / f"{name}.rc", b / f"{name}.rc"))
        same_doc = da == db
        same_text = (a / f"{name}.json").exists() == (b / f"{name}.json").exists() and (
            not (a / f"{name}.json").exists() or _keys(a / f"{name}.json") == _keys(b / f"{name}.json"))
        same_report = report(a / f"{name}.err") == report(b / f"{name}.err")
        ok = same_doc and same_text and same_report and ra == rb
        print(f"{'same' if ok else 'DIFFERENT'}  {name}"
              + ("" if ok else f"  (document {same_doc}, key order {same_text}, report {same_report}, exit {ra == rb})"))
        bad += not ok
    print(f"{bad} of {len(runs())} differ")
    return 1 if bad else 0


def _keys(path: Path) -> list[str]:
    """The document's keys in the order they are written (the text, not only the values)."""
    return re.findall(r'^\s*"([a-z_]+)":', path.read_text(), re.M)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("rev")
    r.add_argument("out", type=Path)
    r.add_argument("--stage", type=Path, default=STAGE,
                   help=f"where the tree is put (default {STAGE}); one of the same length keeps the programs' stacks alike")
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.rev, args.out, args.stage)
        return 0
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
