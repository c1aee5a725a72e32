"""The native stepper's speed (issue 6), measured in one run on this machine against its floor:

1. raw: PTRACE_SINGLESTEP + waitpid in a loop and nothing else (bench/step_raw.c), tracer and
   tracee pinned to one CPU, stepping the same hot loop (bench/step_loop.c `spin`);
2. step: `ualdbg trace --engine step --in spin` on that loop, as users run it, with every
   iteration's load misaligned (each one recorded) and aligned (each one only checked). Its rate
   is a difference between two runs with N1 and N2 iterations,
   (steps2 - steps1) / (t2 - t1), so start-up, scope decoding and exit cancel.

Repetitions interleave raw and step; figures are medians (spread min-max). The goal is a step
rate of at least half the raw rate. Writes its section of docs/PERFORMANCE.md between
`<!-- step:begin -->` and `<!-- step:end -->`.

    .venv/bin/python bench/step.py [--reps N] [--n1 N] [--n2 N] [--no-doc]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "bench" / "build" / "step"
DOC = ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- step:begin -->", "<!-- step:end -->"
GOAL = 0.5
INSNS_PER_ITERATION = 8  # spin's loop at gcc -O2 (checked against the stepper's own count)


def build() -> tuple[Path, Path]:
    BUILD.mkdir(parents=True, exist_ok=True)
    out = []
    for name in ("step_loop", "step_raw"):
        exe, src = BUILD / name, ROOT / "bench" / f"{name}.c"
        if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
            subprocess.run(["gcc", "-O2", "-Wall", "-o", str(exe), str(src)], check=True)
        out.append(exe)
    return out[0], out[1]


def raw_rate(raw: Path, loop: Path, steps: int, cpu: int) -> float:
    proc = subprocess.run([str(raw), str(steps), str(cpu), str(loop), "raw", str(steps), "aligned"],
                          capture_output=True, text=True, check=True, timeout=600)
    done, secs = proc.stdout.split()
    return int(done) / float(secs)


def step_run(loop: Path, n: int, mode: str, tmp: Path) -> tuple[int, float, int]:
    """(instructions stepped, wall seconds of the whole `ualdbg trace`, faults)."""
    out = tmp / "step.json"
    cmd = [sys.executable, "-m", "ualdbg", "trace", "--engine", "step", "--in", "spin", "--json", str(out), "--",
           str(loop), str(n), mode]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=ROOT, timeout=600)
    secs = time.perf_counter() - t0
    doc = json.loads(out.read_text())
    faults = doc["faults_total"]
    if faults != (n if mode == "misaligned" else 0):
        raise SystemExit(f"bench/step.py: {faults} faults for {n} {mode} iterations: the stepper is broken")
    return doc["step"]["instructions_stepped"], secs, faults


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n1", type=int, default=5_000, help="loop iterations of the short run")
    p.add_argument("--n2", type=int, default=45_000, help="loop iterations of the long run")
    p.add_argument("--no-doc", action="store_true", help="print, do not write docs/PERFORMANCE.md")
    args = p.parse_args()
    loop, raw = build()
    cpu = -1  # the CPU step_raw starts on, as the stepper picks its own
    raw_steps = (args.n2 - args.n1) * INSNS_PER_ITERATION
    rates: dict[str, list[float]] = {"raw": [], "misaligned": [], "aligned": []}
    per_iteration = set()
    with tempfile.TemporaryDirectory(prefix="ualdbg-bench-step-") as tmpdir:
        tmp = Path(tmpdir)
        for _ in range(args.reps):
            rates["raw"].append(raw_rate(raw, loop, raw_steps, cpu))
            for mode in ("misaligned", "aligned"):
                s1, t1, _ = step_run(loop, args.n1, mode, tmp)
                s2, t2, _ = step_run(loop, args.n2, mode, tmp)
                per_iteration.add(round((s2 - s1) / (args.n2 - args.n1), 3))
                rates[mode].append((s2 - s1) / (t2 - t1))
    raw_med = statistics.median(rates["raw"])
    ratio = {m: statistics.median(rates[m]) / raw_med for m in ("misaligned", "aligned")}
    load = os.getloadavg()[0]
    lines = [
        BEGIN,
        f"Measured {datetime.date.today().isoformat()} by `bench/step.py` on {platform.machine()} "
        f"({os.cpu_count()} vCPUs, load average {load:.1f} at the end), {args.reps} repetitions, "
        f"medians (min-max). Instructions stepped per loop iteration: {sorted(per_iteration)} "
        f"(the stepper's own count; {INSNS_PER_ITERATION} expected).",
        "",
        "| mechanism | instructions/s | of raw |",
        "|---|---|---|",
        f"| raw `PTRACE_SINGLESTEP` + `waitpid`, pinned (bench/step_raw.c): the floor | {spread(rates['raw'])} | 1.00 |",
        f"| `ualdbg trace --engine step --in spin`, every load misaligned (recorded) | {spread(rates['misaligned'])} "
        f"| {ratio['misaligned']:.2f} |",
        f"| the same, every load aligned (checked only) | {spread(rates['aligned'])} | {ratio['aligned']:.2f} |",
        "",
        f"Goal: at least {GOAL} of the raw rate: "
        + ("met" if min(ratio.values()) >= GOAL else "NOT met") + ". The step rates are "
        f"(steps({args.n2:,}) - steps({args.n1:,})) / (t({args.n2:,}) - t({args.n1:,})) of whole `ualdbg trace` runs, "
        "so the fixed costs (Python start-up, decoding the scope, arming at main) cancel.",
        END,
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_doc:
        doc = DOC.read_text()
        if BEGIN in doc and END in doc:
            head, rest = doc.split(BEGIN, 1)
            doc = head + text + rest.split(END, 1)[1]
        else:
            doc = doc.rstrip("\n") + "\n\n## Single-step engine (issue 6)\n\n" + text + "\n"
        DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
