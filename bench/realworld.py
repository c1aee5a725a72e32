"""Real workloads, whole, side by side in one run (issue 34, item 5): each one natively, built with
UBSan's alignment check (`-fsanitize=alignment`, the same sources and flags otherwise), under
`ualdbg trace` and under `ualdbg check`; then once more under `ualdbg trace --no-patch`, the
reference every patched count must equal at every site.

    xxhash   xxHash's own CLI test suite (`make test-xxhsum-c`: some 240 processes hashing and
             verifying files with every algorithm; its `make check` also runs timed benchmarks,
             which sleep), built from Debian's source package
    lz4      LZ4's CLI round trip as its own tests do it (`datagen` 1 MiB, quick: 64 KiB;
             `lz4 -1`, `lz4 -9`, `lz4 -d`, `lz4 -t`, `cmp`), built from Debian's source package
             (its `frametest` and `fuzzer` make tens of millions of faults a test: a --no-patch
             reference of them takes hours)
    sqlite3  the sqlite3 shell built from Debian's source package (its amalgamation) running a
             script: a table of 20,000 (quick: 5,000) rows, an index, queries
    python3  the python3 interpreter built from Debian's source package (CPython 3.11.2, its core
             and built-in modules: `make python`) running a small workload: json, re, str
             formatting, a dict-heavy loop
    mt       bench/mt_checksum.c: 4 threads checksumming a log of variable-length records packed
             back to back (misaligned header fields and 8-byte payload loads in every thread)

Sources are Debian 12's orig tarballs, pinned by SHA-256 and fetched at bench time into
~/.cache/ualdbg/sources (tests/symbols/corpus.py's fetcher); builds go to ~/.cache/ualdbg/bench.
Nothing of them is committed. Per workload it records the faults, the sites, the sites patched
and why the others were not (the JSON's agent.patching), the share of faults counted by
patches, whether every site's count under patching equals --no-patch's, and the ratios to the
native and the UBSan builds. Writes its section of docs/PERFORMANCE.md between
`<!-- realworld:begin -->` and `<!-- realworld:end -->`; `make bench` runs it.

    .venv/bin/python bench/realworld.py [--quick] [--reps N] [--only NAME,...] [--no-doc]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(1, str(ROOT / "tests" / "symbols"))

import corpus  # noqa: E402  (tests/symbols/corpus.py: Debian's tarballs, pinned, cached)
from common import publish  # noqa: E402
from e2e import code_version  # noqa: E402

BEGIN, END = "<!-- realworld:begin -->", "<!-- realworld:end -->"
WHO = "bench/realworld.py"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ualdbg" / "bench"
PYTHON = corpus.Source("python3.11", "p/python3.11/python3.11_3.11.2.orig.tar.gz",
                       "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849", "Python-3.11.2")
SQLITE = corpus.Source("sqlite3", "s/sqlite3/sqlite3_3.40.1.orig.tar.xz",
                       "aaa776260ab4dc976db34aa7891819484c8676b5b2783123ebc6301e2ca5d655", "sqlite3-3.40.1")
CFLAGS = "-O2 -g"  # an ordinary build; the UBSan one adds -fsanitize=alignment and nothing else
UBSAN = "-fsanitize=alignment"
GOAL_NATIVE, GOAL_PATCHED = 2.0, 0.99  # issue 34: check <= 2x native (or <= UBSan), >= 99% patched
TIMEOUT = 3600
PYTHON_WORK = """
import json, re
rows = [{"id": i, "name": "n%d" % i, "v": i * 1.5, "tags": ["a", "b", str(i % 7)]} for i in range(SIZE)]
text = json.dumps(rows, sort_keys=True)
assert json.loads(text) == rows
words = re.findall(r"n[0-9]+7", text)
counts = {}
for r in rows:
    key = f"{r['name'][-1]}:{len(r['tags'])}"
    counts[key] = counts.get(key, 0) + r["id"]
lines = sorted("%08d %s %.3f" % (r["id"], r["name"].upper(), r["v"]) for r in rows)
print(len(text), len(words), sum(counts.values()), lines[-1])
"""
SQL = """CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL, blob BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<SIZE)
  INSERT INTO t SELECT x, 'name' || x, x*1.5, randomblob(x % 50) FROM c;
