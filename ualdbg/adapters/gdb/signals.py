"""gdb's `handle` settings of SIGBUS and SIGTRAP while ualdbg is installed: the user's own saved
at install and given back at `off`, and the `pass` setting each catchpoint condition chooses for
its own stop (gdb decides at resume time whether a thread's stop signal goes to the program)."""
from __future__ import annotations

import gdb  # type: ignore[import-not-found]

from ...isa.arch import SIGBUS, SIGTRAP

SIGNAL_NAMES = {SIGBUS: "SIGBUS", SIGTRAP: "SIGTRAP"}


def read_handle(sig: str) -> tuple[bool, bool, bool]:
    """(stop, print, pass) as `info signals SIG` shows them."""
    text = gdb.execute(f"info signals {sig}", to_string=True)
    for line in text.splitlines():
        if line.startswith(sig + " ") or line.startswith(sig + "\t"):
            f = line.split()
            return (f[1] == "Yes", f[2] == "Yes", f[3] == "Yes")
    raise gdb.error(f"cannot read gdb's settings for {sig}")


def set_handle(sig: str, stop: bool, prnt: bool, pas: bool) -> None:
    words = ("stop" if stop else "nostop", "print" if prnt else "noprint", "pass" if pas else "nopass")
    gdb.execute(f"handle {sig} {' '.join(words)}", to_string=True)


class SignalHandles:
    """The user's `handle` settings of ualdbg's two signals, and the `pass` state meanwhile."""

    def __init__(self) -> None:
        self.saved: dict[str, tuple[bool, bool, bool]] = {}
        # Current `handle SIG pass` state while installed: gdb decides at resume time whether a
        # thread's stop signal goes to the program, so each condition sets it for its signal.
        self.passing: dict[int, bool] = {SIGBUS: False, SIGTRAP: False}
        self.pass_on_resume = False
        # The in-process agent traces (engines/agentlink.py): SIGBUS goes to the program without
        # a stop; the user's own SIGBUS settings, to give back when it no longer does.
        self.through: tuple[bool, bool, bool] | None = None

    def take_over(self) -> None:
        """At install: save the user's settings and stop at both signals without passing them."""
        for sig in ("SIGBUS", "SIGTRAP"):
            self.saved[sig] = read_handle(sig)
        # PLATFORM.md: `noprint` silently means `nostop`; with `nopass` the program would
        # re-fault forever. Our catchpoint explains the signal; `nopass` drops it on resume.
        set_handle("SIGBUS", True, True, False)
        set_handle("SIGTRAP", True, True, False)
        self.passing = {SIGBUS: False, SIGTRAP: False}

    def users(self, signo: int) -> tuple[bool, bool, bool]:
        """(stop, print, pass) as the user had them for this signal (gdb's defaults for others)."""
        return self.saved.get(SIGNAL_NAMES.get(signo) or "", (True, True, True))

    def set_pass(self, signo: int, pas: bool) -> None:
        """Whether the signal of the stop being decided goes to the program when it resumes."""
        if signo in self.passing and pas != self.passing[signo]:
            set_handle(SIGNAL_NAMES[signo], True, True, pas)
            self.passing[signo] = pas

    def pass_through(self, on: bool, installed: bool) -> None:
        """The agent traces (on) or no longer does: SIGBUS `nostop noprint pass` (PLATFORM.md:
        noprint implies nostop; linux-nat then passes it at the ptrace stop without a word to
        gdb's core), or the user's settings back. While ualdbg's catchpoints are installed they
        own the setting; `give_back` applies this one then."""
        if on and self.through is None:
            self.through = self.saved.get("SIGBUS") or read_handle("SIGBUS")
            if not installed:
                set_handle("SIGBUS", False, False, True)
        elif not on and self.through is not None:
            user, self.through = self.through, None
            if not installed:
                set_handle("SIGBUS", *user)

    def give_back(self, stopped_at_fault: bool) -> None:
        """The user's settings again (`off`, once nothing of ualdbg's is pending). With a thread
        still stopped (`stopped_at_fault`), SIGBUS stays nopass until the program resumes."""
        for sig, (stop, prnt, pas) in self.saved.items():
            if sig == "SIGBUS" and self.through is not None:
                stop, prnt, pas = False, False, True  # the agent's; the user's kept in `through`
            if sig == "SIGBUS" and pas and stopped_at_fault:
                # A thread stopped at an #AC still holds SIGBUS as its stop signal; gdb drops it
                # at the next `continue` only while SIGBUS is nopass (clear_proceed_status), so
                # the user's `pass` comes back once the program has resumed.
                set_handle(sig, stop, prnt, False)
                self.pass_on_resume = True
            else:
                set_handle(sig, stop, prnt, pas)

    def resumed(self, installed: bool) -> None:
        """The program resumed: the user's SIGBUS `pass` that give_back held back."""
        if self.pass_on_resume and not installed:
            self.pass_on_resume = False
            stop, prnt, pas = self.saved["SIGBUS"] if self.through is None else (False, False, True)
            set_handle("SIGBUS", stop, prnt, pas)
