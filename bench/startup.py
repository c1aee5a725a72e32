"""What ualdbg costs before and after the program (issue 34, item 3), in one run:

(a) imports: the modules `python -X importtime -m ualdbg trace -- /bin/true` imports, their
    total import time, and whether rich, capstone, pyelftools or the symbolizer are among them;
(b) `ualdbg trace -- /bin/true` against `/bin/true`, paired (A B A B ...): wall and CPU medians
    and the median of the paired wall differences (goal: within 0.1 s);
(c) per process: `spawn_loop N` (bench/spawn_loop.c) starts N processes that make no fault in
    scope; (t(N) - t(0)) / N natively, with the agent preloaded alone (its C start-up), and under
    `ualdbg trace` (the agent and ualdbg's post-processing of each process's buffer); the
    differences are what one process costs more (goal: at most 1 ms);
(d) post-processing (the buffers of a finished run to its JSON and summary, in this process)
    per fault and per site: one site hit N times (patched after 2 traps: 2 records whatever N),
    and 512 sites hit 20 times each (bench/patch_loop.c).

`--before DIR` measures (a), (b) and (c) with the ualdbg/ of another tree too (e.g. a
`git worktree add DIR main`), the same way in the same run. Writes its section of
docs/PERFORMANCE.md between `<!-- startup:begin -->` and `<!-- startup:end -->`.

    .venv/bin/python bench/startup.py [--reps N] [--before DIR] [--no-doc]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import publish  # noqa: E402
from e2e import code_version, settle  # noqa: E402  (as bench/e2e.py: the code's version, a quieter machine)

BUILD = ROOT / "bench" / "build"
BEGIN, END = "<!-- startup:begin -->", "<!-- startup:end -->"
WHO = "bench/startup.py"
TRUE = shutil.which("true") or "/bin/true"
HEAVY = ("rich", "capstone", "elftools", "ualdbg.symbols.resolver", "ualdbg.symbols.dwarfindex", "ualdbg.isa.decode")
SPAWNS = 500
GOAL_TRUE, GOAL_PROCESS = 0.1, 1e-3


def build(name: str) -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe, src = BUILD / name, ROOT / "bench" / f"{name}.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(exe), str(src)], check=True)
    return exe


def env_for(code: Path) -> dict[str, str]:
    """This tree's (or the `--before` tree's) ualdbg, bytecode cached as a user's install has it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UALDBG_", "PYTHON"))}
    env.update(PYTHONPATH=str(code), LC_ALL="C.UTF-8", NO_COLOR="1", TERM="dumb")
    return env


def ualdbg(*args: str) -> list[str]:
    return [sys.executable, "-m", "ualdbg", *args]


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU of the process tree) seconds of a command that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/", timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{WHO}: {' '.join(argv)} exited {p.returncode}: {p.stderr.decode()[-800:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(code: Path, reps: int) -> dict[str, Any]:
    totals, modules = [], set()
    for _ in range(reps + 1):  # the first writes the bytecode caches
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "ualdbg", "trace", "--", TRUE], env=env_for(code),
                           capture_output=True, text=True, cwd="/", timeout=120)
        rows = [line.split("|") for line in p.stderr.splitlines() if line.startswith("import time:") and "self [us]" not in line]
        totals.append(sum(int(r[0].split(":")[1]) for r in rows) / 1e6)
        modules = {r[2].strip() for r in rows}
    heavy = sorted(h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in modules))
    ours = sum(1 for m in modules if m.startswith("ualdbg"))
    return {"import_s": statistics.median(totals[1:]), "modules": len(modules), "ualdbg_modules": ours, "heavy": heavy}


def paired_true(code: Path, reps: int) -> dict[str, Any]:
    a_wall, a_cpu, b_wall, diff = [], [], [], []
    env = env_for(code)
    timed(ualdbg("trace", "--", TRUE), env)  # bytecode caches
    for _ in range(reps):
        aw, ac = timed(ualdbg("trace", "--", TRUE), env)
        bw, _bc = timed([TRUE])
        a_wall.append(aw)
        a_cpu.append(ac)
        b_wall.append(bw)
        diff.append(aw - bw)
    return {"wall": statistics.median(a_wall), "cpu": statistics.median(a_cpu), "true_wall": statistics.median(b_wall),
            "diff": statistics.median(diff), "diff_max": max(diff)}


