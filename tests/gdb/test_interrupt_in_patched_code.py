"""Issue 32: Ctrl-C in an attached gdb session while the agent traces. The program spends most
of its time in the agent's patch trampoline of its hot site; a thread stopped there showed
`?? ()` and a backtrace of garbage. gdb now unwinds the trampoline to the program's frame
(adapters/gdb/unwinder.py): `bt` shows the patch, then bump at its line, then main. Driven
through a pseudo-terminal, as a user types it."""
from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from support.debuggers import GDB_ENTRY
from support.env import BUILD, require_tool, scrubbed_env

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: gdb on the terminal
            os.execve(argv[0], argv, env)
        self.seen = ""

    def until(self, pattern: str, timeout: float = 60) -> str:
        """Read until `pattern` appears in what came since the last call; that text."""
        start, deadline = len(self.seen), time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    self.seen += ANSI.sub("", os.read(self.fd, 65536).decode(errors="replace")).replace("\r", "")
                except OSError:
                    break
            found = re.search(pattern, self.seen[start:])
            if found:
                end = start + found.end()
                text, self.seen = self.seen[start:end], self.seen[:start] + self.seen[end:]
                return text
        raise AssertionError(f"no {pattern!r} within {timeout} s; the terminal showed:\n{self.seen[start:]}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def _ac_set(pid: int) -> bool:
    """Whether the process's thread has EFLAGS.AC: read by a throwaway batch gdb."""
    out = subprocess.run([require_tool("gdb"), "-q", "-nx", "-batch", "-p", str(pid), "-ex", "p/x $eflags"],
                         capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"= (0x[0-9a-f]+)", out)
    assert m, out
    return bool(int(m.group(1), 16) & 0x40000)


def test_ctrl_c_in_patched_code_shows_the_programs_frames(tmp_path: Path) -> None:
    program = subprocess.Popen([str(BUILD / "not_aligned"), "4000000000"], stdout=subprocess.DEVNULL)
    term = Terminal([require_tool("gdb"), "-q", "-nx", "-x", str(GDB_ENTRY), "-p", str(program.pid)],
                    scrubbed_env({"TERM": "dumb"}))
    try:
        term.until(r"\(gdb\) ")
        term.send("set pagination off\nset width 0\n")
        term.until(r"set width 0\n(.*\n)?\(gdb\) ")
        term.send("ualdbg trace start\n")
        term.until(r"through the in-process agent .*\n(.*\n)*\(gdb\) ")
        in_patch = 0
        for _ in range(5):
            term.send("continue\n")
            term.until(r"Continuing\.")
            time.sleep(0.5)
            term.send("\x03")
            term.until(r"SIGINT.*\n.*\n(.*\n)?\(gdb\) ")
            term.send("bt\n")
            bt = term.until(r"#\d+ .* in main .*\n(.*\n)*\(gdb\) ")
            assert re.search(r"#[01] .*bump .*not_aligned\.c:3[678]", bt), bt
            in_patch += "<ualdbg patch of bump+" in bt
        assert in_patch, "no interrupt landed in the patch trampoline: the test proved nothing"
        term.send("ualdbg off\n")
        term.until(r"no thread has AC set.*\n(.*\n)*\(gdb\) ")
        term.send("detach\n")
        term.until(r"[Dd]etached.*\n(.*\n)*\(gdb\) ")
        term.send("quit\n")
        time.sleep(0.5)
        assert program.poll() is None, "the program did not survive the session"
        assert not _ac_set(program.pid)
    finally:
        term.close()
        program.kill()
        program.wait()
