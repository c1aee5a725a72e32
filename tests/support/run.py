"""One way to run a command from a test, and one result type for every command a test runs.

`run` never raises on a timeout: it kills the command's whole process group (a debugger with its
program, qemu-user, a shell and its children) and returns what the command printed until then,
with `timed_out` set. The runners over it (support.cli, support.debuggers) turn a timeout into a
test failure that shows that output (`Result.fail_on_timeout`)."""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from support.env import ROOT, scrubbed_env

# After the kill, how long to wait for the pipes to close; a process outside the group that
# still holds them (one that made its own session) must not hang the test.
KILL_GRACE = 10.0


@dataclass
class Result:
    """What one command did. `stdout` and `stderr` are text (UTF-8, newlines as in text mode);
    `stdout_bytes` is stdout as written. A command whose two streams went to one file has it all
    in `stdout`. `doc` is the JSON document the command saved, when a runner reads one;
    `program_exit` the (status, signal) of a program run beside the command (qemu-user under
    gdb-multiarch)."""
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    timeout: float | None = None
    stdout_bytes: bytes = b""
    doc: dict[str, Any] | None = None
    program_exit: tuple[int | None, int | None] | None = None

    def explain(self) -> str:
        """Everything, for an assertion message: the command, how it ended, both streams."""
        if self.timed_out:
            ended = (f"TIMED OUT after {self.timeout:g} s: its process group was killed (exit {self.returncode}); "
                     "the output below is what it printed until then")
        else:
            ended = f"exit status: {self.returncode}"
        if self.program_exit is not None:
            ended += f"\nprogram exit (status, signal): {self.program_exit}"
        return (f"command: {' '.join(shown_argv(self.argv))}\n{ended}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")

    def fail_on_timeout(self) -> Result:
        """Fail the test, with all the output, if the command timed out: a timeout must never
        pass for a result."""
        if self.timed_out:
            pytest.fail(self.explain(), pytrace=False)
        return self


def shown_argv(argv: Sequence[str]) -> list[str]:
    """The command line, a run of more than two of one option pair (lldb's `-o continue` at
    every stop) said once with its count."""
    shown: list[str] = []
    i = 0
    while i < len(argv):
        pair = argv[i:i + 2]
        n = 0
        while argv[i].startswith("-") and len(pair) == 2 and argv[i + 2 * n:i + 2 * n + 2] == pair:
            n += 1
        if n > 2:
            shown.append(f"{pair[0]} {pair[1]} (x{n})")
            i += 2 * n
        else:
            shown.append(argv[i])
            i += 1
    return shown


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(argv: Sequence[str | Path], *, stdin: str | bytes | None = None, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, timeout: float = 300, output: IO[str] | None = None) -> Result:
    """Run `argv` in its own session (so that a timeout kills all it started), stdin from
    `stdin` or /dev/null, in `env` (default: the scrubbed environment) and `cwd` (default: the
    repository). With `output`, an open file, both streams go to it (beside whatever else writes
    there) and the result's stdout is that file's text after the run."""
    args = [str(a) for a in argv]
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.Popen(args, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                            stdout=output if output is not None else subprocess.PIPE,
                            stderr=subprocess.STDOUT if output is not None else subprocess.PIPE,
                            env=dict(env) if env is not None else scrubbed_env(), cwd=cwd or ROOT,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE)  # what was read before, and the rest
        except subprocess.TimeoutExpired as exc:
            out, err = exc.output, exc.stderr  # type: ignore[assignment]
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.kill()
            proc.wait()
    if output is not None:
        output.flush()
        out = Path(output.name).read_bytes()
    return Result(args, proc.returncode, _text(out), _text(err), timed_out=timed_out, timeout=timeout,
                  stdout_bytes=out or b"")
