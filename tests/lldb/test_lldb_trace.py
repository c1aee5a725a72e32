"""`ualdbg trace ...` inside real lldb, and `ualdbg trace --debugger lldb` from the shell: exact
counts, the ring, the shared buffer with `break`, and the program untouched (stdio, environment,
exit status or signal)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.cli import run_cli
from support.debuggers import lldb_exit_status, lldb_path, run_lldb
from support.env import BUILD, ROOT, scrubbed_env
from support.expected import by_location, expected_by_program
from support.run import Result

CASES = sorted(expected_by_program().items())


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d%", line)]


# These two check the trap engine's summary and ring (`trace start` records through the agent
# by default since issue 32: tests/debuggers/test_trace_in_debuggers.py).
def test_summary_per_pc_and_by_function() -> None:
    run = run_lldb([str(BUILD / "threads"), "10"], ["ualdbg trace start --engine trap", "process launch -o /dev/null",
                                                    "ualdbg trace show --summary", "script print('==BY-' + 'FUNCTION==')",
                                                    "ualdbg trace show --by function"])
    summary, by_function = run.stdout.split("==BY-FUNCTION==")
    got = sorted((int(r[0]), next(x for x in r if x.startswith("threads.c:"))) for r in rows(summary))
    assert got == [(10, "threads.c:41"), (20, "threads.c:53"), (30, "threads.c:63")], run.explain()
    assert "60 in scope" in summary and "engine trap via lldb" in summary and "exit status 0" in summary, run.explain()
    assert sorted(int(r[0]) for r in rows(by_function)) == [10, 20, 30], run.explain()
    assert {"worker_a", "worker_b", "worker_c"} <= set(by_function.split()), run.explain()


def test_wrapped_ring_and_config(tmp_path: Path) -> None:
    save = tmp_path / "t.json"
    run = run_lldb([str(BUILD / "threads"), "10"], [
        "ualdbg config buffer 25", "ualdbg trace start --engine trap", "process launch -o /dev/null", f"ualdbg trace save {save}",
        "ualdbg trace show --limit 4"])
    doc = json.loads(save.read_text())
    assert doc["faults_total"] == 60 and len(doc["records"]) == 25 and doc["records_dropped"] == 35, run.explain()
    assert doc["debugger"] == "lldb" and doc["program"]["exit_status"] == 0, run.explain()
    limited = [line for line in run.stdout.split("--limit 4")[1].splitlines() if re.match(r"^\s*\d+\s+\d+\.\d{6}", line)]
    assert len(limited) == 4 and limited[-1].split()[0] == "60", run.explain()


def test_break_records_into_the_shared_buffer_and_stop_clear() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "10"], [
        "ualdbg break", "process launch", "continue", "ualdbg trace show", "ualdbg trace clear",
        "script print('==CLE' + 'ARED==')", "ualdbg trace show --summary", "ualdbg off", "ualdbg status", "continue"],
        batch=False)
    before, after = run.stdout.split("==CLEARED==")
    assert len([line for line in before.splitlines() if re.match(r"^\s*\d+\s+\d+\.\d{6}", line)]) == 2, run.explain()
    assert "0 in scope" in after and "ualdbg 0.1.0 in lldb: off" in after, run.explain()
    assert lldb_exit_status(run) == 0, run.explain()


def test_trace_stop_disarms_and_keeps_the_records() -> None:
    run = run_lldb([str(BUILD / "not_aligned"), "10"], [
        "breakpoint set -n bump", "ualdbg trace start", "process launch", "breakpoint delete -f 1",
        "ualdbg trace stop", "ualdbg status", "continue", "ualdbg trace show --summary"], batch=False)
    assert "trace stopped; 0 faults recorded" in run.stdout, run.explain()
    assert "set   armed" not in run.stdout.split("trace stopped")[1], run.explain()
    assert lldb_exit_status(run) == 0, run.explain()


def test_bad_command_input_is_one_line() -> None:
    for bad, needle in (("ualdbg trace start --buffer 0", "must be positive"),
                        ("ualdbg trace show --by colour", "invalid choice"),
                        ("ualdbg config nosuch 1", "no setting")):
        run = run_lldb([str(BUILD / "aligned")], [bad])
        errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and needle in errors[0], run.explain()
        assert "Traceback" not in run.stdout + run.stderr, run.explain()


# -- the shell: `ualdbg trace --debugger lldb` ---------------------------------------------------
def ualdbg(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
           timeout: float = 300) -> Result:
    lldb_path()  # skips without lldb, fails under CI=true
    return run_cli(*args, stdin=stdin, env=env, timeout=timeout)


@pytest.mark.parametrize("key,rows", CASES, ids=[f"{p}-{'-'.join(a)}" for (p, a), _ in CASES])
def test_cli_trace_json_counts_are_exact(key, rows, tmp_path: Path) -> None:
    prog, args = key
    out = tmp_path / "t.json"
    p = ualdbg("trace", "--debugger", "lldb", "--json", str(out), "--", str(BUILD / prog), *args)
    assert p.returncode == 0, p.explain()
    doc = json.loads(out.read_text())
    assert by_location(doc) == Counter({r.location: r.count for r in rows if r.count}), p.explain()
    assert doc["faults_total"] == sum(r.count for r in rows), p.explain()
    assert doc["debugger"] == "lldb" and doc["program"]["exit_status"] == 0 and doc["program"]["args"] == list(args)
    assert len(doc["records"]) == doc["faults_total"] and doc["records_dropped"] == 0


@pytest.mark.parametrize("prog,args", [("not_aligned", ["300"]), ("threads", ["10"]), ("sigbus_handler", ["3"]),
                                       ("packed_header", ["20"])])
def test_cli_program_behaves_as_alone(prog: str, args: list[str]) -> None:
    direct = subprocess.run([str(BUILD / prog), *args], capture_output=True, text=True, env=scrubbed_env(), cwd=ROOT)
    p = ualdbg("trace", "--debugger", "lldb", "--json", "/dev/null", "--", str(BUILD / prog), *args)
    program_out = p.stdout
    # The program is attached to, not launched on lldb's terminal: its output is its own, byte
    # for byte but the addresses (ASLR is off under the debugger, as gdb and lldb do).
    scrub = lambda s: re.sub(r"0x[0-9a-f]+", "ADDR", s)  # noqa: E731
    assert scrub(program_out) == scrub(direct.stdout), p.explain()
    assert p.returncode == direct.returncode and p.stderr.startswith(direct.stderr), p.explain()
    assert "Unaligned accesses in " in p.stderr[len(direct.stderr):], p.explain()
    assert "(lldb)" not in p.stdout + p.stderr, p.explain()


def test_cli_stdin_environment_and_exit_status_pass_through(tmp_path: Path) -> None:
    env = {"UALDBG_TEST_VAR": "x" * 100}
    direct = subprocess.run(["/usr/bin/env"], capture_output=True, text=True, env=scrubbed_env(env))
    p = ualdbg("trace", "--debugger", "lldb", "--json", str(tmp_path / "e.json"), "--", "/usr/bin/env", env=env)
    # The very same variables in the very same order (lldb's own launches reorder them).
    assert p.stdout.split("Unaligned accesses in ")[0] == direct.stdout, p.explain()
    p = ualdbg("trace", "--debugger", "lldb", "--json", str(tmp_path / "c.json"), "--", "/bin/cat", stdin="hello\nworld\n")
    assert p.stdout.startswith("hello\nworld\n"), p.explain()
    p = ualdbg("trace", "--debugger", "lldb", "--json", str(tmp_path / "s.json"), "--", "/bin/sh", "-c", "exit 7")
    assert p.returncode == 7, p.explain()
    assert json.loads((tmp_path / "s.json").read_text())["program"]["exit_status"] == 7


def test_cli_program_killed_by_a_signal(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    p = ualdbg("trace", "--debugger", "lldb", "--json", str(out), "--", "/bin/sh", "-c", "kill -SEGV $$")
    assert p.returncode in (-11, 139), p.explain()
    doc = json.loads(out.read_text())
    assert doc["program"]["exit_signal"] == 11 and doc["program"]["exit_status"] is None, p.explain()


def test_cli_output_to_a_file_is_appended_not_truncated(tmp_path: Path) -> None:
    out = tmp_path / "prog.out"
    out.write_text("before\n")
    with open(out, "a") as f:
        p = subprocess.run([sys.executable, "-m", "ualdbg", "trace", "--debugger", "lldb", "--json", "/dev/null", "--",
                            str(BUILD / "not_aligned"), "3"], stdout=f, stderr=subprocess.PIPE, text=True,
                           env=scrubbed_env(), cwd=ROOT, stdin=subprocess.DEVNULL, timeout=120)
    text = out.read_text()
    assert text.startswith("before\nnot_aligned: p=") and "sum=3" in text, p.stderr


def test_cli_check_with_lldb(tmp_path: Path) -> None:
    p = ualdbg("check", "--debugger", "lldb", "--max-faults", "2", "--", str(BUILD / "not_aligned"), "3")
    assert p.returncode == 1 and "FAIL: 3 unaligned accesses" in p.stderr, p.explain()
    p = ualdbg("check", "--debugger", "lldb", "--", str(BUILD / "aligned"), "100")
    assert p.returncode == 0, p.explain()


def test_cli_at_start_sees_the_loader(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    p = ualdbg("trace", "--debugger", "lldb", "--at", "start", "--all-modules", "--json", str(out), "--",
               str(BUILD / "aligned"), "10")
    doc = json.loads(out.read_text())
    assert doc["faults_total"] > 100 and any(s["module"].startswith("ld-linux") for s in doc["sites"]), p.explain()


def test_step_over_a_call_that_faults_while_tracing() -> None:
    # `thread step-over` across bump(): its 50 faults are recorded and stepped over on the way
    # (lldb's step plan stays underneath ualdbg's single-step), and the step ends on the next line.
    line = next(i for i, text in enumerate((ROOT / "examples" / "not_aligned.c").read_text().splitlines(), 1)
                if text.strip() == "bump(p, iterations);")
    run = run_lldb([str(BUILD / "not_aligned"), "50"], [
        "ualdbg trace start", f"breakpoint set -f not_aligned.c -l {line}", "process launch", "thread step-over",
        "ualdbg trace show --summary", "continue"], batch=False)
    after_step = run.stdout.split("(lldb) thread step-over")[1]
    assert "stop reason = step over" in after_step and f"not_aligned.c:{line + 1}" in after_step, run.explain()
    assert [int(r[0]) for r in rows(after_step)] == [50], run.explain()
    assert lldb_exit_status(run) == 0, run.explain()