def per_process(code: Path, reps: int, loop: Path) -> dict[str, float]:
    """Seconds one process adds: agent alone, and under `ualdbg trace`."""
    from ualdbg.engines.agent import AgentRun, agent_environment, agent_library

    lib = agent_library()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    out: dict[str, list[float]] = {"native": [], "agent": [], "trace": [], "trace_cpu": [], "native_cpu": [], "agent_cpu": []}
    env = env_for(code)
    for rep in range(reps):
        with tempfile.TemporaryDirectory(prefix="ualdbg-startup-", dir=shm) as d:
            agent_env = dict(os.environ, **agent_environment(AgentRun([str(loop)]), lib, d, os.environ))
            t: dict[str, dict[int, tuple[float, float]]] = {"native": {}, "agent": {}, "trace": {}}
            for n in ((0, SPAWNS) if rep % 2 == 0 else (SPAWNS, 0)):
                t["native"][n] = timed([str(loop), str(n)])
                t["agent"][n] = timed([str(loop), str(n)], agent_env)
                t["trace"][n] = timed(ualdbg("trace", "--", str(loop), str(n)), env)
        for k in ("native", "agent", "trace"):
            out[k].append((t[k][SPAWNS][0] - t[k][0][0]) / SPAWNS)
        out["trace_cpu"].append((t["trace"][SPAWNS][1] - t["trace"][0][1]) / SPAWNS)
        out["native_cpu"].append((t["native"][SPAWNS][1] - t["native"][0][1]) / SPAWNS)
        out["agent_cpu"].append((t["agent"][SPAWNS][1] - t["agent"][0][1]) / SPAWNS)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"native": med["native"], "agent_more": med["agent"] - med["native"], "trace_more": med["trace"] - med["native"],
            "trace_cpu_more": med["trace_cpu"] - med["native_cpu"], "agent_cpu_more": med["agent_cpu"] - med["native_cpu"]}


def postprocess(reps: int) -> list[tuple[str, int, int, float]]:
    """(case, faults, sites, best seconds) of the post-processing of one run's buffers."""
    import io

    from ualdbg.agent.buffer import buffer_files
    from ualdbg.cli.outputs import write_trace
    from ualdbg.engines.agent import AgentRun, agent_environment, agent_library, document, load_images
    from ualdbg.render.console import make_console
    from ualdbg.render.formats import FORMATS
    from ualdbg.render.tables import header, summary_table

    loop, lib = build("patch_loop"), agent_library()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    rows = []
    cases = [("one site", ["hot", str(n)], n, 1) for n in (1_000, 100_000, 1_000_000)] + [
        ("512 sites x 20", ["many", "20"], 512 * 20, 512), ("512 sites x 2,000", ["many", "2000"], 512 * 2000, 512)]
    for name, args, faults, sites in cases:
        with tempfile.TemporaryDirectory(prefix="ualdbg-startup-", dir=shm) as d, tempfile.TemporaryDirectory() as o:
            program = [str(loop), *args]
            run = AgentRun(program)
            subprocess.run(program, env=dict(os.environ, **agent_environment(run, lib, d, os.environ)),
                           stdout=subprocess.DEVNULL, check=True)
            pid = min(pid for pid, _gen, _path in buffer_files(d))  # (the run shares code maps there too)
            best = float("inf")
            document(run, load_images(d), pid, 0.0, 1.0, 0, None, {}, "")  # imports and the ELF's indexes: once a run
            for _ in range(reps):
                t0 = time.perf_counter()
                doc = document(run, load_images(d), pid, 0.0, 1.0, 0, None, {}, "")
                write_trace(doc, str(Path(o) / "t.json"), FORMATS["json"], "the JSON output")
                console = make_console(io.StringIO())
                console.print(header(doc))
                console.print(summary_table(doc, "pc"))
                best = min(best, time.perf_counter() - t0)
            if doc.faults_total != faults or len(doc.sites) != sites:
                raise SystemExit(f"{WHO}: {name}: {doc.faults_total} faults at {len(doc.sites)} sites, "
                                 f"expected {faults} at {sites}")
            rows.append((name, faults, sites, best))
    return rows


