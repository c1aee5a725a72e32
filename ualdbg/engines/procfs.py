"""What /proc tells about a traced process and its threads: its status fields and name, a
thread's signal mask, the system call it waits in and the CPU it last ran on, the processes it
started."""
from __future__ import annotations

import os
import signal


def children(pid: int) -> list[int]:
    """The processes `pid` started and that are still its children (a debugger's inferior, a
    shell's commands), from /proc. A thread that ends while the list is read does not hide its
    siblings' children."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out



def descendants(pid: int, limit: int = 100_000) -> list[int]:
    """`pid`'s children, theirs, and so on (at most `limit`), as /proc shows them now."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < limit:
        for child in children(todo.pop()):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def blocked_signals(pid: int, tid: int) -> int:
    """The thread's blocked signals (SigBlk of /proc/PID/task/TID/status), 0 when unknown."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def status_field(pid: int, name: str) -> str | None:
    """A field of /proc/PID/status (`PPid`, `Seccomp`...), None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def comm(pid: int) -> str:
    """The process's name as the kernel keeps it, "?" when unreadable."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def same_pid_namespace(pid: int) -> bool:
    """Whether `pid` sees this process under the pid it has here (the injected agent opens a pidfd
    of it from inside: in another namespace that number is another process, or none)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return False


def sigbus_blocked(pid: int, tid: int) -> bool:
    return bool(blocked_signals(pid, tid) & (1 << (signal.SIGBUS - 1)))  # (this host's number: /proc is the host's)


# Blocking system calls a thread waits in holding no lock of libc's: the thread a call is made in.
QUIET_SYSCALLS = {0, 7, 23, 34, 35, 43, 45, 47, 61, 230, 232, 270, 271, 281, 288}


def syscall_of(pid: int, tid: int) -> int | None:
    """The system call a stopped thread waits in (/proc/PID/task/TID/syscall), None if none."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            word = f.read().split()[0]
        return int(word) if word.lstrip("-").isdigit() and int(word) >= 0 else None
    except (OSError, IndexError):
        return None


def system_ranges(pid: int) -> list[tuple[int, int]]:
    """The executable mappings of libc and the dynamic loader: a thread stopped there may hold
    one of their locks (malloc's, the loader's)."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "x" in parts[1]:
                base = os.path.basename(parts[5].strip())
                if base.startswith(("libc.so", "libc-", "ld-linux", "ld-")):
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    out.append((lo, hi))
    return out


class CpuReader:
    """Field 39 of /proc/PID/task/TID/stat, the CPU a thread last ran on, read once per fault:
    the files stay open and are re-read with pread (an open per fault cost more than the rest
    of the record)."""

    def __init__(self) -> None:
        self._fds: dict[tuple[int, int], int] = {}

    def __call__(self, pid: int, tid: int) -> int | None:
        fd = self._fds.get((pid, tid))
        try:
            if fd is None:
                fd = self._fds[(pid, tid)] = os.open(f"/proc/{pid}/task/{tid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(fd, 1024, 0).decode(errors="replace")
        except OSError:
            self.forget(pid, tid)
            return None
        return _cpu_field(text)

    def forget(self, pid: int, tid: int) -> None:
        fd = self._fds.pop((pid, tid), None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for key in list(self._fds):
            self.forget(*key)


def last_cpu(pid: int, tid: int) -> int | None:
    """Field 39 of /proc/PID/task/TID/stat: the CPU the thread last ran on."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return _cpu_field(text)


def _cpu_field(text: str) -> int | None:
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[36])  # field 39 overall; fields here start at field 3
    except (IndexError, ValueError):
        return None
