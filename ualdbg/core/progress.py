"""Live progress of a batch trace: the driver inside the debugger writes `faults ignored
seconds` to a small file, the CLI polls it for its display (MONITOR ALIGN's fault rate)."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

Callback = Callable[[int, int, float], None]


class ProgressFile:
    """Written from inside the debugger, at most every `interval` seconds and once at the end
    (`force`), by an atomic rename: what the CLI polls never is half written."""

    interval = 0.2

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.last = 0.0

    def tick(self, session: Any, force: bool = False) -> None:
        if not self.path:
            return
        now = time.monotonic()
        if force or now - self.last >= self.interval:
            self.last = now
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.write(self.text(session))
            os.replace(tmp, self.path)

    def text(self, session: Any) -> str:
        return f"{session.buffer.total} {session.buffer.ignored} {session.buffer.duration:.3f}\n"


class SitesFile(ProgressFile):
    """The per-PC counts so far, for `ualdbg watch` (ualdbg.cli.attach.read_sites): the traps out of
    scope, then one `pc count` line per site."""

    interval = 0.25

    def text(self, session: Any) -> str:
        lines = [f"{session.buffer.ignored}"] + [f"{c.pc} {c.count}" for c in session.buffer.sites()]
        return "\n".join(lines) + "\n"


def poll(path: str, callback: Callback, done: threading.Event) -> None:
    """Read the file every 0.2 s until `done`, passing (faults, ignored, seconds) on."""
    while not done.wait(0.2):
        try:
            with open(path) as f:
                total, ignored, secs = f.read().split()
            callback(int(total), int(ignored), float(secs))
        except (OSError, ValueError):
            pass