CREATE INDEX ti ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name4%';
SELECT name, length(blob) FROM t ORDER BY v DESC LIMIT 5;
UPDATE t SET v = v * 2 WHERE id % 3 = 0;
SELECT avg(v), max(length(blob)) FROM t GROUP BY id % 10;
"""


@dataclass
class Workload:
    name: str
    what: str
    # variant ("plain" or "ubsan") -> (argv, cwd, stdin); None: no such build of it here
    prepare: Callable[[str, bool], tuple[list[str], Path, str | None] | None]
    ualdbg_args: tuple[str, ...] = ()


def log(msg: str) -> None:
    print(f"{WHO}: {msg}", file=sys.stderr, flush=True)


def sh(cmd: list[str], cwd: Path, what: str) -> None:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise SystemExit(f"{WHO}: {what}: {' '.join(cmd)} exited {p.returncode}: {p.stderr[-1500:]}")


def tree(source: corpus.Source, variant: str) -> tuple[Path, bool]:
    """The unpacked source of `source` for `variant` in the cache, and whether it is new."""
    top = CACHE / f"{source.name}-{variant}"
    if (top / ".built").exists():
        return top / source.top, False
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    corpus.unpack(source, top)
    return top / source.top, True


def done(path: Path) -> None:
    (path.parent / ".built").write_text("ok\n")


def flags(variant: str) -> str:
    return f"{CFLAGS} {UBSAN}" if variant == "ubsan" else CFLAGS


def xxhash(variant: str, quick: bool) -> tuple[list[str], Path, str | None]:
    src, new = tree(corpus.SOURCES["xxhash"], variant)
    if new:
        log(f"building xxhsum ({variant})")
        sh(["make", "-s", f"CFLAGS={flags(variant)}", "xxhsum"], src, "xxHash")
        done(src)
    return ["make", "-s", "test-xxhsum-c"], src, None


def lz4(variant: str, quick: bool) -> tuple[list[str], Path, str | None]:
    src, new = tree(corpus.SOURCES["lz4"], variant)
    if new:
        log(f"building LZ4's lz4 and datagen ({variant})")
        sh(["make", "-s", "-C", "programs", f"CFLAGS={flags(variant)}", "lz4"], src, "LZ4")
        sh(["make", "-s", "-C", "tests", f"CFLAGS={flags(variant)}", "datagen"], src, "LZ4's datagen")
        done(src)
    size = "64KB" if quick else "1MB"
    script = (f"set -e; ./datagen -g{size} -s7 > in.bin; L=../programs/lz4; $L -1 -f -q in.bin c1.lz4; "
              "$L -9 -f -q in.bin c9.lz4; $L -d -f -q c9.lz4 out.bin; $L -t -q c1.lz4; cmp in.bin out.bin")
    return ["sh", "-c", script], src / "tests", None


def sqlite3(variant: str, quick: bool) -> tuple[list[str], Path, str | None]:
    src, new = tree(SQLITE, variant)
    if new:
        log(f"building the sqlite3 shell ({variant}; its amalgamation first, with tclsh)")
        sh(["./configure", "--disable-tcl", "--disable-readline", f"CFLAGS={flags(variant)}"], src, "sqlite3 configure")
        sh(["make", "-s", "sqlite3.c", "shell.c"], src, "sqlite3 amalgamation")
        sh(["gcc", *flags(variant).split(), "-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-o", "sqlite3-shell",
            "shell.c", "sqlite3.c", "-lm"], src, "sqlite3 shell")
        done(src)
    return [str(src / "sqlite3-shell"), ":memory:"], src, SQL.replace("SIZE", "5000" if quick else "20000")


def python3(variant: str, quick: bool) -> tuple[list[str], Path, str | None]:
    src, new = tree(PYTHON, variant)
    if new:
        log(f"building python3 ({variant}: CPython 3.11.2's interpreter, a few minutes)")
        sh(["./configure", "--without-ensurepip", f"CFLAGS={flags(variant)}", f"LDFLAGS={flags(variant)}"], src,
           "CPython configure")
        sh(["make", "-s", f"-j{os.cpu_count() or 1}", "python"], src, "CPython")
        done(src)
    # -S: no site (its sysconfig data comes with the shared modules this build leaves out); the
    # build tree's Lib/ is found from the executable's folder.
    return [str(src / "python"), "-S", "-c", PYTHON_WORK.replace("SIZE", "3000" if quick else "10000")], src, None


def mt(variant: str, quick: bool) -> tuple[list[str], Path, str | None]:
    out = CACHE / f"mt_checksum-{variant}"
    src = ROOT / "bench" / "mt_checksum.c"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        CACHE.mkdir(parents=True, exist_ok=True)
        sh(["gcc", *flags(variant).split(), "-pthread", "-o", str(out), str(src)], CACHE, "mt_checksum")
    return [str(out), "4", "20000", "5" if quick else "20"], CACHE, None


WORKLOADS = [
    Workload("xxhash", "xxHash 0.8.1 `make test-xxhsum-c`", xxhash),
    Workload("lz4", "LZ4 1.9.4 CLI round trip", lz4),
    Workload("sqlite3", "sqlite3 3.40.1 shell, SQL script", sqlite3),
    Workload("python3", "CPython 3.11.2 `python`: json, re, a dict loop", python3),
    Workload("mt", "bench/mt_checksum.c, 4 threads", mt),
]


def env_of() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UALDBG_", "PYTHON", "UBSAN_"))}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", NO_COLOR="1", TERM="dumb",
               UBSAN_OPTIONS="print_stacktrace=0:halt_on_error=0")
    return env


def timed(argv: list[str], cwd: Path, stdin: str | None, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, input=stdin, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=env_of(), timeout=TIMEOUT)
    secs = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{WHO}: {' '.join(argv)} (in {cwd}) exited {p.returncode}: {p.stderr[-1500:]}")
    return secs, p.returncode


def ualdbg(cmd: str, extra: tuple[str, ...], json_out: Path, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "ualdbg", cmd, *extra, "--json", str(json_out), "--", *argv]


def site_counts(doc: dict[str, Any]) -> dict[tuple[Any, ...], int]:
    return {(s.get("module"), s.get("offset"), s.get("pc")): s["count"] for s in doc["sites"]}


def measure(w: Workload, reps: int, quick: bool) -> dict[str, Any]:
    plain = w.prepare("plain", quick)
    assert plain is not None
    ubsan = w.prepare("ubsan", quick)
    argv, cwd, stdin = plain
    times: dict[str, list[float]] = {"native": [], "ubsan": [], "trace": [], "check": []}
    with tempfile.TemporaryDirectory(prefix="ualdbg-realworld-") as tmp:
        t_json, c_json, n_json = (Path(tmp) / n for n in ("trace.json", "check.json", "nopatch.json"))
        runs: list[tuple[str, Callable[[], float]]] = [
            ("native", lambda: timed(argv, cwd, stdin)[0]),
            ("trace", lambda: timed(ualdbg("trace", w.ualdbg_args, t_json, argv), cwd, stdin)[0]),
            ("check", lambda: timed(ualdbg("check", w.ualdbg_args, c_json, argv), cwd, stdin, ok=(0, 1))[0]),
        ]
        if ubsan is not None:
            u_argv, u_cwd, u_stdin = ubsan
            runs.insert(1, ("ubsan", lambda: timed(u_argv, u_cwd, u_stdin)[0]))
        for rep in range(reps):
            for name, run in (runs if rep % 2 == 0 else runs[::-1]):
                times[name].append(run())
            log(f"{w.name} rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v))
        t0 = time.perf_counter()
        timed(ualdbg("trace", (*w.ualdbg_args, "--no-patch"), n_json, argv), cwd, stdin)
        nopatch_secs = time.perf_counter() - t0
        doc, ref, tdoc = (json.loads(p.read_text()) for p in (c_json, n_json, t_json))
    # In scope (the sites of the document): the faults patches counted, and why the rest trapped.
    by_patches = sum(s["count"] - s.get("trapped", 0) for s in doc["sites"] if s.get("patched"))
    refused: dict[str, list[int]] = {}
    for site in doc["sites"]:
        if not site.get("patched"):
            why = refused.setdefault(site.get("unpatchable") or _no_reason(site), [0, 0])
            why[0] += 1
            why[1] += site["count"]
    counts, ref_counts, t_counts = site_counts(doc), site_counts(ref), site_counts(tdoc)
    differ = sorted(k for k in set(counts) | set(ref_counts) if counts.get(k) != ref_counts.get(k))
    return {
        "name": w.name, "what": w.what, "times": times, "nopatch_s": nopatch_secs,
        "program_s": doc.get("duration_s") or 0.0,  # the last check's: the program's run, traced
        "faults": doc["faults_total"], "ignored": doc["faults_ignored"], "sites": len(doc["sites"]),
        "processes": len(doc.get("processes") or []) or 1,
        "patched": sum(1 for site in doc["sites"] if site.get("patched")), "by_patches": by_patches,
        "unpatchable": refused, "ref_faults": ref["faults_total"],
        "all_processes_patching": doc.get("agent", {}).get("patching", {}),
        "exact": not differ and doc["faults_total"] == ref["faults_total"], "differ": len(differ),
        "trace_equals_check": t_counts == counts,
    }


def _no_reason(site: dict[str, Any]) -> str:
    """A site left trapping with no reason in the JSON: one that trapped no more than the patch
    threshold was never a candidate; a hotter one is a gap in the agent's account."""
    return "trapped <= 2 times" if site["count"] <= 2 else "hot, no reason given (JSON)"


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def render(results: list[dict[str, Any]], reps: int, quick: bool) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code = code_version()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    lines = [
        BEGIN, "",
        "### Real workloads: native, UBSan, `ualdbg trace`, `ualdbg check` (issue 34)", "",
        f"Generated by `{WHO}{' --quick' if quick else ''}` on {now}, code {code}, on {platform.machine()} "
        f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; {reps} repetition(s), "
        "medians of wall seconds of the whole command (ualdbg's start-up and post-processing included). "
        f"UBSan: the same sources and flags (`{CFLAGS}`) plus `{UBSAN}`. Exact: every site's count with "
        "patching (the default) equals `--no-patch`'s (one trap per fault). \"Before and after the program\": "
        "the last `check`'s wall time less the program's own run under the agent (its JSON's `duration_s`): "
        "ualdbg's start-up and post-processing.", "",
        "| workload | native s | UBSan s | trace s | check s | check: before and after the program s "
        "| check / native | check / UBSan | faults | sites "
        "| patched sites | faults by patches | not patched: sites (their faults) | exact | `--no-patch` s | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|",
    ]
    for r in results:
        t = {k: med(v) for k, v in r["times"].items()}
        ub = t["ubsan"] if r["times"]["ubsan"] else None
        share = r["by_patches"] / r["faults"] if r["faults"] else 1.0
        limit = max(GOAL_NATIVE * t["native"], ub or 0.0)
        met = t["check"] <= limit and share >= GOAL_PATCHED and r["exact"]
        why = "; ".join(f"{k}: {n} ({f:,} faults)" for k, (n, f) in sorted(r["unpatchable"].items())) or "-"
        ub_s = f"{ub:.3f}" if ub is not None else "n/a"
        vs_ub = f"{t['check'] / ub:.2f}x" if ub else "n/a"
        exact = "yes" if r["exact"] else f"NO ({r['differ']} sites differ)"
        procs = f"{r['processes']} process{'es' if r['processes'] != 1 else ''}"
        lines.append(
            f"| {r['name']}: {r['what']} ({procs}) | {t['native']:.3f} | {ub_s} | {t['trace']:.3f} | {t['check']:.3f} | "
            f"{max(0.0, r['times']['check'][-1] - r['program_s']):.2f} | "
            f"{t['check'] / t['native']:.1f}x | {vs_ub} | {r['faults']:,} | {r['sites']:,} | {r['patched']:,} | "
            f"{100 * share:.1f}% | {why} | {exact} | {r['nopatch_s']:.2f} | {'met' if met else 'not met'} |")
    lines += ["", "Goal (issue 34): `ualdbg check` at most 2x native, or at most the UBSan build's time where that "
              "is higher; at least 99% of the faults counted by patches; exact counts. `faults`, `sites` and the "
              "patching columns are those in scope (the program's code, not the C library's); a site of several processes counts once. The reasons are "
              "the agent's (JSON `sites[].unpatchable`); \"hot, no reason given\" counts the sites that "
              "trapped more than the threshold but are neither patched nor given a reason (per process, a "
              "site trapped in several processes may have been patched in none of them).", "",
              END]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller workloads, one repetition (a few minutes)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3; --quick: 1)")
    p.add_argument("--only", default=None, help="comma-separated workload names")
    p.add_argument("--no-doc", action="store_true", help="print the section, leave docs/PERFORMANCE.md alone")
    args = p.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    chosen = [w for w in WORKLOADS if args.only is None or w.name in args.only.split(",")]
    results = []
    for w in chosen:
        log(f"{w.name}: {w.what}")
        results.append(measure(w, reps, args.quick))
    section = render(results, reps, args.quick)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "realworld.json").write_text(json.dumps(results, indent=1, default=str))
    return publish(BEGIN, END, section, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
