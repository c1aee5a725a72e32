"""The whole run counts, not only the trap (issue 21, item 3): what `ualdbg trace --json` costs
per fault end to end, with the default ring (100,000 records kept, each decoded and written)
and with `--buffer 1000`, against the raw SIGBUS floor (bench/sigbus_floor.c), in one run.

Per fault = (t(N2) - t(N1)) / (N2 - N1) of the wall time of the whole command, N1 = 100, N2 =
220,000 faults of `examples/build/not_aligned N` (`--engine agent`, this tree's code): Python's
start-up cancels, the records kept do not (N2 keeps 100,000 of them, N1 100). The post-processing
of one kept record is (default - --buffer 1000) x (N2 - N1) / (100,000 - 1,000). The floor runs
N2 faults in the same repetition; each repetition's ratios are its own.

The post-processing alone is also timed inside one Python process on the buffers of one run,
with this tree's code and (`--before DIR`) another tree's, on the same buffer files.

    .venv/bin/python bench/e2e.py [--reps N] [--before DIR] [--no-doc]

`make bench` (bench/run.py) runs it too. It writes its section of docs/PERFORMANCE.md between
`<!-- e2e:begin -->` and `<!-- e2e:end -->`.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "bench" / "build"
PROGRAM = ROOT / "examples" / "build" / "not_aligned"
BEGIN, END = "<!-- e2e:begin -->", "<!-- e2e:end -->"
N1, N2 = 100, 220_000
DEFAULT_RING = 100_000
SMALL_RING = 1000
GOAL = 1.2  # the default ring, end to end, at most this many times the floor per fault


def build_floor() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "sigbus_floor"
    src = ROOT / "bench" / "sigbus_floor.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    return exe


def env_for(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UALDBG_", "PYTHON"))}
    env.update(TERM="dumb", NO_COLOR="1", LC_ALL="C.UTF-8", PYTHONPATH=str(code))
    return env


def children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def traced(code: Path, n: int, ring: int | None, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one `ualdbg trace --engine agent --json` of `not_aligned n` (CPU:
    user + system of the whole process tree), its counts checked."""
    # --no-patch: this is the cost of one trap and one record per fault (issue 21 item 3);
    # bench/patching.py measures patched sites.
    cmd = [sys.executable, "-m", "ualdbg", "trace", "--engine", "agent", "--no-patch", "--json", str(out)]
    if ring is not None:
        cmd += ["--buffer", str(ring)]
    cmd += ["--", str(PROGRAM), str(n)]
    c0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=env_for(code), cwd="/", timeout=600)
    secs, cpu = time.perf_counter() - t0, children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(f"bench/e2e.py: {' '.join(cmd)} exited {p.returncode}: {p.stderr.decode()[-800:]}")
    doc = json.loads(out.read_text())
    kept = min(n, ring or DEFAULT_RING)
    if doc["faults_total"] != n or len(doc["records"]) != kept or doc["records_dropped"] != n - kept:
        raise SystemExit(f"bench/e2e.py: expected {n} faults and {kept} records, found {doc['faults_total']} "
                         f"and {len(doc['records'])}")
    return secs, cpu


def floor_us(exe: Path) -> tuple[float, float]:
    """(wall, CPU) us of one SIGBUS round trip: wall as the program times its AC loop minus the
    same loop without AC; CPU from its process's user + system time, N2 iterations minus N1,
    less the two loops that take no trap (timed inside it: well under a microsecond)."""
    runs = {}
    for n in (N2, N1):
        c0 = children_cpu()
        p = subprocess.run([str(exe), str(n), "1"], capture_output=True, text=True, timeout=600, check=True)
        runs[n] = (children_cpu() - c0, {k: float(v) / 1000 for k, v in (line.split() for line in p.stdout.splitlines())})
    rows = runs[N2][1]
    cpu = (runs[N2][0] - runs[N1][0]) / (N2 - N1) * 1e6 - rows["noac"] - rows["getpid"]
    return rows["ac"] - rows["noac"], cpu


def busy_others(secs: float = 2.0) -> float:
    """The fraction of the machine's CPUs that others kept busy over `secs` (from /proc/stat and
    this process's children: nothing of ours runs meanwhile)."""
    def ticks() -> float:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    t0, b0 = time.perf_counter(), ticks()
    time.sleep(secs)
    return (ticks() - b0) / ((time.perf_counter() - t0) * (os.cpu_count() or 1))


def settle(limit: float, log: Any) -> None:
    """Wait up to `limit` seconds for a 2-second sample with under a quarter of the machine busy:
    the figures of a repetition that ran beside someone else's build are noise."""
    t0 = time.perf_counter()
    while True:
        busy = busy_others()
        if busy < 0.25 or time.perf_counter() - t0 >= limit:
            if time.perf_counter() - t0 > 2.5:
                log(f"  e2e: waited {time.perf_counter() - t0:.0f} s for a quieter machine (now {100 * busy:.0f}% busy)")
            return


