"""The test helpers themselves (tests/support): a command that outlives its timeout is killed
with everything it started and its output is kept, in the shared runner and in the gdb runner;
the program builder compiles once per source, flags and compiler."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import support.build
from support.build import BuildError, build_program
from support.debuggers import run_gdb
from support.run import Result, run, shown_argv

PRINT_THEN_SLEEP = ("import sys, time\n"
                    "print('printed before the timeout', flush=True)\n"
                    "print('and on stderr', file=sys.stderr, flush=True)\n"
                    "time.sleep(60)\n")


def test_a_timeout_keeps_what_was_printed_and_says_so() -> None:
    start = time.monotonic()
    r = run([sys.executable, "-c", PRINT_THEN_SLEEP], timeout=2)
    assert time.monotonic() - start < 30  # killed, not waited for
    assert r.timed_out and r.timeout == 2 and r.returncode == -9, r.explain()
    assert r.stdout == "printed before the timeout\n" and r.stderr == "and on stderr\n", r.explain()
    text = r.explain()
    assert "TIMED OUT after 2 s" in text and "printed before the timeout" in text and "and on stderr" in text


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """What the command started (a debugger's program, a shell's children) dies with it."""
    pid_file = tmp_path / "pid"
    r = run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"], timeout=2)
    assert r.timed_out and r.stdout == "started\n", r.explain()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # killed, then reaped by init
    assert not Path(f"/proc/{child}").exists(), f"sleep {child} outlived the timeout"


def test_a_command_within_its_timeout() -> None:
    r = run(["sh", "-c", "cat; echo out; echo err >&2; exit 3"], stdin="in\n")
    assert not r.timed_out and r.returncode == 3 and r.stdout == "in\nout\n" and r.stderr == "err\n", r.explain()
    assert r.stdout_bytes == b"in\nout\n" and "exit status: 3" in r.explain()


def test_the_gdb_runner_keeps_its_output_on_timeout() -> None:
    """The test fails, and its message has what gdb printed before it was killed."""
    with pytest.raises(pytest.fail.Exception) as failed:
        run_gdb([], ['python print("gdb printed this", flush=True)', "shell sleep 60"], source=False, timeout=3)
    message = str(failed.value)
    assert "TIMED OUT after 3 s" in message and "gdb printed this" in message, message


def test_a_timeout_never_passes_for_a_result() -> None:
    r = Result(["x"], -9, "partial", "", timed_out=True, timeout=1)
    with pytest.raises(pytest.fail.Exception):
        r.fail_on_timeout()
    assert Result(["x"], 0, "", "").fail_on_timeout().returncode == 0


def test_a_long_run_of_one_option_is_said_once() -> None:
    argv = ["lldb", "-o", "a", *["-o", "continue"] * 5, "--", "prog"]
    assert shown_argv(argv) == ["lldb", "-o", "a", "-o continue (x5)", "--", "prog"]
    assert shown_argv(["gdb", "-ex", "run", "-ex", "run"]) == ["gdb", "-ex", "run", "-ex", "run"]


def test_the_builder_compiles_once_per_source_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(support.build, "CACHE", tmp_path / "cache")
    compiles: list[list[str]] = []
    real_run = support.build.run

    def counting_run(argv: list[str], **kw: object) -> Result:
        compiles.append(argv)
        return real_run(argv, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(support.build, "run", counting_run)
    src = tmp_path / "p.c"
    src.write_text("int main(void) { return 7; }\n")
    first = build_program(tmp_path / "a" / "p", src)
    second = build_program(tmp_path / "b" / "p", src)
    assert len(compiles) == 1 and first.read_bytes() == second.read_bytes()
    assert run([str(second)]).returncode == 7
    build_program(tmp_path / "c" / "p", src, flags=("-O2",))
    assert len(compiles) == 2  # other flags: another build
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))
    build_program(tmp_path / "d" / "p", src)
    assert len(compiles) == 3  # a newer source: rebuilt
    src.write_text("int main(void) { return missing; }\n")
    with pytest.raises(BuildError, match="missing"):
        build_program(tmp_path / "e" / "p", src, flags=("-O1",))
