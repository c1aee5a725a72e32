"""The agent leaves the program unchanged (its signal handlers, masks, threads, children, exit)
and counts exactly, on small programs written for one behaviour each (tests/fixtures/agent);
where it cannot work, `ualdbg` says so in one line and uses the trap engine."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agentrun import build_agent_programs, by_function, require_agent, trace
from support.build import BuildError, build_program
from support.env import BUILD, EXAMPLES, ROOT, scrubbed_env


@pytest.fixture(autouse=True)
def _agent() -> None:
    require_agent()


@pytest.fixture(scope="module")
def agent_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_agent_programs(tmp_path_factory)


def native(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT, timeout=60, **kw)  # type: ignore[call-overload]


def test_own_signal_handlers_masks_altstack_and_longjmp(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "signals"), "5"]
    alone = native(argv)
    run = trace(argv, tmp_path)
    assert run.returncode == alone.returncode == 0, run.explain()
    assert run.stdout == alone.stdout and run.stderr == alone.stderr, run.explain()
    assert "sigbus action is ours: 1, siginfo: 1" in alone.stdout and "bus error handled: si_code=2" in alone.stdout
    assert run.doc is not None
    # 5 in the loop, 1 in the SIGSEGV handler on the alternate stack, 1 after siglongjmp out of
    # it; none in the SIGUSR1 handler that runs with SIGBUS blocked; 3 at the far return in main,
    # which the agent single-steps with a SIGTRAP handler of its own (the program's still runs).
    counts = by_function(run.doc)
    assert counts["read_at"] == 7 and counts["main"] == 3, run.explain()
    # A plain longjmp out of a handler that blocks SIGBUS leaves it blocked: no tracing (and no
    # armed thread to kill) until the program unblocks it.
    assert counts["read_still_blocked"] == 0 and counts["read_unblocked_again"] == 1, run.explain()
    assert "raised SIGBUS with a signal() handler: -100" in run.stdout
    assert run.doc["agent"]["single_stepped"] == 1 and "traps=2" in run.stdout, run.explain()


def test_default_action_of_a_real_bus_error_is_kept(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "signals"), "2", "die"]
    alone = native(argv)
    assert alone.returncode == -signal.SIGBUS
    run = trace(argv, tmp_path)
    assert run.returncode in (-signal.SIGBUS, 128 + signal.SIGBUS), run.explain()
    assert run.stdout == alone.stdout, run.explain()
    assert run.doc is not None and run.doc["program"]["exit_signal"] == signal.SIGBUS, run.explain()


def test_masks_that_block_sigbus_and_threads_started_blocked(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "masks"), "4"]
    alone = native(argv)
    run = trace(argv, tmp_path)
    assert run.returncode == alone.returncode == 0 and run.stdout == alone.stdout, run.explain()
    assert run.doc is not None
    assert by_function(run.doc) == Counter({"read_in_main": 4, "read_in_thread": 4}), run.explain()
    assert run.doc["agent"]["threads"] == 1 and run.doc["agent"]["threads_started_with_sigbus_blocked"] == 1


def test_instructions_that_cannot_be_copied(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "odd_insns"), "4"]
    alone = native(argv)
    run = trace(argv, tmp_path)
    assert run.returncode == 0 and run.stdout == alone.stdout, run.explain()
    assert run.doc is not None
    per_round = {"misaligned_stack": 3, "leaf": 1, "through_pointer": 2, "jump_through_pointer": 2,
                 "rip_relative": 1, "compare_quads": 4, "store_quads": 3, "far_return": 3}
    assert by_function(run.doc) == Counter({k: 4 * v for k, v in per_round.items()}), run.explain()
    # call (push), ret, call through a pointer, jmp through a pointer: emulated, one signal each;
    # the far return: single-stepped
    assert run.doc["agent"]["emulated"] == 4 * 4 and run.doc["agent"]["single_stepped"] == 4, run.explain()


def test_children_are_traced_and_joined_by_pid(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "children"), "3"]
    alone = native(argv)
    run = trace(argv, tmp_path)
    assert run.returncode == alone.returncode == 0, run.explain()
    assert run.stdout == alone.stdout and run.stderr == alone.stderr, run.explain()
    doc = run.doc
    assert doc is not None
    counts = by_function(doc)
    assert {k: counts[k] for k in ("in_parent", "in_fork_child", "in_exec_child", "in_final")} == {
        "in_parent": 3, "in_fork_child": 3, "in_exec_child": 9, "in_final": 3}, run.explain()
    procs = doc["processes"]
    root = doc["program"]["pid"]
    root_images = [p for p in procs if p["pid"] == root]
    assert [p["image"] for p in root_images] == [0, 1] and root_images[1]["args"] == ["3", "final"], procs
    children = {p["pid"] for p in procs} - {root}
    assert len(children) >= 4, procs  # fork, vfork+exec, posix_spawn, system's shell (and its child)
    # One image per program a process ran: a fork child trapping in glibc's fork before its
    # atfork handlers run must not get a second buffer (it was listed twice).
    for pid in {p["pid"] for p in procs}:
        images = [(p["path"], p["args"]) for p in procs if p["pid"] == pid]
        assert all(a != b for a, b in zip(images, images[1:])), procs
    assert {r["pid"] for r in doc["records"]} == {p["pid"] for p in procs if p["faults_total"]}, run.explain()
    # Every process ended by exit, _exit (the fork child: exit handlers skipped) or exec.
    assert {p["end"] for p in procs} == {"exited", "exec"}, procs
    # system()'s shell is a system program the root started: all its faults are out of scope,
    # so it ran unarmed (issue 34: a suite's shells took a hundred traps each for nothing);
    # what it ran, the program's own child, was armed and counted (in_exec_child above).
    shells = [p for p in procs if os.path.realpath(p["path"]) == os.path.realpath("/bin/sh")]
    assert shells and all(not p["armed"] and p["faults_ignored"] == 0 and "run unarmed" in (p["note"] or "")
                          for p in shells), procs
    assert all(p["armed"] for p in procs if p not in shells), procs
    assert any("they ran unarmed" in n for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize("option", ["--all-modules", f"--module={os.path.basename(os.path.realpath('/bin/sh'))}"])
def test_a_system_program_started_is_armed_when_it_is_in_scope(agent_programs: Path, tmp_path: Path,
                                                               option: str) -> None:
    """--all-modules, or a module named, can put a system program's faults in scope: then it is
    armed as any process is, and its faults are counted."""
    argv = [str(agent_programs / "children"), "3"]
    run = trace(argv, tmp_path, option)
    assert run.returncode == 0 and run.doc is not None, run.explain()
    procs = run.doc["processes"]
    shells = [p for p in procs if os.path.realpath(p["path"]) == os.path.realpath("/bin/sh")]
    assert shells and all(p["armed"] and "unarmed" not in (p["note"] or "") for p in shells), procs
    assert not any("unarmed" in n for n in run.doc["notes"]), run.doc["notes"]
    assert by_function(run.doc)["in_exec_child"] == 9, run.explain()


def test_no_follow_traces_only_the_program(agent_programs: Path, tmp_path: Path) -> None:
    argv = [str(agent_programs / "children"), "3"]
    alone = native(argv)
    run = trace(argv, tmp_path, "--no-follow")
    assert run.returncode == 0 and run.stdout == alone.stdout, run.explain()
    assert run.doc is not None
    assert by_function(run.doc) == Counter({"in_parent": 3}), run.explain()
    assert [p["pid"] for p in run.doc["processes"]] == [run.doc["program"]["pid"]]
    assert run.doc["agent"]["follow_children"] is False


def test_program_sees_its_environment_without_the_agent_when_not_following(tmp_path: Path) -> None:
    env = {"UALDBG_TEST_VAR": "x" * 100}
    alone = subprocess.run(["/usr/bin/env"], capture_output=True, text=True, env=scrubbed_env(env))
    run = trace(["/usr/bin/env"], tmp_path, "--no-follow", env=env)
    assert sorted(run.stdout.splitlines()) == sorted(alone.stdout.splitlines()), run.explain()
    # Following children, the agent stays in the environment, and the JSON says what it added.
    run = trace(["/usr/bin/env"], tmp_path, env=env)
    assert run.doc is not None
    added = run.doc["agent"]["environment_added"]
    lines = set(run.stdout.splitlines())
    assert f"LD_PRELOAD={added['LD_PRELOAD']}" in lines and f"UALDBG_AGENT={added['UALDBG_AGENT']}" in lines
    assert set(alone.stdout.splitlines()) <= lines, run.explain()


def test_exit_status_and_signals_pass_through(tmp_path: Path) -> None:
    run = trace(["/bin/sh", "-c", "exit 7"], tmp_path)
    assert run.returncode == 7 and run.doc is not None and run.doc["program"]["exit_status"] == 7, run.explain()
    run = trace(["/bin/sh", "-c", "kill -SEGV $$"], tmp_path)
    assert run.returncode in (-11, 139) and run.doc is not None and run.doc["program"]["exit_signal"] == 11, run.explain()
    run = trace(["/bin/cat"], tmp_path, stdin="hello\nworld\n")
    assert run.stdout == "hello\nworld\n", run.explain()


def test_a_program_that_strips_ld_preload_runs_once_and_says_what_went_untraced(agent_programs: Path,
                                                                               tmp_path: Path) -> None:
    """Issue 29: no program is run twice. The launcher's exec of its real work goes on as it asked
    (no agent in its environment): that part runs once, untraced; one line says so and names
    --engine trap, and as there is no trace to give, the status is 125 (the program's own when it
    fails). Before, the agent cut the run short at the exec and ualdbg ran it all again."""
    run = trace([str(agent_programs / "strip_env"), str(BUILD / "not_aligned"), "10"], tmp_path, engine="agent")
    assert run.returncode == 125, run.explain()
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "removes LD_PRELOAD" in lines[0] and "--engine trap" in lines[0], run.explain()
    assert run.stdout.count("iterations=10") == 1, run.explain()
    run = trace([str(agent_programs / "strip_env"), str(BUILD / "not_aligned"), "10"], tmp_path, engine="trap")
    assert run.returncode == 0 and run.doc is not None and run.doc["faults_total"] == 10, run.explain()
    assert run.stdout.count("iterations=10") == 1, run.explain()


def test_a_static_program_falls_back_to_the_trap_engine(tmp_path: Path) -> None:
    static = tmp_path / "static_not_aligned"
    try:
        build_program(static, EXAMPLES / "not_aligned.c", flags=("-O1", "-static"))
    except BuildError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot link statically: {e.result.stderr}")
        pytest.skip("no static libc to link with")
    run = trace([str(static), "10"], tmp_path)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "statically linked" in lines[0] and "trap engine" in lines[0], run.explain()
    assert run.returncode == 0 and run.doc is not None and run.doc["engine"] == "trap", run.explain()


def test_setuid_programs_are_left_to_the_trap_engine(tmp_path: Path) -> None:
    from ualdbg.engines.agent import AgentUnavailable, preflight

    prog = tmp_path / "suid"
    shutil.copy(BUILD / "aligned", prog)
    prog.chmod(prog.stat().st_mode | stat.S_ISUID)
    with pytest.raises(AgentUnavailable, match="setuid"):
        preflight(str(prog))


def test_missing_compiler_gives_one_line_and_the_trap_engine(tmp_path: Path) -> None:
    env = {"CC": str(tmp_path / "no-such-cc"), "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    run = trace([str(BUILD / "not_aligned"), "10"], tmp_path, env=env)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no C compiler" in lines[0] and "trap engine" in lines[0], run.explain()
    assert run.returncode == 0 and run.doc is not None and run.doc["engine"] == "trap", run.explain()


def test_debugger_option_means_the_trap_engine(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    from support.cli import run_cli as ualdbg

    run = ualdbg("trace", "--debugger", "gdb", "--json", str(out), "--", str(BUILD / "not_aligned"), "5", json_path=out)
    assert run.doc is not None and run.doc["engine"] == "trap", run.explain()
    run = ualdbg("check", "--json", str(out), "--", str(BUILD / "not_aligned"), "5", json_path=out)
    assert run.returncode == 1 and run.doc is not None and run.doc["engine"] == "agent", run.explain()
    assert "FAIL: 5 unaligned accesses" in run.stderr and "FAIL" not in run.stdout


def test_live_progress_reads_the_shared_buffer() -> None:
    from ualdbg.engines.agent import AgentRun, run_agent

    seen: list[tuple[int, int, float]] = []
    result = run_agent(AgentRun([str(BUILD / "not_aligned"), "60000"]), lambda t, i, s: seen.append((t, i, s)))
    assert result.result.faults_total == 60000
    assert seen, "no progress reported"
    totals = [t for t, _i, _s in seen]
    assert totals == sorted(totals) and totals[-1] == 60000  # the last report has the final figures
    assert all(s > 0 for _t, _i, s in seen)


def test_exact_out_of_scope_counts_without_routine_skipping() -> None:
    """Skipping string routines saves traps; without it every out-of-scope access traps, as
    under the trap engine."""
    from ualdbg.engines.agent import AgentRun, run_agent

    prog = [str(BUILD / "sigbus_handler"), "3"]
    skipping = run_agent(AgentRun(list(prog))).result
    every = run_agent(AgentRun(list(prog), skip_out_of_scope=False)).result
    assert skipping.agent is not None and every.agent is not None
    assert skipping.faults_total == every.faults_total == 3
    assert every.agent.out_of_scope.routine_calls_run_unarmed == 0
    assert skipping.agent.out_of_scope.routine_calls_run_unarmed > 0
    assert skipping.faults_ignored < every.faults_ignored


def test_many_threads_at_the_same_new_pcs(agent_programs: Path, tmp_path: Path) -> None:
    threads, n = 8, 5000
    # --no-patch: every fault traps and goes to the ring, from every thread (patched, issue 34, the
    # short site stops trapping after a few traps, threads or not: test_agent_patching.py)
    run = trace([str(agent_programs / "stress"), str(threads), str(n)], tmp_path, "--buffer", "500", "--no-patch")
    assert run.returncode == 0 and f"total={threads * n}" in run.stdout, run.explain()
    doc = run.doc
    assert doc is not None
    bump = [s for s in doc["sites"] if s["function"] == "bump"]
    assert bump and all(s["count"] == threads * n for s in bump), run.explain()
    assert doc["faults_total"] == sum(s["count"] for s in doc["sites"]), run.explain()
    # Records are numbered by trap: a patched site's later faults (issue 21) have none.
    unrecorded = doc["agent"]["patching"]["faults_in_scope_without_record"]
    assert doc["records"][-1]["seq"] == doc["faults_total"] - unrecorded, run.explain()
    assert len(doc["records"]) == 500 and len({r["tid"] for r in doc["records"]}) > 1, run.explain()
    # libc's memcpy on misaligned buffers, from every thread: one trap per call at most (how many
    # of its accesses the CPU checks depends on the CPU: vector moves differ).
    out = doc["agent"]["out_of_scope"]
    assert out["routine_calls_run_unarmed"] <= threads * (n // 16 + 1) + 50, run.explain()


def test_sites_are_named_while_the_program_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sites a running program has so far are named at idle priority while it runs (engines/
    agent.py, _Warmer), and the document after it takes what was named there (each site's data
    is not named again); the document is the same as without (UALDBG_WARM=0), names and data
    included."""
    import threading

    import ualdbg.engines.agent as agent
    import ualdbg.symbols.data as data
    from ualdbg.engines.agent import AgentRun, run_agent

    warmed: list[tuple[str, int]] = []
    real = agent.image_result
    described: list[str] = []  # by thread, each naming of a site's data (or of an end of its range)
    real_describe = data.describe_saved

    def counting(*args: Any, **kw: Any) -> Any:
        if threading.current_thread().name == "ualdbg-warm":
            warmed.append((os.path.basename(args[1].header.exe), len(args[1].sites)))
        return real(*args, **kw)

    def describing(*args: Any, **kw: Any) -> Any:
        described.append(threading.current_thread().name)
        return real_describe(*args, **kw)

    monkeypatch.setattr(agent, "image_result", counting)
    monkeypatch.setattr(data, "describe_saved", describing)
    prog = ["/bin/sh", "-c", f"{BUILD / 'memalign'} 100 5; sleep 1"]

    def named(result: Any) -> list[tuple[Any, ...]]:
        return sorted((s.pc, s.count, s.loc.function, s.loc.file, s.loc.line, s.data.text if s.data else None)
                      for s in result.sites)

    warm = run_agent(AgentRun(list(prog))).result
    # memalign's sites (its four, and the C library's out of scope), each named once while sh slept
    assert sum(n for exe, n in warmed if exe == "memalign") >= 4, warmed
    in_document = described.count("MainThread")
    monkeypatch.setenv("UALDBG_WARM", "0")
    warmed.clear()
    described.clear()
    cold = run_agent(AgentRun(list(prog))).result
    assert not warmed
    assert named(warm) == named(cold) and len(warm.sites) == 4, (named(warm), named(cold))
    # the four sites' data was named by the warming thread (and maybe their ranges), not again by the document
    assert in_document <= described.count("MainThread") - 4, (in_document, described)
