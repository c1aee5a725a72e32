"""Hot-site patching in the agent (issue 21): a site patched after its first traps counts exactly
what `--no-patch` counts (one trap per fault), per site, with the same sizes and directions, and
the program's output and exit status do not change. Real programs: every example, a hot load of
each kind the patcher handles (long, short, RIP-relative, store, SSE, a site that is misaligned
only some of the time), threads, fork and a raw fork, a thread that blocks SIGBUS, a site in a
shared library, and python3 and sqlite3 traced with all modules."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentrun import FIXTURES, build_agent_programs, require_agent, trace
from support.build import build_program
from support.env import BUILD, ROOT, require_tool, scrubbed_env
from support.expected import expected_by_program
from support.run import Result
from support.users import STRANGER, require_root

CASES = sorted(expected_by_program())


@pytest.fixture(autouse=True)
def _agent() -> None:
    require_agent()


@pytest.fixture(scope="module")
def agent_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_agent_programs(tmp_path_factory)
    build_program(out / "libhot.so", "lib/hotlib.c", flags=("-g", "-O1", "-shared", "-fPIC"), cwd=FIXTURES)
    return out


def sites(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[int, tuple[int, ...], str]]:
    return {(s["module"], s["offset"]): (s["count"], tuple(s["sizes"]), s["access"]) for s in doc["sites"]}


def per_process(doc: dict[str, Any]) -> list[tuple[int, int]]:
    return sorted((p["faults_total"], p["image"]) for p in doc["processes"])


def scrub(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "ADDR", text)


def both(argv: list[str], tmp_path: Path, *options: str, **kw: Any) -> tuple[Result, Result]:
    patched = trace(argv, tmp_path, *options, **kw)
    plain = trace(argv, tmp_path, "--no-patch", *options, **kw)
    assert patched.doc is not None and plain.doc is not None, patched.explain() + plain.explain()
    return patched, plain


def assert_same_counts(patched: Result, plain: Result) -> None:
    p, n = patched.doc, plain.doc
    assert p is not None and n is not None
    why = patched.explain() + plain.explain()
    assert p["faults_total"] == n["faults_total"], why
    assert p["faults_ignored"] == n["faults_ignored"], why
    assert sites(p) == sites(n), why
    assert per_process(p) == per_process(n), why
    assert patched.returncode == plain.returncode, why
    assert scrub(patched.stdout) == scrub(plain.stdout) and patched.stderr == plain.stderr, why
    assert p["program"]["exit_status"] == n["program"]["exit_status"], why
    # --no-patch: one record per fault in scope; patched: one per fault that trapped.
    assert n["agent"]["patching"]["sites_patched"] == 0 and len(n["records"]) == n["faults_total"], why
    assert len(p["records"]) == sum(s.get("trapped", s["count"]) for s in p["sites"]), why
    assert p["records_dropped"] == n["records_dropped"] == 0, why


@pytest.mark.parametrize("key", CASES, ids=[f"{p}-{'-'.join(a)}" for p, a in CASES])
def test_examples_count_the_same_patched(key: tuple[str, tuple[str, ...]], tmp_path: Path) -> None:
    prog, args = key
    patched, plain = both([str(BUILD / prog), *args], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None and patched.doc["agent"]["patching"]["after_traps"] == 2


def patched_site(doc: dict[str, Any], function: str) -> dict[str, Any]:
    found = [s for s in doc["sites"] if s["function"] == function]
    assert len(found) == 1, doc["sites"]
    return found[0]


@pytest.mark.parametrize("mode,n,function,count", [
    ("long", 1000, "long_load", 1000),     # 5 bytes: the jump fits in the instruction
    ("short", 1000, "short_load", 1000),   # 3 bytes: the register-only instructions after it move along
    ("store", 1000, "store", 1000),
    ("sse", 999, "sse", 666),              # movups at 1, 8 and 16 mod 16: the last is aligned
    ("sse8", 1000, "sse", 505),            # 10 at 1 mod 16, then 8 and 16 in turn: the test widens
    ("mixed", 1000, "long_load", 500),     # the same instruction aligned half of the time
    ("imul", 1000, "imul_round", 1000),    # imul $PRIME, 1(%rdi), %ecx: XXH32's round (issue 34)
])
def test_hot_site_is_patched_and_counts_exactly(agent_programs: Path, tmp_path: Path, mode: str, n: int,
                                                function: str, count: int) -> None:
    patched, plain = both([str(agent_programs / "hotpatch"), mode, str(n)], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, function)
    assert site["count"] == count and site.get("patched") is True, patched.explain()
    assert 1 <= site["trapped"] < count, patched.explain()  # the first traps keep their records
    direct = subprocess.run([str(agent_programs / "hotpatch"), mode, str(n)], capture_output=True, text=True,
                            env=scrubbed_env(), cwd=ROOT)
    assert patched.stdout == direct.stdout and patched.returncode == direct.returncode, patched.explain()


def test_rip_relative_sites(agent_programs: Path, tmp_path: Path) -> None:
    """A read-modify-write and a load of a packed global, addressed relative to RIP."""
    patched, plain = both([str(agent_programs / "hotpatch"), "rip", "1000"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    rip = [s for s in patched.doc["sites"] if s["function"] == "rip_rmw"]
    assert sorted((s["count"], s["access"]) for s in rip) == [(1000, "read"), (1000, "read-write")], patched.explain()
    assert all(s.get("patched") for s in rip), patched.explain()
    assert "rip 2507500" in patched.stdout  # 5 added 1000 times, read back each time


def test_threads(agent_programs: Path, tmp_path: Path) -> None:
    """Four threads on a 5-byte load (patched while they run, one atomic store) and a 3-byte one
    (patched with the other threads stopped: the instructions after it move to the trampoline)."""
    patched, plain = both([str(agent_programs / "hotpatch"), "threads", "4", "5000"], tmp_path)
    assert_same_counts(patched, plain)
    doc = patched.doc
    assert doc is not None
    assert patched_site(doc, "long_load_16")["count"] == 20000 and patched_site(doc, "long_load_16").get("patched")
    short = patched_site(doc, "short_load")
    assert short["count"] == 20000 and short.get("patched"), patched.explain()


@pytest.mark.parametrize("mode", ["fork", "rawfork"])
def test_fork_children_inherit_patches_and_count_their_own(agent_programs: Path, tmp_path: Path, mode: str) -> None:
    """Patched before the fork; the child's counts are its own (a raw fork system call runs no
    pthread_atfork handler: its trampolines trap until it has a buffer)."""
    patched, plain = both([str(agent_programs / "hotpatch"), mode, "1000"], tmp_path)
    assert_same_counts(patched, plain)
    doc = patched.doc
    assert doc is not None
    assert sorted(p["faults_total"] for p in doc["processes"] if p["faults_total"]) == [1000, 2000], patched.explain()
    assert patched_site(doc, "long_load")["count"] == 3000 and patched_site(doc, "long_load").get("patched")
    assert "child exit 0" in patched.stdout


def test_unarmed_thread_counts_nothing(agent_programs: Path, tmp_path: Path) -> None:
    """With SIGBUS blocked the thread runs with AC clear: the patched site's trampoline sees it
    and counts nothing, as the hardware would not trap."""
    patched, plain = both([str(agent_programs / "hotpatch"), "masked", "1000"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None and patched_site(patched.doc, "long_load")["count"] == 2000, patched.explain()


def test_writable_code_is_never_patched(agent_programs: Path, tmp_path: Path) -> None:
    """A page the program made writable (self-modifying code, a JIT) is its own: the site traps."""
    patched, plain = both([str(agent_programs / "hotpatch"), "smc", "300"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, "long_load")
    assert site["count"] == 300 and not site.get("patched") and site.get("unpatchable") == "mapping", patched.explain()


def test_short_site_run_in_a_signal_handler(agent_programs: Path, tmp_path: Path) -> None:
    """A short site is patched from inside the program's signal handler too: a context the handler
    returns to inside the moved code goes on in the trampoline (issue 34)."""
    patched, plain = both([str(agent_programs / "hotpatch"), "handler", "200"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, "short_load")
    assert site["count"] == 200 * 5 + 200 and site.get("patched") and site["trapped"] < 10, patched.explain()


def test_fault_inside_a_moved_window(agent_programs: Path, tmp_path: Path) -> None:
    """A load that faults (SIGSEGV) right after a short misaligned one, in the code the patcher
    moves to a trampoline: the program's handler, which runs the patched function, mends the
    faulting pointer and returns into the moved code, runs the same as without the agent; then the
    load faults inside the trampoline, and the handler sees it at its own PC with its registers."""
    patched, plain = both([str(agent_programs / "hotpatch"), "segv", "100"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, "segv_window")
    assert site["count"] == 1 + 100 + 1 + 1 and site.get("patched"), patched.explain()
    direct = subprocess.run([str(agent_programs / "hotpatch"), "segv", "100"], capture_output=True, text=True,
                            env=scrubbed_env(), cwd=ROOT, timeout=60)
    assert patched.stdout == direct.stdout and patched.returncode == direct.returncode == 0, patched.explain()


def test_adjacent_sites_patched_together(agent_programs: Path, tmp_path: Path) -> None:
    """LZ4's wildcopy: a 5-byte misaligned load, then a 3-byte misaligned store right before a
    branch target. The store cannot take the target's instruction along; its window starts at the
    load before it (patched first, on its own), which it takes in: both count through one
    trampoline (issue 34)."""
    patched, plain = both([str(agent_programs / "hotpatch"), "adjacent", "1000"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    counts = {(s["offset"], s["access"]): (s["count"], s.get("patched"), s.get("trapped"))
              for s in patched.doc["sites"] if s["function"] == "adjacent"}
    assert sorted(c for c, _p, _t in counts.values()) == [500, 500, 1000], patched.explain()
    assert all(p and t < 10 for _c, p, t in counts.values()), patched.explain()


def test_evex_compressed_displacement(agent_programs: Path, tmp_path: Path) -> None:
    """An AVX-512 load whose disp8 is scaled by its operand's size (disp8*N: 1 * 32 = 0x20), at a
    base at offsets 0, 1, 8 and 9 in turn: the trampoline's address, and so its count, is right only if
    the displacement is scaled (else every execution would count); and once patched it traps no
    more only if the agent's address of a trap is scaled too. Before, it was not: where the
    unscaled address looked aligned the hardware trapped in the trampoline every time, and libc's
    AVX-512 memset and memcpy sites kept trapping (183,756 traps, 1.3 of CPython's 1.75 s)."""
    argv = [str(agent_programs / "hotpatch"), "evex", "1000"]
    if subprocess.run(argv, capture_output=True, timeout=60).returncode == 77:
        pytest.skip("this CPU has no AVX-512VL: the EVEX load cannot run (the access rule is unit-tested)")
    patched, plain = both(argv, tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, "evex_loads")
    assert site["count"] == 750 and site.get("patched") and site["sizes"] == [32], patched.explain()
    assert site["trapped"] < 10, patched.explain()


def test_string_instructions_count_every_element(agent_programs: Path, tmp_path: Path) -> None:
    """movs, stos and lods (rep or not, upwards and downwards) are patched too: their block adds
    the elements --no-patch traps one by one, and their cost classes; the patched run's counts,
    classes and output are --no-patch's (issue 34: sqlite3's `rep movsq` was 3% of its faults, one
    trap each). Element counts run from 0 to 36, the trap that patches a site is in the middle of
    an instruction's elements, and the operands cross lines and a page."""
    patched, plain = both([str(agent_programs / "hotpatch"), "strings", "2000"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None and plain.doc is not None
    classes = {s["offset"]: s.get("classes") for s in plain.doc["sites"]}
    strings = [s for s in patched.doc["sites"] if s["function"] == "strings"]
    assert len(strings) == 4 and all(s.get("patched") and s["trapped"] <= 3 for s in strings), patched.explain()
    assert all(s.get("classes") == classes[s["offset"]] for s in strings), patched.explain()
    assert any("line-split" in (s.get("classes") or {}) for s in strings), plain.explain()


def test_string_instructions_patched_while_threads_run_them(agent_programs: Path, tmp_path: Path) -> None:
    """The same string instructions run by 8 threads at once: patched with the world stopped (a
    thread may be in a site's copy out of line, mid-elements, and comes back through the jump),
    then counted by locked adds; every count and class is --no-patch's."""
    patched, plain = both([str(agent_programs / "hotpatch"), "strings-threads", "8", "700"], tmp_path, "--buffer", "300000")
    assert_same_counts(patched, plain)
    assert patched.doc is not None and plain.doc is not None
    classes = {s["offset"]: s.get("classes") for s in plain.doc["sites"]}
    strings = [s for s in patched.doc["sites"] if s["function"] == "strings"]
    assert len(strings) == 4 and all(s.get("patched") for s in strings), patched.explain()
    assert all(s.get("classes") == classes[s["offset"]] for s in strings), patched.explain()


NEIGHBOURS = ("nb_sbb_before", "nb_adc_after", "nb_setcc_after", "nb_cmov_after", "nb_jcc_after", "nb_rmw_before",
              "nb_rmw_pair", "nb_store_after", "nb_cmp_rip_after", "counted")


def test_moved_neighbours_behave_as_the_original(agent_programs: Path, tmp_path: Path) -> None:
    """A 3-byte misaligned load moved to a trampoline with its neighbours (tests/fixtures/agent/
    neighbours.c): ones that read flags set before the window (sbb, adc, setcc, cmovcc, jcc), ones
    addressed relative to RIP with an immediate after the displacement (sbbl $-1,x(%rip): the
    -O1 counting idiom of scope_names.cpp; adcl $imm32, movl $imm32, cmpl $imm8), read-modify-writes
    of memory, aligned and misaligned. The program prints what each did (and canaries after each
    RIP-relative global): patched, it prints what it prints natively and with --no-patch, every
    load site is patched and counts exactly the misaligned loads, and no aligned neighbour shows
    as a site. Before, a moved RIP-relative instruction with an immediate addressed its operand
    that immediate's size too far: `counted` counted 191,490 of 750, the canaries changed, and
    the aligned sbbl was shown as a site of 997 faults."""
    n = 1000
    argv = [str(agent_programs / "neighbours"), str(n)]
    direct = subprocess.run(argv, capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60)
    assert direct.returncode == 0 and "canaries 0 0 0 0" in direct.stdout, direct
    assert f"misaligned {n * 3 // 4}" in direct.stdout and f" counted {n * 3 // 4}" in direct.stdout, direct
    patched, plain = both(argv, tmp_path)
    assert patched.stdout == plain.stdout == direct.stdout, patched.explain() + plain.explain()
    assert patched.returncode == plain.returncode == 0, patched.explain()
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    got = {(s["function"], s["access"]): (s["count"], s.get("patched")) for s in patched.doc["sites"]}
    want = {(f, "read"): (n * 3 // 4, True) for f in NEIGHBOURS}
    want[("nb_rmw_pair", "read-write")] = (n * 3 // 4, True)  # the misaligned addl next to the load
    assert got == want, patched.explain()


@pytest.mark.parametrize("pie", [True, False], ids=["pie", "no-pie"])
def test_sites_in_functions_with_indirect_jumps(tmp_path: Path, pie: bool) -> None:
    """Short loads in an interpreter dispatched by computed goto (CPython's eval loop) and in a
    switch compiled to a jump table (tests/fixtures/agent/dispatch.c, -O2), built position-
    independent (relocated label tables, gcc's 32-bit offset tables) and not (absolute tables):
    every site is patched, counts what --no-patch counts, and the program prints what it prints
    natively. Before, each function with an indirect jump was refused ("indirect jump in its
    function": CPython's 22 hottest sites, 28% of its faults, issue 34); now the code addresses
    the module's relocations, data, LEAs and jump tables hold are its entry points."""
    flags = ("-g", "-O2") if pie else ("-g", "-O2", "-no-pie", "-fno-pie")
    prog = build_program(tmp_path / "dispatch", "dispatch.c", flags=flags, cwd=FIXTURES)
    argv = [str(prog), "2000"]
    direct = subprocess.run(argv, capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60)
    assert direct.returncode == 0 and direct.stdout.startswith("interp "), direct
    patched, plain = both(argv, tmp_path)
    assert patched.stdout == plain.stdout == direct.stdout, patched.explain() + plain.explain()
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    doc = patched.doc
    assert doc["faults_total"] == 48000, patched.explain()
    assert {s["function"] for s in doc["sites"]} >= {"interp", "switched", "short_load"}, patched.explain()
    assert all(s.get("patched") is True for s in doc["sites"]), patched.explain()


def test_processes_of_one_run_share_the_code_map(tmp_path: Path) -> None:
    """Six processes of one program in one run (a shell loop, each at its own load address): the
    first builds the code map and writes it to the run's directory, the others read it (relative
    to their own load address) instead of building it again (about 20 ms a process for a 57 KiB
    program: xxHash's test suite, issue 34). Each process patches every site, counts what
    --no-patch counts, and prints what it prints natively."""
    prog = build_program(tmp_path / "dispatch", "dispatch.c", flags=("-g", "-O2"), cwd=FIXTURES)
    native = subprocess.run([str(prog), "500"], capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60)
    argv = ["/bin/sh", "-c", f"for i in 1 2 3 4 5 6; do {prog} 500; done"]
    patched, plain = both(argv, tmp_path)
    assert patched.stdout == plain.stdout == native.stdout * 6, patched.explain() + plain.explain()
    assert_same_counts(patched, plain)
    doc = patched.doc
    assert doc is not None
    runs = [p for p in doc["processes"] if p["path"] == str(prog)]
    assert len(runs) == 6 and all(p["faults_total"] == 12000 for p in runs), patched.explain()
    assert all(s.get("patched") is True and not s.get("unpatchable") for s in doc["sites"]), patched.explain()


def code_maps(result: Result) -> dict[str, int]:
    assert result.doc is not None, result.explain()
    return result.doc["agent"]["patching"]["code_maps"]


def test_code_maps_are_kept_between_runs_and_never_trusted_beyond_their_file(tmp_path: Path) -> None:
    """The patcher's code maps are kept beside the agent for later runs (docs/AGENT.md): a second
    run reads every map the first built and builds none, and counts the same. A file changed in
    place, its size and mtime put back, is swept again (its ctime moved). A folder for them that
    others can write, or another user's, is not used, nor is a map another user left in ours;
    the same counts every time."""
    require_root()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {"XDG_CACHE_HOME": str(cache)}
    prog = build_program(tmp_path / "dispatch", "dispatch.c", flags=("-g", "-O2"), cwd=FIXTURES)
    argv = [str(prog), "500"]
    first = trace(argv, tmp_path, env=env)
    plain = trace(argv, tmp_path, "--no-patch", env=env)
    assert_same_counts(first, plain)
    built = code_maps(first)
    assert built["built"] >= 1 and built["read_from_earlier_run"] == 0, first.explain()
    [folder] = cache.glob("ualdbg/agent-*/codemaps")
    kept = sorted(folder.glob("codemap.*.cm"))
    assert len(kept) == built["built"], first.explain()
    assert all((f.stat().st_mode & 0o777) == 0o600 for f in kept)

    again = trace(argv, tmp_path, env=env)
    assert_same_counts(again, plain)
    assert code_maps(again) == {"built": 0, "read_from_run": 0, "read_from_earlier_run": built["built"]}, again.explain()

    # The program's file changed in place (a byte of its .comment), size and mtime as before.
    st = prog.stat()
    data = bytearray(prog.read_bytes())
    at = data.index(b"GCC: (")
    data[at] = ord("g")
    with open(prog, "r+b") as f:
        f.write(data)
    os.utime(prog, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert prog.stat().st_size == st.st_size and prog.stat().st_mtime_ns == st.st_mtime_ns
    changed = trace(argv, tmp_path, env=env)
    assert_same_counts(changed, plain)
    assert code_maps(changed)["built"] >= 1, changed.explain()

    # A folder others can write to is not used (ualdbg closes it again after the run).
    folder.chmod(0o777)
    before = {f.name: f.stat().st_mtime_ns for f in folder.iterdir()}
    opened = trace(argv, tmp_path, env=env)
    assert_same_counts(opened, plain)
    assert code_maps(opened)["read_from_earlier_run"] == 0 and code_maps(opened)["built"] >= 1, opened.explain()
    assert {f.name: f.stat().st_mtime_ns for f in folder.iterdir()} == before
    assert folder.stat().st_mode & 0o777 == 0o700

    # Another user's maps in our folder, and another user's folder: neither is read.
    for f in folder.iterdir():
        os.chown(f, STRANGER, STRANGER)
    planted = trace(argv, tmp_path, env=env)
    assert_same_counts(planted, plain)
    assert code_maps(planted)["read_from_earlier_run"] == 0, planted.explain()
    assert all(f.stat().st_uid == os.geteuid() for f in folder.iterdir())  # replaced by its own
    os.chown(folder, STRANGER, STRANGER)
    before = {f.name: f.stat().st_mtime_ns for f in folder.iterdir()}
    theirs = trace(argv, tmp_path, env=env)
    assert_same_counts(theirs, plain)
    assert code_maps(theirs)["read_from_earlier_run"] == 0, theirs.explain()
    assert {f.name: f.stat().st_mtime_ns for f in folder.iterdir()} == before  # nothing written there


def test_kept_code_maps_are_pruned_least_recently_used_first(tmp_path: Path) -> None:
    """prune_code_maps keeps the folder under its limit, removing the least recently used maps
    (oldest mtime: the agent stamps a map it reads) down to half the limit, and half-written
    ones an hour old; anything not named as the agent names its maps stays."""
    from ualdbg.agent.build import CODE_MAPS, prune_code_maps

    lib = tmp_path / "agent-x" / "ualdbg_agent.so"
    folder = lib.parent / CODE_MAPS
    folder.mkdir(parents=True, mode=0o700)
    lib.parent.chmod(0o700)
    for i in range(10):
        f = folder / f"codemap.1.{i}.cm"
        f.write_bytes(b"x" * 1000)
        os.utime(f, (1000 + i, 1000 + i))
    stale, fresh, other = folder / "codemap.1.99.7.tmp", folder / "codemap.1.98.7.tmp", folder / "notes.txt"
    for f in (stale, fresh, other):
        f.write_bytes(b"y" * 5000)
    os.utime(stale, (1, 1))
    assert prune_code_maps(str(lib), limit=20_000) == 1  # under the limit: only the stale half-written one
    assert not stale.exists() and fresh.exists() and other.exists()
    assert prune_code_maps(str(lib), limit=6_000) == 7  # down to 3,000 bytes: the 7 oldest go
    assert sorted(f.name for f in folder.glob("*.cm")) == [f"codemap.1.{i}.cm" for i in (7, 8, 9)]
    assert fresh.exists() and other.exists()


@pytest.mark.parametrize("run", range(20))
def test_eight_threads_hammer_a_short_site_while_it_is_patched(agent_programs: Path, tmp_path: Path, run: int) -> None:
    """Eight threads released at once on a 3-byte misaligned load and the 4-byte misaligned store
    next to it: the first traps patch them while the seven others run (every thread stopped
    outside the moved code, or moved to the trampoline), and every fault of every thread counts,
    exactly, twenty runs out of twenty (issue 34)."""
    threads, n = 8, 20000
    argv = [str(agent_programs / "hotpatch"), "hammer", str(threads), str(n)]
    patched = trace(argv, tmp_path)
    doc = patched.doc
    assert doc is not None and patched.returncode == 0, patched.explain()
    direct = subprocess.run(argv, capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60)
    assert patched.stdout == direct.stdout, patched.explain()  # each thread's sum, in thread order
    hammer = [s for s in doc["sites"] if s["function"] == "hammer_loop"]
    assert sorted((s["access"], s["count"]) for s in hammer) == [("read", threads * n), ("write", threads * n)], \
        patched.explain()
    assert all(s.get("patched") and s["trapped"] < n for s in hammer), patched.explain()  # most counted by the patch
    if run == 0:  # the same counts as one trap per fault, site by site
        plain = trace(argv, tmp_path, "--no-patch")
        assert plain.doc is not None and sites(plain.doc) == sites(doc), patched.explain() + plain.explain()


def test_a_thread_asleep_in_an_out_of_line_copy_while_its_window_is_patched(agent_programs: Path, tmp_path: Path) -> None:
    """A thread asleep in the kernel half-way through the out-of-line copy of a 3-byte misaligned
    incq (tests/fixtures/agent/oolstall.c: its pushfq waits for a userfaultfd page) while another
    thread's traps patch the incq's window: the copy's jump back (after the incq, into the jump's
    bytes) goes on at the same instruction in the trampoline, and every fault counts. Before, the
    thread ran the jump's last bytes as code and the program died of SIGSEGV, as a thread stopped
    by a second ualdbg's ptrace did in test_two_concurrent_pid_traces_one_wins (1 run in 3)."""
    argv = [str(agent_programs / "oolstall")]
    direct = subprocess.run(argv, capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60)
    assert direct.returncode == 0 and direct.stdout == "counter 1201\n", direct
    patched = trace(argv, tmp_path)
    assert patched.returncode == 0 and patched.stdout == direct.stdout, patched.explain()
    assert patched.doc is not None, patched.explain()
    bump = [s for s in patched.doc["sites"] if s["function"] == "bump"]
    assert [(s["access"], s["count"]) for s in bump] == [("read-write", 1201)], patched.explain()
    assert bump[0].get("patched"), patched.explain()


def test_every_site_left_trapping_says_why(agent_programs: Path, tmp_path: Path) -> None:
    """Each site that trapped more than patch_after times and was not patched names its reason."""
    patched = trace([str(agent_programs / "hotpatch"), "rip", "1000"], tmp_path, "--all-modules")
    doc = patched.doc
    assert doc is not None, patched.explain()
    left = [s for s in doc["sites"] if s["count"] > 2 and not s.get("patched") and not s.get("unpatchable")]
    assert not left, patched.explain()


def test_site_in_a_shared_library(agent_programs: Path, tmp_path: Path) -> None:
    lib = agent_programs / "libhot.so"
    patched, plain = both([str(agent_programs / "hotpatch"), "lib", str(lib), "1000"], tmp_path)
    assert_same_counts(patched, plain)
    assert patched.doc is not None
    site = patched_site(patched.doc, "hot_sum")
    assert site["module"] == "libhot.so" and site["count"] == 1000 and site.get("patched"), patched.explain()


SQL = """CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<2000)
  INSERT INTO t SELECT x, 'name' || x, x*1.5 FROM c;
CREATE INDEX ti ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name1%';
"""


@pytest.mark.parametrize("argv,stdin", [
    (["/usr/bin/python3", "-c", "import json, sqlite3; print(1)"], None),
    (["sqlite3", "DB"], SQL),
], ids=["python3", "sqlite3"])
def test_real_programs_all_modules(argv: list[str], stdin: str | None, tmp_path: Path) -> None:
    """Every fault of the whole process (libc, the loader, python3's own code) counted the same,
    site by site, patched and not. The runs are made identical: ASLR off (ualdbg's default, as
    gdb's), PYTHONHASHSEED=0, no random SQL, the same argv, and an agent environment of the same
    size (engines/agent.agent_environment): then any difference is the patcher's."""
    exe = require_tool(argv[0])
    db = tmp_path / "t.db"  # the same argv both times: the stack's layout stays the same
    argv = [exe, *(str(db) if a == "DB" else a for a in argv[1:])]
    env = {"PYTHONHASHSEED": "0"}
    patched = trace(argv, tmp_path, "--all-modules", stdin=stdin, env=env)
    db.unlink(missing_ok=True)
    plain = trace(argv, tmp_path, "--all-modules", "--no-patch", stdin=stdin, env=env)
    p, n = patched.doc, plain.doc
    assert p is not None and n is not None, patched.explain() + plain.explain()
    why = patched.explain() + plain.explain()
    assert patched.returncode == plain.returncode == 0 and patched.stdout == plain.stdout, why
    assert patched.stderr == plain.stderr, why
    assert p["agent"]["patching"]["sites_patched"] > 0 and n["agent"]["patching"]["sites_patched"] == 0, why
    assert p["faults_total"] > 10_000, why  # libc's and the loader's faults are in
    assert p["faults_total"] == n["faults_total"] and p["faults_ignored"] == n["faults_ignored"], why
    assert sites(p) == sites(n), why
    assert per_process(p) == per_process(n), why
