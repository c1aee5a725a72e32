"""Per-fault cost of tracing a running process (issue 20) beside the launch cost, as ratios to
the raw SIGBUS floor measured in the same run:

1. the floor: bench/agent_loop.c `floor` (a handler that only clears AC), ns per fault;
2. launch: `ualdbg trace --engine agent -- attach_loop` (the in-process agent), for a fixed time:
   the wall time the program ran armed over its faults;
3. attach, injected: `ualdbg trace --pid` on attach_loop running alone, for --duration seconds:
   the attached window's wall time (from the injection's end to the detach's start) over the
   faults the injected agent counted in it;
4. attach, gdb: the same with `--engine trap` (gdb's trap engine, the fallback where the agent
   cannot be injected).

One faulting thread, so wall time / faults is the cost of one fault: the agent runs with
`--no-patch` (a trap per fault, the cost compared here; patching is bench/patching.py's).
Repetitions interleave the variants; medians with the spread. Writes its section of docs/PERFORMANCE.md between
`<!-- attach:begin -->` and `<!-- attach:end -->`.

    .venv/bin/python bench/attach.py [--reps N] [--seconds S] [--no-doc]
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

from common import write_section

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "bench" / "build" / "attach"
DOC = ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- attach:begin -->", "<!-- attach:end -->"


def build(name: str) -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe, src = BUILD / name, ROOT / "bench" / f"{name}.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def floor_ns(loop: Path, n: int = 100_000) -> float:
    out = subprocess.run([str(loop), "floor", str(n)], capture_output=True, text=True, check=True).stdout
    vals = dict(line.split() for line in out.splitlines() if line.strip())
    return float(vals["ac"]) - float(vals["noac"])


def _start(prog: Path, d: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(prog), d], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def launch_ns(prog: Path, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.json"
        cmd = [sys.executable, "-m", "ualdbg", "trace", "--engine", "agent", "--no-patch", "--buffer", "1000", "--json", str(out),
               "--", str(prog), d]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(seconds)
        Path(d, "stop").touch()
        proc.wait(timeout=300)
        doc = json.loads(out.read_text())
        armed_s = doc["duration_s"]  # from arming at main to the exit
        return armed_s * 1e9 / max(1, doc["faults_total"])


def attach_ns(prog: Path, seconds: float, engine: str, stops: list[float] | None = None) -> float:
    with tempfile.TemporaryDirectory() as d:
        proc = _start(prog, d)
        try:
            out = Path(d) / "t.json"
            subprocess.run([sys.executable, "-m", "ualdbg", "trace", "--pid", str(proc.pid), "--duration", str(seconds),
                            "--buffer", "1000", "--json", str(out), "--engine", engine,
                            *(["--no-patch"] if engine == "agent" else [])], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            doc = json.loads(out.read_text())
            assert doc["attached"]["engine"] == engine, doc["attached"]
            if stops is not None and "stopped_s" in doc["attached"]:
                stopped = doc["attached"]["stopped_s"]
                stops.append((stopped["attach"] + stopped["detach"]) * 1e3)
            return doc["duration_s"] * 1e9 / max(1, doc["faults_total"])
        finally:
            Path(d, "stop").touch()
            proc.wait(timeout=60)


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.2f} ({min(xs):,.2f}-{max(xs):,.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-doc", action="store_true")
    a = ap.parse_args()
    t0 = time.monotonic()
    loop, prog = build("agent_loop"), build("attach_loop")
    floor: list[float] = []
    launch: list[float] = []
    injected: list[float] = []
    attach: list[float] = []
    stops: list[float] = []
    for _ in range(a.reps):
        floor.append(floor_ns(loop) / 1000)
        launch.append(launch_ns(prog, a.seconds) / 1000)
        injected.append(attach_ns(prog, a.seconds, "agent", stops) / 1000)
        attach.append(attach_ns(prog, a.seconds, "trap") / 1000)
    lr = [x / f for x, f in zip(launch, floor)]
    ir = [x / f for x, f in zip(injected, floor)]
    ar = [x / f for x, f in zip(attach, floor)]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    lines = [
        BEGIN, "", "## A running process (`trace --pid`) beside a launch", "",
        f"Generated by `bench/attach.py` on {now}, in {time.monotonic() - t0:.0f} s; {a.reps} interleaved repetitions of "
        f"{a.seconds:g} s windows, medians with the spread (min-max). Machine: {cpu}, {os.cpu_count()} CPUs, Linux "
        f"{platform.release()}, load average {os.getloadavg()[0]:.2f} at the end.", "",
        "`bench/attach_loop.c`: one thread, one misaligned 8-byte read-modify-write per iteration. Per fault = the "
        "traced window's wall time over its faults.", "",
        "| mechanism | us per fault | / floor (per repetition) |", "|---|---|---|",
        f"| raw SIGBUS floor (`agent_loop floor`) | {med(floor)} | 1x |",
        f"| launch: `ualdbg trace -- PROG` (agent, in-process) | {med(launch)} | {med(lr)}x |",
        f"| attach: `ualdbg trace --pid PID` (agent injected) | {med(injected)} | {med(ir)}x |",
        f"| attach: `ualdbg trace --pid PID --engine trap` (trap engine under gdb) | {med(attach)} | {med(ar)}x |", "",
        f"Issue 20's goal for attach is within 1.5x of the floor: the injected agent is at {statistics.median(ir):.2f}x. "
        f"The process was stopped {med(stops)} ms per trace in all (the injection plus the two stops of the detach); "
        "gdb's trap engine, the fallback where the agent cannot be injected (a static binary, seccomp), stays at "
        "debugger speed.", "", END]
    text = "\n".join(lines)
    print(text)
    if not a.no_doc:
        write_section(BEGIN, END, text, DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
