"""`python -m ualdbg`, and the console script's entry (`run`): the shell's main (cli/shell.py),
and a quick end."""
from __future__ import annotations

import atexit
import os
import sys


class _QuickEnd:
    """The last exit handler: the process ends here, without tearing the interpreter down.
    Freeing every module and object it made took 20 to 25 ms of `ualdbg trace -- /bin/true`'s
    0.15 s here (issue 34), for a process about to end. It runs where Python's own end would
    free them: after the threads that are no daemon have ended and after every other exit handler
    (ualdbg's clean-ups: registered later, they run first), the standard streams flushed first.
    A stream that cannot be flushed (a reader that closed the pipe) leaves the end to Python."""

    def __init__(self) -> None:
        self.status = 1  # an exception out of main (Python printed it): Python's own status

    def __call__(self) -> None:
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except (OSError, ValueError):
            return
        os._exit(self.status & 0xFF)


def run() -> None:
    end = _QuickEnd()
    atexit.register(end)  # before ualdbg.cli is imported (its imports make classes): the last to run
    from .cli import main

    try:
        end.status = main()
    except SystemExit as exc:  # --help, a usage error: Python prints its message and ends as usual
        end.status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        raise
    sys.exit(end.status)


if __name__ == "__main__":
    run()