def render(res: dict[str, dict[str, Any]], post: list[tuple[str, int, int, float]], reps: int) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code = code_version()
    lines = [BEGIN, "", "### Start-up: what ualdbg costs around the program (issue 34)", "",
             f"Generated by `{WHO}` on {now}, code {code}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
             f"{os.getloadavg()[0]:.2f} at the end; {reps} repetitions, medians. Bytecode cached (as an installed "
             "ualdbg has it). Wall times count waiting for a CPU: on a loaded machine read the CPU column. Per process: `spawn_loop N` starts N = "
             f"{SPAWNS} processes that make no fault in scope; (t(N) - t(0)) / N, less the same natively.", "",
             "| code | imports (s) | modules (ualdbg's) | rich, capstone, pyelftools, symbolizer imported | "
             "`trace -- /bin/true` wall s | CPU s | wall - `/bin/true` (paired) | per process: agent alone, CPU (wall) | "
             "per process: `ualdbg trace`, CPU (wall) |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        i, t, p = r["imports"], r["true"], r["process"]
        lines.append(f"| {name} | {i['import_s']:.3f} | {i['modules']} ({i['ualdbg_modules']}) | {', '.join(i['heavy']) or 'none'} | "
                     f"{t['wall']:.3f} | {t['cpu']:.3f} | {t['diff']:.3f} | {1e3 * p['agent_cpu_more']:.2f} ms "
                     f"({1e3 * p['agent_more']:.2f}) | {1e3 * p['trace_cpu_more']:.2f} ms ({1e3 * p['trace_more']:.2f}) |")
    this = res["this tree"]
    lines += ["", f"Goals: `ualdbg trace -- /bin/true` within {GOAL_TRUE} s of `/bin/true`: "
              f"**{'met' if this['true']['diff'] <= GOAL_TRUE else 'not met'}** ({this['true']['diff']:.3f} s); a process "
              f"that makes no fault in scope at most 1 ms more (CPU: wall per process is at the noise of a shared machine): "
              f"**{'met' if this['process']['trace_cpu_more'] <= GOAL_PROCESS else 'not met'}** "
              f"({1e3 * this['process']['trace_cpu_more']:.2f} ms CPU, {1e3 * this['process']['trace_more']:.2f} ms wall).", "",
              "**Post-processing** (this tree; the buffers of one finished run to its JSON file and summary, in one "
              "Python process, best of the repetitions): it scales with the sites and the records kept, not with "
              "the faults a patched site counted.", "",
              "| run | faults | sites | seconds | us per fault | us per site |", "|---|---:|---:|---:|---:|---:|"]
    for name, faults, sites, secs in post:
        lines.append(f"| {name} | {faults:,} | {sites} | {secs:.4f} | {1e6 * secs / faults:.3f} | {1e6 * secs / sites:.1f} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--before", type=Path, default=None, help="also measure the ualdbg/ of this tree")
    p.add_argument("--wait", type=float, default=60.0,
                   help="seconds to wait for a quieter machine before each tree's figures (default 60; 0: none)")
    p.add_argument("--no-doc", action="store_true")
    args = p.parse_args()
    loop = build("spawn_loop")
    codes = {"this tree": ROOT} | ({f"before (`{args.before}`)": args.before.resolve()} if args.before else {})
    res: dict[str, dict[str, Any]] = {}
    for name, code in codes.items():
        settle(args.wait, lambda line: print(f"{WHO}:{line}", file=sys.stderr, flush=True))
        res[name] = {"imports": imports(code, args.reps), "true": paired_true(code, args.reps * 3),
                     "process": per_process(code, max(3, args.reps // 2), loop)}
        print(f"{WHO}: {name}: {res[name]}", file=sys.stderr, flush=True)
    section = render(res, postprocess(args.reps), args.reps)
    return publish(BEGIN, END, section, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
