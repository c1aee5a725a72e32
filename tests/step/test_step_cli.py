"""`ualdbg trace/check --engine step` (the native stepper) on real programs: the cross-check with
the trap engine on every example, policies on the cache-line example, functions with calls out
of scope, signals and threads, the program left unchanged, and bad input as one line."""
from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.build import build_program, build_source
from support.cli import run_json as ualdbg
from support.env import BUILD, EXAMPLES, FIXTURES, require_tool, scrubbed_env
from support.expected import by_location, expected_by_program
from support.step import PIE_BASE, PROGRAMS, code_range, per_pc

CASES = sorted(expected_by_program().items())


@pytest.fixture(autouse=True)
def _compiler() -> None:
    require_tool("cc")  # the stepper is built from C on first use


def policy_rows() -> dict[str, Counter[str]]:
    """examples/README.md's table by policy: policy -> {location: count} for split_lines 10."""
    out: dict[str, Counter[str]] = {}
    for line in (EXAMPLES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] == "split_lines" and cells[2] != "policy":
            out.setdefault(cells[2], Counter())[cells[3]] += int(cells[4])
    return out


@pytest.mark.parametrize(("key", "rows"), CASES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in CASES])
def test_same_per_pc_counts_as_the_trap_engine(key: tuple[str, tuple[str, ...]], rows: list, tmp_path: Path) -> None:
    """The issue's cross-check: policy ac, the whole executable's code in scope, every example."""
    require_tool("gdb")
    prog, args = key
    step = ualdbg("trace", "--engine", "step", "--range", code_range(prog), "--", str(BUILD / prog), *args,
                  json_path=tmp_path / "step.json")
    trap = ualdbg("trace", "--engine", "trap", "--", str(BUILD / prog), *args, json_path=tmp_path / "trap.json")
    assert step.doc is not None and trap.doc is not None, step.explain() + trap.explain()
    assert per_pc(step.doc) == per_pc(trap.doc), step.explain() + trap.explain()
    want = Counter({r.location: r.count for r in rows if r.count})
    assert by_location(step.doc) == want, step.explain()
    assert step.doc["engine"] == "step" and step.doc["step"]["policy"] == "ac"
    assert step.doc["step"]["instructions_stepped"] > 0 and step.doc["step"]["scope_entries"] > 0
    # the program ran as it does alone (address randomisation off, as the stepper runs it, and the
    # same environment): byte-identical output, same status
    alone = subprocess.run(["setarch", "-R", str(BUILD / prog), *args], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60, env=scrubbed_env())
    assert step.returncode == alone.returncode
    assert step.stdout.split("Unaligned accesses in ")[0] == alone.stdout, step.explain()


