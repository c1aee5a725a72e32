"""The agent's JSON, before and after a change to its post-processing: byte for byte on the same
buffers, and as `ualdbg trace --json` writes it.

1. *same buffers* (exact): each example runs once under the agent, its buffer files kept; then
   the document (engines/agent.document + render/jsondoc.to_text) is made from those files by
   the code of BASE and by this tree's, each in its own Python process, and the two texts must
   be the same bytes.
2. *CLI* (`--cli`): `ualdbg trace --engine agent --json F` of each example with each tree; the
   documents must be equal once what differs from run to run is set aside (pids, tids, times,
   CPUs, durations, sequence numbers, thread ids in texts, the order of threads' and processes'
   records).

    git archive COMMIT ualdbg | tar -x -C /tmp/base
    .venv/bin/python bench/json_identity.py --base /tmp/base [--cli]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ualdbg.agent.buffer import buffer_files  # noqa: E402
from ualdbg.engines.agent import AgentRun, agent_environment, agent_library  # noqa: E402

EXAMPLES = ROOT / "examples" / "build"
# Every example program, with the arguments of examples/README.md, and the bench's large run.
PROGRAMS: list[list[str]] = [
    ["not_aligned", "1000"], ["not_aligned_nodwarf", "1000"], ["not_aligned_stripped", "1000"],
    ["memalign", "100", "5"], ["memalign_aligned", "100", "5"], ["common_block", "100"], ["mpi_status", "50"],
    ["stack_double", "100"], ["packed_header", "20"], ["threads", "10"], ["sigbus_handler", "3"],
    ["rep_string", "5"], ["aligned", "10000"], ["split_lines", "10"], ["argv_fields", "ABCDEFGHIJKLMNOP", "5"],
    ["pair_stream", "1000"], ["not_aligned", "220000"], ["memalign", "40000", "2"], ["threads", "30000"],
]
FIXTURES = ROOT / "tests" / "fixtures" / "agent"
# The agent's test programs (tests/fixtures/agent): processes that fork and exec (merged rings),
# push/pop/call/ret/rep/RIP-relative operands, threads, signal handlers.
FIXTURE_PROGRAMS: list[list[str]] = [
    ["children", "3"], ["children", "30000"], ["odd_insns", "1000"], ["stress", "4", "5000"], ["signals", "10"],
    ["masks", "10"],
]
RENDER = """
import json, sys
from ualdbg.engines.agent import AgentRun, load_images, document
from ualdbg.render.jsondoc import to_text
a = json.loads(sys.argv[1])
run = AgentRun(a["program"], buffer=a["buffer"])
doc = document(run, load_images(a["dir"]), a["pid"], a["started"], a["ended"], a["status"], None, a["env"], a["lib"])
sys.stdout.write(to_text(doc))
"""


def render(tree: Path, args: dict[str, Any]) -> bytes:
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, "-c", RENDER, json.dumps(args)], capture_output=True, env=env, cwd="/")
    if p.returncode != 0:
        raise SystemExit(f"json_identity: rendering with {tree} failed:\n{p.stderr.decode()[-2000:]}")
    return p.stdout


def build_fixtures() -> Path:
    out = ROOT / "bench" / "build" / "identity"
    out.mkdir(parents=True, exist_ok=True)
    for src in FIXTURES.glob("*.c"):  # as tests/agent/agentrun.py builds them
        subprocess.run(["gcc", "-g", "-O1", "-pthread", "-o", str(out / src.stem), src.name], check=True, cwd=FIXTURES)
    return out


def programs() -> list[tuple[list[str], list[str]]]:
    """(label, argv) of every program compared."""
    fixtures = build_fixtures()
    return ([(argv, [str(EXAMPLES / argv[0]), *argv[1:]]) for argv in PROGRAMS]
            + [(argv, [str(fixtures / argv[0]), *argv[1:]]) for argv in FIXTURE_PROGRAMS])


def same_buffers(base: Path, buffer: int) -> bool:
    lib = agent_library()
    ok = True
    for argv, program in programs():
        with tempfile.TemporaryDirectory(prefix="ualdbg-identity-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
            run = AgentRun(program, buffer=buffer)
            added = agent_environment(run, lib, d, os.environ)
            started = time.monotonic()
            proc = subprocess.Popen(program, env=dict(os.environ, **added), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            status = proc.wait()
            ended = time.monotonic()
            images = len(buffer_files(d))  # (not the code maps the run shares there)
            args = {"program": program, "buffer": buffer, "dir": d, "pid": proc.pid, "started": started, "ended": ended,
                    "status": status, "env": added, "lib": lib}
            old, new = render(base, args), render(ROOT, args)
        records = len(json.loads(new)["records"])
        same = old == new
        ok &= same
        print(f"{'same' if same else 'DIFFERENT'}  {len(new):>10,} bytes  {records:>7,} records  {images} image(s)  "
              f"{' '.join(argv)}")
    return ok


VARYING = {"pid", "ppid", "tid", "time", "cpu", "duration_s", "environment_added", "seq"}


def normalized(doc: Any) -> Any:
    """What does not depend on the run: run-dependent fields set aside, lists of objects sorted
    (threads and processes interleave differently from run to run; counts stay exact)."""
    if isinstance(doc, dict):
        return {k: ("*" if k in VARYING else normalized(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        items = [normalized(v) for v in doc]
        return sorted(items, key=json.dumps) if all(isinstance(v, dict) for v in items) else items
    if isinstance(doc, str):  # "stack of thread 1234" in what a site's data is
        return re.sub(r"thread \d+", "thread *", doc)
    return doc


def cli(base: Path) -> bool:
    ok = True
    with tempfile.TemporaryDirectory(prefix="ualdbg-identity-") as d:
        # The trees by paths of the same length: PYTHONPATH is in the program's environment, whose
        # size moves its stack (and libc's own unaligned accesses, out of scope but counted).
        trees = [Path(d) / "old", Path(d) / "new"]
        trees[0].symlink_to(base.resolve())
        trees[1].symlink_to(ROOT)
        def traced(tree: Path, program: list[str]) -> Any:
            out = Path(d) / "t.json"
            subprocess.run([sys.executable, "-m", "ualdbg", "trace", "--engine", "agent", "--json", str(out), "--",
                            *program], env=dict(os.environ, PYTHONPATH=str(tree)), cwd="/",
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return normalized(json.loads(out.read_text()))

        for argv, program in programs():
            # A program whose run varies (which records a ring of several processes keeps, traps
            # taken while signals arrive) gets three tries; `old vs old` says whether it varies.
            attempt = 0
            old, new = traced(trees[0], program), traced(trees[1], program)
            while old != new and attempt < 2:
                attempt += 1
                old, new = traced(trees[0], program), traced(trees[1], program)
            same = old == new
            note = "" if same or attempt == 0 else f" (old vs old: {'same' if traced(trees[0], program) == old else 'differs too'})"
            ok &= same
            print(f"{'same' if same else 'DIFFERENT'}  {len(new['records']):>7,} records  {' '.join(argv)}"
                  f"{f' (try {attempt + 1})' if same and attempt else ''}{note}")
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="a tree with the old code (its ualdbg/ package)")
    p.add_argument("--buffer", type=int, default=100_000, help="ring records (default 100,000, the CLI's)")
    p.add_argument("--cli", action="store_true", help="compare `ualdbg trace --json` runs instead (run-dependent fields set aside)")
    args = p.parse_args()
    subprocess.run(["make", "-s", "-C", str(ROOT / "examples")], check=True)
    ok = cli(args.base) if args.cli else same_buffers(args.base.resolve(), args.buffer)
    print("all the same" if ok else "SOME DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
