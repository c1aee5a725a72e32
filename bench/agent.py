"""The in-process agent's costs (issue 5), measured in one run on this machine:

1. per fault, against the floor: the raw SIGBUS round trip of a C loop whose handler only clears
   AC (bench/agent_loop.c `floor`), and the same misaligned load under the agent (`loads`, timed
   inside the program, minus the same loop run alone);
2. a program with no unaligned access (`work`): its time under the agent over its time alone,
   timed inside the program and as the whole process;
3. three real programs (python3 importing json and sqlite3, git --version, a sqlite3 shell
   session) run as `ualdbg trace --all-modules` runs them: traced/untraced time of the process,
   and of the whole `ualdbg trace` command (start-up, reading the buffers, symbolization);
4. traps taken in out-of-scope modules at the default scope, with the agent's string-routine
   skipping and without it (one trap per access, as the trap engine takes them).

Repetitions interleave the variants; figures are medians (spread min-max). Writes its section
of docs/PERFORMANCE.md between `<!-- agent:begin -->` and `<!-- agent:end -->`.

    .venv/bin/python bench/agent.py [--reps N] [--faults N] [--no-doc]
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
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import field, timed, write_section  # noqa: E402

from ualdbg.agent import buffer as ab  # noqa: E402
from ualdbg.engines.agent import AgentRun, agent_environment, agent_library, run_agent  # noqa: E402

BUILD = ROOT / "bench" / "build" / "agent"
BEGIN, END = "<!-- agent:begin -->", "<!-- agent:end -->"
WHO = "bench/agent.py"
SQL = """CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<5000)
  INSERT INTO t SELECT x, 'name' || x, x*1.5 FROM c;
