"""What /proc tells about a traced thread: its signal mask and the CPU it last ran on."""
from __future__ import annotations

from ..arch import SIGBUS


def sigbus_blocked(pid: int, tid: int) -> bool:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return bool(int(line.split()[1], 16) & (1 << (SIGBUS - 1)))
    except OSError:
        pass
    return False


def last_cpu(pid: int, tid: int) -> int | None:
    """Field 39 of /proc/PID/task/TID/stat: the CPU the thread last ran on."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[36])  # field 39 overall; fields here start at field 3
    except (IndexError, ValueError):
        return None