def measure(code: Path, reps: int, log: Any = print, wait: float = 60.0) -> dict[str, list[float]]:
    exe = build_floor()
    out: dict[str, list[float]] = {k: [] for k in (
        "floor", "default", "small", "ratio_default", "ratio_small", "per_record",
        "floor_cpu", "default_cpu", "small_cpu", "ratio_default_cpu", "ratio_small_cpu")}
    with tempfile.TemporaryDirectory(prefix="ualdbg-e2e-") as tmp:
        json_out = Path(tmp) / "t.json"
        for rep in range(reps):
            if wait > 0:
                settle(wait, log)
            per: dict[str, float] = {}
            variants = [("default", None), ("small", SMALL_RING)]
            for name, ring in (variants if rep % 2 == 0 else variants[::-1]):
                counts = (N1, N2) if rep % 2 == 0 else (N2, N1)
                t = {n: traced(code, n, ring, json_out) for n in counts}
                per[name] = (t[N2][0] - t[N1][0]) / (N2 - N1) * 1e6
                per[name + "_cpu"] = (t[N2][1] - t[N1][1]) / (N2 - N1) * 1e6
            fl, fl_cpu = floor_us(exe)
            out["floor"].append(fl)
            out["floor_cpu"].append(fl_cpu)
            for name in ("default", "small"):
                out[name].append(per[name])
                out[name + "_cpu"].append(per[name + "_cpu"])
                out[f"ratio_{name}"].append(per[name] / fl)
                out[f"ratio_{name}_cpu"].append(per[name + "_cpu"] / fl_cpu)
            out["per_record"].append((per["default"] - per["small"]) * (N2 - N1) / (DEFAULT_RING - SMALL_RING))
            log(f"  e2e rep {rep + 1}: floor {fl:.2f} us, default ring {per['default']:.2f} us "
                f"({per['default'] / fl:.2f}x), --buffer {SMALL_RING} {per['small']:.2f} us ({per['small'] / fl:.2f}x), "
                f"{out['per_record'][-1]:.2f} us per kept record; CPU: floor {fl_cpu:.2f} us, default "
                f"{out['ratio_default_cpu'][-1]:.2f}x, --buffer {SMALL_RING} {out['ratio_small_cpu'][-1]:.2f}x")
    return out


POST = """
import io, json, sys, time
from ualdbg.engines.agent import AgentRun, load_images, document
try:  # a TraceResult since issue 30
    from ualdbg.cli.outputs import write_trace
    from ualdbg.render.formats import FORMATS
    def write_json(doc, path, what):
        return write_trace(doc, path, FORMATS["json"], what)
except ImportError:
    try:
        from ualdbg.cli.outputs import write_json
    except ImportError:  # a tree from before the layout of issue 19
        from ualdbg.ci.outputs import write_json
from ualdbg.render.console import make_console
from ualdbg.render.tables import header, summary_table
a = json.loads(sys.argv[1])
run = AgentRun(a["program"], buffer=a["buffer"])
out = []
for _ in range(a["reps"]):  # what `ualdbg trace --json F` does once the program has ended
    t0 = time.perf_counter()
    doc = document(run, load_images(a["dir"]), a["pid"], 0.0, 1.0, 0, None, {}, "")
    write_json(doc, a["json"], "the JSON output")
    console = make_console(io.StringIO())
    console.print(header(doc))
    console.print(summary_table(doc, "pc"))
    out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def postprocess(codes: list[Path], reps: int) -> dict[str, dict[int, list[float]]]:
    """Seconds to turn the buffers of one `not_aligned N2` run into its JSON file (read, decode,
    name, write), with each tree's code, for the default ring and for --buffer 1000: the same
    buffer files for every tree, the program run once per ring size."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from ualdbg.agent.buffer import buffer_files
    from ualdbg.engines.agent import AgentRun, agent_environment, agent_library

    lib = agent_library()
    out: dict[str, dict[int, list[float]]] = {str(c): {} for c in codes}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for ring in (DEFAULT_RING, SMALL_RING):
        with tempfile.TemporaryDirectory(prefix="ualdbg-e2e-", dir=shm) as d, \
                tempfile.TemporaryDirectory(prefix="ualdbg-e2e-out-") as o:
            program = [str(PROGRAM), str(N2)]
            added = agent_environment(AgentRun(program, buffer=ring, patch_after=0), lib, d, os.environ)
            subprocess.run(program, env=dict(os.environ, **added), stdout=subprocess.DEVNULL, check=True)
            pid = min(pid for pid, _gen, _path in buffer_files(d))
            for code in codes:
                args = {"program": program, "buffer": ring, "dir": d, "pid": pid, "reps": reps,
                        "json": str(Path(o) / "t.json")}
                p = subprocess.run([sys.executable, "-c", POST, json.dumps(args)], capture_output=True, text=True,
                                   env=env_for(code), cwd="/", check=True)
                out[str(code)][ring] = json.loads(p.stdout)
    return out


def per_record_us(times: dict[int, list[float]]) -> float:
    """Post-processing per kept record: (best time with the default ring - best with --buffer
    1000) / (100,000 - 1,000); the best of the repetitions, the least disturbed by others."""
    return (min(times[DEFAULT_RING]) - min(times[SMALL_RING])) / (DEFAULT_RING - SMALL_RING) * 1e6