@pytest.mark.parametrize("policy", ["natural", "cacheline", "page", "ac"])
def test_policies_on_the_cache_line_example(policy: str, tmp_path: Path) -> None:
    """cacheline reports exactly the accesses that split a 64-byte line, natural every
    misaligned one, page the one over a page boundary, with the README's counts per line."""
    rows = policy_rows()
    if policy == "ac":
        want = Counter({r.location: r.count for r in expected_by_program()[("split_lines", ("10",))]})
    else:
        want = rows[policy]
    run = ualdbg("trace", "--engine", "step", "--policy", policy, "--range", code_range("split_lines"), "--",
                 str(BUILD / "split_lines"), "10", json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert by_location(run.doc) == want, run.explain()
    assert run.doc["step"]["policy"] == policy and f"policy {policy}" in run.doc["scope"]
    assert run.doc["faults_total"] == sum(want.values())


def test_cacheline_is_a_subset_of_natural(tmp_path: Path) -> None:
    rows = policy_rows()
    assert set(rows["cacheline"]) < set(rows["natural"])
    assert all(rows["cacheline"][loc] == rows["natural"][loc] for loc in rows["cacheline"])
    assert set(rows["page"]) < set(rows["cacheline"])


def test_function_scope_with_calls_out_of_it(tmp_path: Path) -> None:
    """--in main: main's own accesses only; its callees (each a function of its own) run at full
    speed, and stepping resumes after each of them returns (main's loop would otherwise be lost)."""
    run = ualdbg("trace", "--engine", "step", "--policy", "natural", "--in", "main", "--",
                 str(BUILD / "split_lines"), "10", json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert run.doc["faults_total"] == 0, run.explain()
    # one entry at main, then one per return into it: atol, 10 iterations of 21 calls, printf
    assert run.doc["step"]["scope_entries"] == 1 + 1 + 10 * 21 + 1, run.doc["step"]
    both = ualdbg("trace", "--engine", "step", "--policy", "cacheline", "--in", "read_split8", "--in", "read_page8",
                  "--", str(BUILD / "split_lines"), "10", json_path=tmp_path / "u.json")
    assert both.doc is not None, both.explain()
    assert by_location(both.doc) == Counter({"split_lines.c:33": 10, "split_lines.c:53": 50})
    assert both.doc["step"]["scope_entries"] == 10 + 50


@pytest.fixture(scope="module")
def step_signals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_source(PROGRAMS / "step_signals.c", tmp_path_factory.mktemp("step-signals"))


@pytest.mark.parametrize("no_dr", [False, True], ids=["debug-registers", "int3s"])
def test_signal_handlers_interrupting_the_scope(no_dr: bool, step_signals: Path, tmp_path: Path) -> None:
    """SIGALRM every 0.5 ms while `work` steps: the handler (in scope too) is counted once per run
    and the interrupted instruction once per execution, however often it was preempted. Stdin,
    stdout and the exit status are the program's. With UALDBG_STEPPER_NO_DR=1 the entries and
    returns are int3s, stepped over while signals arrive."""
    run = ualdbg("trace", "--engine", "step", "--in", "work", "--in", "on_alarm", "--", str(step_signals), "20000", "3",
                 json_path=tmp_path / "t.json", stdin="hello step\n", env={"UALDBG_STEPPER_NO_DR": "1"} if no_dr else None)
    assert run.doc is not None, run.explain()
    assert run.returncode == 3, run.explain()
    m = re.search(r"n=20000 alarms=(\d+) sum=0 input=hello step\n", run.stdout)
    assert m, run.explain()
    alarms = int(m.group(1))
    assert alarms > 0, "no SIGALRM arrived while stepping: the test proves nothing"
    assert by_location(run.doc) == Counter({"step_signals.c:27": 20000, "step_signals.c:19": 2 * alarms}), run.explain()
    assert run.doc["program"]["exit_status"] == 3


def test_threads_outside_and_inside_the_scope(tmp_path: Path) -> None:
    """threads: three threads, one function each; stepping only one of them counts only its line."""
    src = (EXAMPLES / "threads.c").read_text()
    names = re.findall(r"static void \*(worker_\w+)\(void \*", src)
    assert len(names) == 3, names
    counts = []
    for name in names:
        run = ualdbg("trace", "--engine", "step", "--in", name, "--", str(BUILD / "threads"), "10",
                     json_path=tmp_path / f"{name}.json")
        assert run.doc is not None and run.returncode == 0, run.explain()
        counts.append(by_location(run.doc))
        assert len({r["tid"] for r in run.doc["records"]}) == 1
    assert sorted(sum(c.values()) for c in counts) == [10, 20, 30]
    assert sum(counts, Counter()) == Counter({r.location: r.count for r in expected_by_program()[("threads", ("10",))]})


def test_everywhere_counts_the_program_and_ignores_libc(tmp_path: Path) -> None:
    run = ualdbg("trace", "--engine", "step", "--everywhere", "--", str(BUILD / "not_aligned"), "100",
                 json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert by_location(run.doc) == Counter({"not_aligned.c:38": 100})
    assert run.doc["step"]["scope"]["kind"] == "everywhere"
    # printf and friends were stepped too: far more instructions than the program's loop
    assert run.doc["step"]["instructions_stepped"] > 10_000


def test_module_bias_is_the_kernels(tmp_path: Path) -> None:
    run = ualdbg("trace", "--engine", "step", "--in", "bump", "--", str(BUILD / "not_aligned"), "5",
                 json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    (site,) = run.doc["sites"]
    assert int(site["pc"], 16) - int(site["offset"], 16) == PIE_BASE


def test_check_exit_statuses(tmp_path: Path) -> None:
    found = ualdbg("check", "--engine", "step", "--in", "bump", "--", str(BUILD / "not_aligned"), "7",
                   json_path=tmp_path / "a.json")
    assert found.returncode == 1 and "7 unaligned accesses" in found.stderr, found.explain()
    clean = ualdbg("check", "--engine", "step", "--policy", "cacheline", "--in", "bump", "--",
                   str(BUILD / "not_aligned"), "7", json_path=tmp_path / "b.json")
    # p is one byte past malloc: 8-byte elements at 1 mod 8 split a line once in 8
    assert clean.doc is not None, clean.explain()
    assert clean.returncode == (1 if clean.doc["faults_total"] else 0)


BAD = [
    (["--in", "no_such_function"], "no function named no_such_function in not_aligned or its libraries"),
    (["--range", "0x2000,0x1000"], "--range 0x2000,0x1000: empty range (HI must be above LO)"),
    (["--range", "0x1000,0x1000"], "--range 0x1000,0x1000: empty range (HI must be above LO)"),
    (["--range", "banana"], "--range banana: write two addresses, LO,HI (e.g. 0x401000,0x401200)"),
    (["--in", "checksum", "--everywhere"], "--everywhere steps every instruction: do not combine it with --in or --range"),
    ([], "--engine step needs a scope: --in FUNCTION, --range LO,HI or --everywhere"),
    (["--range", "0x10000,0x10010"], "the program never entered the scope 0x10000,0x10010: nothing was stepped"),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[m.split(":")[0][:30] for _, m in BAD])
@pytest.mark.parametrize("cmd", ["trace", "check"])
def test_bad_input_is_one_line(cmd: str, extra: list[str], message: str, tmp_path: Path) -> None:
    run = ualdbg(cmd, "--engine", "step", *extra, "--", str(BUILD / "not_aligned"), "5", json_path=tmp_path / "t.json")
    assert run.returncode == 2, run.explain()
    assert run.stderr == f"ualdbg: {message}\n", run.explain()
    assert "Traceback" not in run.stdout + run.stderr


def test_function_never_called_is_one_line(tmp_path: Path) -> None:
    """split_lines 0 calls none of its helpers: the scope exists and is never entered."""
    run = ualdbg("check", "--engine", "step", "--in", "read_split8", "--", str(BUILD / "split_lines"), "0",
                 json_path=tmp_path / "t.json")
    assert run.returncode == 2, run.explain()
    assert run.stderr == "ualdbg: the program never entered the scope read_split8: nothing was stepped\n"
    assert "split_lines: buf=" in run.stdout  # the program itself ran to its end


@pytest.mark.parametrize("extra", [["--in", "main"], ["--policy", "natural"], ["--everywhere"]])
def test_step_options_need_the_step_engine(extra: list[str], tmp_path: Path) -> None:
    run = ualdbg("trace", *extra, "--", str(BUILD / "not_aligned"), "5", json_path=tmp_path / "t.json")
    assert run.returncode == 2
    assert run.stderr == "ualdbg: --in, --range, --everywhere and --policy belong to --engine step\n"


def test_fork_child_runs_unstepped_with_its_code_restored(test_programs: Path, tmp_path: Path) -> None:
    """forker: bump() once, fork (the child bumps twice and exits), bump() once more. The child is
    not followed: it must run its own code, not our breakpoints (an int3 would kill it). Each
    bump() is a misaligned 8-byte load and a store (volatile at -O1): two accesses."""
    run = ualdbg("trace", "--engine", "step", "--in", "bump", "--", str(test_programs / "forker"),
                 json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert "parent: child status 0 signaled 0" in run.stdout, run.explain()
    assert run.returncode == 0
    assert run.doc["faults_total"] == 2 * 2, run.explain()


def test_exec_stops_stepping_and_the_new_program_runs(test_programs: Path, tmp_path: Path) -> None:
    run = ualdbg("trace", "--engine", "step", "--in", "bump", "--", str(test_programs / "forker"), "exec",
                 json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert "exec'd child ok" in run.stdout and run.returncode == 0, run.explain()
    assert run.doc["faults_total"] == 2, run.explain()  # the one bump() before the exec
    assert any("exec" in n for n in run.doc["notes"]), run.doc["notes"]


def test_wrapped_ring_keeps_counts_exact(tmp_path: Path) -> None:
    run = ualdbg("trace", "--engine", "step", "--in", "bump", "--buffer", "5", "--", str(BUILD / "not_aligned"), "100",
                 json_path=tmp_path / "t.json")
    assert run.doc is not None, run.explain()
    assert run.doc["faults_total"] == 100 and run.doc["records_dropped"] == 95
    assert [r["seq"] for r in run.doc["records"]] == [96, 97, 98, 99, 100]
    m = re.search(r"not_aligned: p=(0x[0-9a-f]+)", run.stdout)
    assert m, run.explain()
    base = int(m.group(1), 16)
    # every record's VA is p + key*8 (examples/README.md): the recipes evaluate the real address
    assert all((int(r["va"], 16) - base) % 8 == 0 and 0 <= int(r["va"], 16) - base < 64 * 8 for r in run.doc["records"])
    assert {r["tid"] for r in run.doc["records"]} == {run.doc["program"]["pid"]}


def test_odd_operands_match_the_trap_engine(tmp_path: Path) -> None:
    """push/call/pop/ret on a misaligned stack, call and jmp through misaligned pointers, a
    RIP-relative load, repe cmpsq and rep stosq: the recipes the C loop evaluates (rsp adjusts,
    RIP folded into the displacement, rep counts) give the trap engine's per-PC counts. The one
    exception is lretq, a far return the decoder does not model: the trap engine counts its #AC
    with no access, the step engine cannot see it and says so in its notes."""
    require_tool("gdb")
    exe = build_program(tmp_path / "odd_insns", FIXTURES / "agent" / "odd_insns.c")
    step = ualdbg("trace", "--engine", "step", "--range", code_range(exe), "--", str(exe), "3",
                  json_path=tmp_path / "step.json")
    trap = ualdbg("trace", "--engine", "trap", "--", str(exe), "3", json_path=tmp_path / "trap.json")
    assert step.doc is not None and trap.doc is not None, step.explain() + trap.explain()
    unmodelled = {s["pc"] for s in trap.doc["sites"] if s["access"] is None}
    assert len(unmodelled) == 1, trap.doc["sites"]
    want = Counter({pc: n for pc, n in per_pc(trap.doc).items() if pc not in unmodelled})
    assert per_pc(step.doc) == want, step.explain() + trap.explain()
    assert sum(want.values()) == 54
    assert any("not fully model" in n for n in step.doc["notes"]), step.doc["notes"]
    assert step.stdout.split("Unaligned accesses in ")[0] == trap.stdout.split("Unaligned accesses in ")[0]


def test_the_program_keeps_its_cpu_mask(tmp_path: Path) -> None:
    """A stepped thread is moved to the stepper's CPU only while it steps: main's mask after the
    scope, and that of a thread started inside it, are the program's own."""
    exe = build_source(PROGRAMS / "step_affinity.c", tmp_path, flags=("-g", "-O1", "-pthread"))
    alone = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    run = ualdbg("trace", "--engine", "step", "--in", "work", "--", str(exe), json_path=tmp_path / "t.json")
    assert run.doc is not None and run.doc["faults_total"] == 1, run.explain()
    assert run.stdout.split("Unaligned accesses in ")[0] == alone.stdout, run.explain()


@pytest.mark.parametrize(("scope", "threads"), [("function", 8), ("range", 1)])
def test_many_threads_through_one_entry_stay_exact(scope: str, threads: int, tmp_path: Path) -> None:
    """stress: 8 threads call bump() 1000 times each, all at once, and memcpy through a pointer
    (libc, out of scope) between calls. Every call of bump must be stepped: an entry a thread
    steps over must not let the other threads run through it unseen (the stepper keeps up to
    three entries, and each thread's pending returns, in that thread's debug registers, not in
    shared int3 bytes). With the whole program's code in scope (one thread: more entries than
    debug registers means shared int3s, docs/STEP.md), main's read after pthread_join counts
    too: pthread_join is called through the lazy-binding PLT, which is in scope and leaves it
    by a jump, not a call."""
    exe = build_program(tmp_path / "stress", FIXTURES / "agent" / "stress.c", flags=("-g", "-O1", "-pthread"))
    where = ["--in", "bump"] if scope == "function" else ["--range", code_range(exe)]
    run = ualdbg("trace", "--engine", "step", *where, "--", str(exe), str(threads), "1000", json_path=tmp_path / "t.json")
    assert run.doc is not None and run.returncode == 0, run.explain()
    got: Counter[tuple[str, int]] = Counter()
    for s in run.doc["sites"]:
        got[(s["function"], s["line"])] += s["count"]
    want = Counter({("bump", 19): 2 * 1000 * threads})  # a load and a store per call
    if scope == "range":
        want[("main", 48)] = threads
    assert got == want, run.explain()
    bump_pcs = {s["pc"] for s in run.doc["sites"] if s["function"] == "bump"}
    assert len({r["tid"] for r in run.doc["records"] if r["pc"] in bump_pcs}) == threads


@pytest.mark.parametrize("no_dr", [False, True], ids=["int3-entries", "int3-everything"])
def test_many_threads_through_int3_entries_stay_exact(no_dr: bool, tmp_path: Path) -> None:
    """step_entries: 20 threads call f0..f3 400 times each, all at once, one misaligned read per
    call. Four entries are more than the debug registers hold, so they are int3 bytes that every
    thread runs through while others step over them (UALDBG_STEPPER_NO_DR=1: the return addresses
    too). No call may run unstepped: the per-PC counts are the trap engine's, 8000 at each read.
    (More than 16 threads: the stepper's thread table grows while threads are being held.)"""
    require_tool("gdb")
    exe = build_source(PROGRAMS / "step_entries.c", tmp_path, flags=("-g", "-O1", "-pthread"))
    env = {"UALDBG_STEPPER_NO_DR": "1"} if no_dr else {}
    where = [a for f in ("f0", "f1", "f2", "f3") for a in ("--in", f)]
    step = ualdbg("trace", "--engine", "step", *where, "--", str(exe), "20", "400", json_path=tmp_path / "step.json",
                  env=env)
    trap = ualdbg("trace", "--engine", "trap", "--", str(exe), "20", "400", json_path=tmp_path / "trap.json")
    assert step.doc is not None and trap.doc is not None, step.explain() + trap.explain()
    assert step.returncode == 0, step.explain()
    got: Counter[str] = Counter()
    for s in step.doc["sites"]:
        got[s["function"]] += s["count"]
    assert got == Counter({f: 8000 for f in ("f0", "f1", "f2", "f3")}), step.explain()
    assert per_pc(step.doc) == per_pc(trap.doc), step.explain() + trap.explain()
    assert step.doc["step"]["scope_entries"] >= 4 * 8000, step.explain()


@pytest.fixture(scope="module")
def step_outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_source(PROGRAMS / "step_outside.c", tmp_path_factory.mktemp("step-outside"), flags=("-g", "-O1", "-pthread"))


def _outside_run(exe: Path, functions: tuple[str, ...], tmp_path: Path, env: dict[str, str],
                 trap_doc: dict | None = None) -> tuple[Counter[str], int, dict]:
    """step_outside 8 1000 stepped in `functions`: per function counts (checked against the trap
    engine's per-PC counts for those functions), the spinning thread's voluntary switches, and
    the step object."""
    where = [a for f in functions for a in ("--in", f)]
    step = ualdbg("trace", "--engine", "step", *where, "--", str(exe), "8", "1000", json_path=tmp_path / "step.json",
                  env=env)
    assert step.doc is not None and step.returncode == 0, step.explain()
    alone = subprocess.run(["setarch", "-R", str(exe), "8", "1000"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60, env=scrubbed_env())
    # the program's own output: the total sums pointers, and a 1 MiB malloc block comes from mmap
    # at the address it gets alone (the stepper's page of instruction copies moved nothing)
    assert "block=0x7" in alone.stdout
    assert step.stdout.splitlines()[0] == alone.stdout.splitlines()[0], step.explain()
    m = re.search(r"^spinner voluntary switches: (\d+)$", step.stdout, re.M)
    assert m, step.explain()
    if trap_doc is not None:
        want = Counter({s["pc"]: s["count"] for s in trap_doc["sites"] if s["function"] in functions})
        assert per_pc(step.doc) == want, step.explain()
    got: Counter[str] = Counter()
    for s in step.doc["sites"]:
        got[s["function"]] += s["count"]
    return got, int(m.group(1)), step.doc["step"]


@pytest.fixture(scope="module")
def outside_trap(step_outside: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    require_tool("gdb")
    trap = ualdbg("trace", "--engine", "trap", "--", str(step_outside), "8", "1000",
                  json_path=tmp_path_factory.mktemp("outside-trap") / "trap.json")
    assert trap.doc is not None, trap.explain()
    return trap.doc


@pytest.mark.parametrize("no_dr", [False, True], ids=["int3-entries", "int3-everything"])
def test_int3_entries_do_not_stop_threads_outside_the_scope(no_dr: bool, step_outside: Path, outside_trap: dict,
                                                            tmp_path: Path) -> None:
    """step_outside: 8 threads call seven functions 1000 times each (seven entries: int3 bytes,
    more than the debug registers hold; UALDBG_STEPPER_NO_DR=1: the returns from f3's and
    g_call's calls out of the scope too) while a ninth thread spins outside the scope without a
    system call. Every int3 is stepped over by running a copy of its instruction elsewhere
    (g_rip's RIP-relative load re-aimed, g_call's relative call and the return address it pushes
    put right, g_jmp's short jump widened), so no thread is ever stopped for another: the
    spinner's voluntary context switches (a ptrace stop is one) stay near zero while the entries
    are hit 56000 times, and the per-PC counts are the trap engine's."""
    functions = ("f0", "f1", "f2", "f3", "g_rip", "g_call", "g_jmp")
    got, switches, step = _outside_run(step_outside, functions, tmp_path,
                                       {"UALDBG_STEPPER_NO_DR": "1"} if no_dr else {}, outside_trap)
    assert got == Counter({f: 8000 for f in functions})
    # entries: seven calls and two returns from the calls out of the scope per iteration; the
    # returns come back through debug register 3 unless UALDBG_STEPPER_NO_DR is set
    assert step["scope_entries"] == 9 * 8000, step
    assert step["int3_steps_stopping_others"] == 0, step
    assert step["int3_steps_displaced"] == (9 if no_dr else 7) * 8000, step
    assert switches < 20, f"the thread outside the scope was stopped {switches} times"


def test_entries_that_cannot_be_displaced_stop_the_others(step_outside: Path, outside_trap: dict,
                                                          tmp_path: Path) -> None:
    """g_jrcxz starts with a jrcxz (rel8, which a copy elsewhere cannot reach, and unlike a jmp or
    jcc has no rel32 form to widen it to): that entry is stepped over the old way, its int3
    lifted with every other thread held, and the counts stay exact. The spinner is then stopped
    about once per g_jrcxz call: what the test above measures can fail.
    (UALDBG_STEPPER_NO_DISPLACE=1 turns displaced steps off for everything.)"""
    functions = ("f0", "f1", "f2", "g_jrcxz")
    got, switches, step = _outside_run(step_outside, functions, tmp_path, {}, outside_trap)
    assert got == Counter({f: 8000 for f in functions})
    assert step["int3_steps_stopping_others"] == 8000 and step["int3_steps_displaced"] == 3 * 8000, step
    assert switches > 1000, switches
    got, switches, step = _outside_run(step_outside, ("f0", "f1", "g_rip", "g_call"), tmp_path,
                                       {"UALDBG_STEPPER_NO_DISPLACE": "1"}, outside_trap)
    assert got == Counter({f: 8000 for f in ("f0", "f1", "g_rip", "g_call")})
    assert step["int3_steps_stopping_others"] == 4 * 8000 and step["int3_steps_displaced"] == 0, step
    assert switches > 1000, switches