CREATE INDEX ti ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name4%';
SELECT id, v FROM t WHERE name = 'name1234';
"""


def build_loop() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "agent_loop"
    src = ROOT / "bench" / "agent_loop.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


class Agent:
    """Runs programs with the agent preloaded exactly as the engine does, each in a fresh buffer
    directory whose counters are read back after the run."""

    def __init__(self) -> None:
        self.lib = agent_library()

    def env(self, directory: str, **kw: object) -> dict[str, str]:
        # The trap path: patching (bench/patching.py) would leave two traps per site.
        kw.setdefault("patch_after", 0)
        run = AgentRun(["bench"], **kw)  # type: ignore[arg-type]
        env = dict(os.environ)
        env.update(agent_environment(run, self.lib, directory, os.environ))
        return env

    def run(self, argv: Sequence[str], stdin: str | None = None, **kw: object) -> tuple[float, str, dict[str, int]]:
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
            secs, out = timed(WHO, argv, self.env(d, **kw), stdin)
            totals = {"total": 0, "ignored": 0, "skipped": 0}
            for _pid, _gen, path in ab.buffer_files(d):
                with ab.AgentBuffer(path) as b:
                    h = b.header()
                    totals["total"] += h.total
                    totals["ignored"] += h.ignored
                    totals["skipped"] += h.skipped_calls
        return secs, out, totals






def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(med(values))} ({fmt(min(values))}-{fmt(max(values))})"


def per_fault(agent: Agent, loop: Path, reps: int, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"floor_us": [], "agent_us": [], "ratio": []}
    for _ in range(reps):
        _, text = timed(WHO, [str(loop), "floor", str(n)])
        floor = (field(WHO, text, "ac") - field(WHO, text, "noac")) / 1000
        _, text, totals = agent.run([str(loop), "loads", str(n)])
        if totals["total"] != n:
            raise SystemExit(f"bench/agent.py: the agent counted {totals['total']} faults, not {n}")
        traced = field(WHO, text, "loads")
        _, text = timed(WHO, [str(loop), "loads", str(n)])
        cost = (traced - field(WHO, text, "loads")) / 1000
        out["floor_us"].append(floor)
        out["agent_us"].append(cost)
        out["ratio"].append(cost / floor)
    return out


def no_faults(agent: Agent, loop: Path, reps: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"inner": [], "process": []}
    for i in range(reps):
        order = (True, False) if i % 2 else (False, True)
        got: dict[bool, tuple[float, float]] = {}
        for traced in order:
            if traced:
                secs, text, totals = agent.run([str(loop), "work", str(rounds)])
            else:
                secs, text = timed(WHO, [str(loop), "work", str(rounds)])
            got[traced] = (field(WHO, text, "work"), secs)
        out["inner"].append(got[True][0] / got[False][0])
        out["process"].append(got[True][1] / got[False][1])
    return out


def real_programs(agent: Agent, reps: int) -> list[dict[str, object]]:
    tmp = tempfile.mkdtemp(prefix="ualdbg-bench-")
    progs: list[tuple[str, list[str], str | None]] = [
        ("python3 -c 'import json, sqlite3; print(1)'", ["/usr/bin/python3", "-c", "import json, sqlite3; print(1)"], None),
        ("git --version", ["/usr/bin/git", "--version"], None),
        ("sqlite3 shell session (5,000 rows, index, queries)", ["/usr/bin/sqlite3", ":memory:"], SQL),
    ]
    rows = []
    for label, argv, stdin in progs:
        native, traced, cli, faults = [], [], [], 0
        for i in range(reps):
            order = (0, 1, 2) if i % 2 else (2, 1, 0)
            for which in order:
                if which == 0:
                    native.append(timed(WHO, argv, None, stdin)[0])
                elif which == 1:
                    secs, _out, totals = agent.run(argv, stdin, all_modules=True)
                    traced.append(secs)
                    faults = totals["total"]
                else:
                    cmd = [sys.executable, "-m", "ualdbg", "trace", "--engine", "agent", "--all-modules",
                           "--json", os.path.join(tmp, "t.json"), "--", *argv]
                    cli.append(timed(WHO, cmd, None, stdin)[0])
        trap_secs = None
        if label.startswith("git"):  # the trap engine for scale, once: ~1 ms per fault under gdb
            cmd = [sys.executable, "-m", "ualdbg", "trace", "--engine", "trap", "--all-modules",
                   "--json", os.path.join(tmp, "trap.json"), "--", *argv]
            trap_secs = timed(WHO, cmd, None, stdin)[0]
        # Out-of-scope traps at the default scope: with the routine skipping, and without.
        skip = run_quiet(AgentRun(list(argv)), stdin)
        count = run_quiet(AgentRun(list(argv), skip_out_of_scope=False), stdin)
        rows.append({
            "label": label, "faults_all_modules": faults, "native": native, "traced": traced, "cli": cli,
            "ratio": [t / n for t, n in zip(traced, native)], "cli_ratio": [c / n for c, n in zip(cli, native)],
            "trap_secs": trap_secs,
            "in_scope_default": skip["faults_total"], "oos_traps_skip": skip["agent"]["out_of_scope"]["traps"],
            "oos_calls_skipped": skip["agent"]["out_of_scope"]["routine_calls_run_unarmed"],
            "oos_traps_count": count["agent"]["out_of_scope"]["traps"],
        })
    return rows


def run_quiet(run: AgentRun, stdin: str | None) -> dict[str, object]:
    """run_agent with the program's stdio on files (the bench's own output stays clean)."""
    saved = [os.dup(0), os.dup(1)]
    with tempfile.TemporaryFile("w+") as fin, open(os.devnull, "w") as fout:
        fin.write(stdin or "")
        fin.seek(0)
        os.dup2(fin.fileno(), 0)
        os.dup2(fout.fileno(), 1)
        try:
            return run_agent(run).doc
        finally:
            os.dup2(saved[0], 0)
            os.dup2(saved[1], 1)
            for fd in saved:
                os.close(fd)


def machine() -> str:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, load average {load:.2f} at the end"


def report(pf: dict[str, list[float]], nf: dict[str, list[float]], rows: list[dict[str, object]],
           args: argparse.Namespace, secs: float) -> str:
    us = lambda v: f"{v:.2f}"  # noqa: E731
    x = lambda v: f"{v:.2f}x"  # noqa: E731
    pct = lambda v: f"{(v - 1) * 100:+.1f}%"  # noqa: E731
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        "",
        "## The in-process agent (`--engine agent`)",
        "",
        f"Generated by `bench/agent.py` on {now}, in {secs:.0f} s; {args.reps} interleaved repetitions, "
        "medians with the spread (min-max) in parentheses. Machine: " + machine() + ".",
        "",
        "### Per fault, against the raw SIGBUS round trip",
        "",
        f"`bench/agent_loop.c`, {args.faults:,} misaligned 8-byte loads per run, timed inside the program.",
        "The floor's handler only clears AC in the saved context; the agent records the fault (per-PC "
        "counter, ring record with registers, time, CPU, TID) and runs the load out of line.",
        "",
        "| | us per fault |",
        "|---|---|",
        f"| floor: raw SIGBUS round trip | {spread(pf['floor_us'], us)} |",
        f"| agent | {spread(pf['agent_us'], us)} |",
        f"| agent / floor (per repetition) | {spread(pf['ratio'], x)} (goal: at most 1.50x) |",
        "",
        "### A program with no unaligned access",
        "",
        f"`agent_loop work {args.work}` under the agent over alone (goal: within 5%):",
        "",
        "| measured | traced / untraced |",
        "|---|---|",
        f"| inside the program | {spread(nf['inner'], pct)} |",
        f"| the whole process (load, agent start-up, exit) | {spread(nf['process'], pct)} |",
        "",
        "### Real programs",
        "",
        "Run as `ualdbg trace --all-modules` runs them (the agent preloaded, every module in scope); "
        "byte-identical output and exit status are checked by tests/agent/test_real_programs.py. "
        "*process*: the program's wall time traced over alone; *ualdbg trace*: the whole command "
        "(Python start-up, reading the buffers, decoding every record, symbolization) over the program "
        "alone.",
        "",
        "| program | faults (all modules) | alone s | process traced / untraced | `ualdbg trace` s | "
        "`ualdbg trace` / untraced |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['faults_all_modules']:,} | {med(r['native']):.3f} | "  # type: ignore[arg-type]
                     f"{spread(r['ratio'], x)} | {med(r['cli']):.2f} | {spread(r['cli_ratio'], x)} |")  # type: ignore[arg-type]
    for r in rows:
        if r["trap_secs"] is not None:
            lines += ["", f"For scale, `ualdbg trace --engine trap --all-modules -- {r['label']}` (the trap engine "
                      f"under gdb, once) took {r['trap_secs']:.2f} s, against {med(r['cli']):.2f} s with the agent."]  # type: ignore[arg-type]
    lines += [
        "",
        "### Traps in out-of-scope modules (default scope)",
        "",
        "libc's string routines are unaligned by design. At the first trap inside one of them (an "
        "exported string/memory routine, located at start-up by name and by its .eh_frame extent), "
        "the agent swaps the routine's return address (found from its CFI at the faulting PC) for a "
        "trampoline that re-arms, and lets the routine run to its return with AC clear: one trap per "
        "call instead of one per access. Everything else out of scope (the dynamic loader's lazy "
        "binding, other libraries) still traps once per access, and is counted in `faults_ignored`.",
        "",
        "| program | faults in scope | out-of-scope traps, skipping | routine calls run unarmed | "
        "out-of-scope traps, one per access |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['in_scope_default']:,} | {r['oos_traps_skip']:,} | "
                     f"{r['oos_calls_skipped']:,} | {r['oos_traps_count']:,} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"




def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--faults", type=int, default=100_000)
    p.add_argument("--work", type=int, default=20_000, help="rounds of the no-fault program (default ~0.5 s)")
    p.add_argument("--real-reps", type=int, default=5)
    p.add_argument("--no-doc", action="store_true", help="print the section instead of writing docs/PERFORMANCE.md")
    args = p.parse_args()
    t0 = time.monotonic()
    loop = build_loop()
    agent = Agent()
    pf = per_fault(agent, loop, args.reps, args.faults)
    nf = no_faults(agent, loop, args.reps, args.work)
    rows = real_programs(agent, args.real_reps)
    section = report(pf, nf, rows, args, time.monotonic() - t0)
    raw = BUILD / "results.json"
    raw.write_text(json.dumps({"per_fault": pf, "no_faults": nf, "real": rows}, indent=2))
    if args.no_doc:
        print(section)
    else:
        write_section(BEGIN, END, section)
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