def _spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)} to {format(max(xs), fmt)})"


def render(res: dict[str, list[float]], post: dict[str, dict[int, list[float]]], code: str, load: float,
           before: str | None) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    med = statistics.median(res["ratio_default"])
    lines = [
        BEGIN,
        "",
        "### End to end: `ualdbg trace --json` of 220,000 faults (issue 21, item 3)",
        "",
        f"Generated by `bench/e2e.py` (also run by `make bench`) on {now}, code {code}, {len(res['floor'])} "
        f"repetitions, load average {load:.2f} at the end; medians with the spread (min to max). Per fault = "
        f"(t({N2:,}) - t({N1})) / ({N2:,} - {N1}) of the wall time of the whole `ualdbg trace --engine agent --no-patch --json F "
        f"-- not_aligned N` (Python start-up cancels; the records kept do not: {DEFAULT_RING:,} with the default "
        f"ring). The floor (`bench/sigbus_floor.c`, {N2:,} faults) runs in the same repetition; ratios are per "
        "repetition.",
        "",
        "| | us per fault (wall) | x floor (wall) | CPU us per fault | x floor (CPU) |",
        "|---|---:|---:|---:|---:|",
        f"| raw SIGBUS floor | {_spread(res['floor'], '.2f')} | 1.00x | {_spread(res['floor_cpu'], '.2f')} | 1.00x |",
        f"| `ualdbg trace --json`, `--buffer {SMALL_RING}` | {_spread(res['small'], '.2f')} | "
        f"{_spread(res['ratio_small'], '.2f')} | {_spread(res['small_cpu'], '.2f')} | {_spread(res['ratio_small_cpu'], '.2f')} |",
        f"| `ualdbg trace --json`, default ring ({DEFAULT_RING:,}) | {_spread(res['default'], '.2f')} | "
        f"{_spread(res['ratio_default'], '.2f')} | {_spread(res['default_cpu'], '.2f')} | "
        f"{_spread(res['ratio_default_cpu'], '.2f')} |",
        "",
        "The CPU columns use the user + system time of the whole process tree (for the floor: its process, "
        f"{N2:,} iterations minus {N1}, less the loops that take no trap): they leave out waiting for a CPU, "
        "so they hold better than wall time when others load the machine.",
        "",
        f"Goal: the default ring at most {GOAL}x the floor: **{'met' if med <= GOAL else 'not met'}** ({med:.2f}x, "
        f"the median of the per-repetition wall-time ratios; on CPU time {statistics.median(res['ratio_default_cpu']):.2f}x).",
        "",
        "**Post-processing per kept record**, measured inside one Python process on the buffers of one run "
        "(read the ring, decode, name, write the JSON file, print the summary: what `ualdbg trace --json F` does "
        f"once the program has ended): (best of the default ring - best of `--buffer {SMALL_RING}`) / "
        f"{DEFAULT_RING - SMALL_RING:,}, the same buffer files for each code:",
        "",
        "| code | default ring s | `--buffer 1000` s | us per kept record |",
        "|---|---:|---:|---:|",
    ]
    names = {str(ROOT): f"this tree ({code})"}
    if before is not None:
        names[before] = f"before: `{before}`"
    for key, times in post.items():
        lines.append(f"| {names.get(key, key)} | {min(times[DEFAULT_RING]):.3f} | {min(times[SMALL_RING]):.3f} | "
                     f"{per_record_us(times):.2f} |")
    if before is not None and len(post) == 2:
        old, new = (per_record_us(post[k]) for k in (before, str(ROOT)))
        lines += ["", f"{old / new:.0f}x cheaper per record than before (goal: at least 20x)."]
    lines += ["", END]
    return "\n".join(lines) + "\n"




def code_version() -> str:
    p = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{p.stdout.strip()}{' (plus uncommitted changes)' if dirty else ''}"


def run(reps: int, before: Path | None = None, write: bool = True, log: Any = print, wait: float = 60.0) -> str:
    if not PROGRAM.exists():
        subprocess.run(["make", "-s", "-C", str(ROOT / "examples")], check=True)
    res = measure(ROOT, reps, log, wait)
    codes = [ROOT] + ([before] if before is not None else [])
    post = postprocess(codes, max(reps, 3))
    section = render(res, post, code_version(), os.getloadavg()[0], str(before) if before is not None else None)
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "e2e.json").write_text(json.dumps({"end_to_end": res, "postprocess": post}, indent=1))
    if write:
        write_section(BEGIN, END, section)
    return section


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--before", type=Path, default=None,
                   help="also the post-processing with the ualdbg/ of this tree (e.g. `git archive BASE ualdbg`)")
    p.add_argument("--wait", type=float, default=60.0,
                   help="seconds to wait for a quieter machine before each repetition (default 60; 0: none)")
    p.add_argument("--no-doc", action="store_true", help="print the section, leave docs/PERFORMANCE.md alone")
    args = p.parse_args()
    print(run(args.reps, args.before.resolve() if args.before else None, not args.no_doc, wait=args.wait))
    return 0


if __name__ == "__main__":
    sys.exit(main())
