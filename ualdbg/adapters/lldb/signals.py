"""lldb's `process handle SIGBUS` while ualdbg is installed: the user's own (what the target holds
and what the live process uses) saved at install and given back at `off`; meanwhile SIGBUS stops
silently and is not passed, except a bus error that is the program's own, passed per stop as the
user's setting says."""
from __future__ import annotations

import re

import lldb  # type: ignore[import-not-found]

from ...isa.arch import SIGBUS
from .interp import command

_HANDLE_ROW = re.compile(r"^SIGBUS\s+(true|false|not set)\s+(true|false|not set)\s+(true|false|not set)\s*$", re.M)


def _bool(text: str) -> bool | None:
    return None if text == "not set" else text == "true"


class SignalSettings:
    """The user's `process handle SIGBUS` (pass, stop, notify): what lldb holds for the target
    (None: not set, lldb's default applies) and, with a live process, what it uses now."""

    def __init__(self, target_mods: tuple[bool | None, ...], live: tuple[bool, bool, bool] | None) -> None:
        self.target_mods = target_mods
        self.live = live

    @classmethod
    def read(cls, debugger: lldb.SBDebugger, process: lldb.SBProcess | None) -> SignalSettings:
        out = command(debugger, "process handle -t SIGBUS")
        m = _HANDLE_ROW.search(out)
        mods = tuple(_bool(v) for v in m.groups()) if m else (None, None, None)
        live = None
        if process is not None and process.IsValid():
            sigs = process.GetUnixSignals()
            live = (not sigs.GetShouldSuppress(SIGBUS), sigs.GetShouldStop(SIGBUS), sigs.GetShouldNotify(SIGBUS))
        return cls(mods, live)

    def effective(self) -> tuple[bool, bool, bool]:
        """(pass, stop, notify) as lldb would act on them without ualdbg."""
        if self.live is not None:
            return self.live
        default = (True, True, True)  # lldb's Linux defaults for SIGBUS
        return tuple(d if v is None else v for v, d in zip(self.target_mods, default))  # type: ignore[return-value]

    def restore(self, debugger: lldb.SBDebugger, process: lldb.SBProcess | None) -> None:
        command(debugger, "process handle -c SIGBUS")
        words = [f"{flag} {'true' if v else 'false'}" for flag, v in zip(("-p", "-s", "-n"), self.target_mods) if v is not None]
        if words:
            command(debugger, f"process handle {' '.join(words)} SIGBUS")
        if process is not None and process.IsValid():
            pas, stop, notify = self.live if self.live is not None else self.effective()
            sigs = process.GetUnixSignals()
            sigs.SetShouldSuppress(SIGBUS, not pas)
            sigs.SetShouldStop(SIGBUS, stop)
            sigs.SetShouldNotify(SIGBUS, notify)


class SigbusHandling:
    """SIGBUS as ualdbg has lldb handle it, and the user's settings it gives back."""

    def __init__(self, debugger: lldb.SBDebugger) -> None:
        self.debugger = debugger
        self.saved: SignalSettings | None = None
        self.deferred: SignalSettings | None = None  # the user's settings, for when they have
        self.suppressing = True  # current `process handle SIGBUS -p` is false
        # The in-process agent traces (engines/agentlink.py): SIGBUS passed without a stop. The
        # user's settings meanwhile, to give back when it no longer does.
        self.through: SignalSettings | None = None

    def take_over(self, process: lldb.SBProcess) -> None:
        self.saved = SignalSettings.read(self.debugger, process)
        # lldb's `-n false` with `-s true` still stops; our stop hook explains the stop or
        # auto-continues it, and `-p false` drops our SIGBUS on resume (a real bus error of the
        # program is passed: each stop sets -p as the user's setting says).
        command(self.debugger, "process handle -s true -p false -n false SIGBUS")
        self.suppressing = True

    def users(self) -> tuple[bool, bool, bool]:
        """(pass, stop, notify) the user has for a SIGBUS that is not ualdbg's."""
        return self.saved.effective() if self.saved is not None else (True, True, True)

    def suppress(self, process: lldb.SBProcess, suppress: bool) -> None:
        """Whether this stop's SIGBUS is dropped when the thread resumes."""
        if suppress != self.suppressing:
            process.GetUnixSignals().SetShouldSuppress(SIGBUS, suppress)
            self.suppressing = suppress

    def new_process(self) -> None:
        self.suppressing = True  # a new process starts with the target's `-p false`

    def give_back(self, process: lldb.SBProcess, owed: bool) -> None:
        """At `off`: the user's settings, for the target and the live process; while threads
        still `owed` their fault step over it, SIGBUS stays dropped for the process."""
        if self.saved is not None:
            self.saved.restore(self.debugger, process)
            if self.through is not None:  # the agent traces: SIGBUS is its, passed without a stop
                command(self.debugger, "process handle -s false -n false -p true SIGBUS")
                if process is not None and process.IsValid():
                    sigs = process.GetUnixSignals()
                    sigs.SetShouldStop(SIGBUS, False)
                    sigs.SetShouldNotify(SIGBUS, False)
                    sigs.SetShouldSuppress(SIGBUS, False)
            if owed:
                self.deferred = self.saved
                process.GetUnixSignals().SetShouldSuppress(SIGBUS, True)
        self.saved = None

    def pass_through(self, process: lldb.SBProcess | None, on: bool, installed: bool) -> None:
        """The agent traces (on): `process handle -s false -n false -p true SIGBUS` (lldb then
        lists SIGBUS in QPassSignals: lldb-server passes it at the ptrace stop without telling
        lldb); or the user's settings back. While a thread still owes its fault step (`off`
        just now), SIGBUS stays dropped for the process until it has (`owed_paid`)."""
        if on and self.through is None:
            self.through = self.saved if self.saved is not None else SignalSettings.read(self.debugger, process)
            if not installed:
                command(self.debugger, "process handle -s false -n false -p true SIGBUS")
                if process is not None and process.IsValid():
                    sigs = process.GetUnixSignals()
                    sigs.SetShouldStop(SIGBUS, False)
                    sigs.SetShouldNotify(SIGBUS, False)
                    sigs.SetShouldSuppress(SIGBUS, self.deferred is not None)
        elif not on and self.through is not None:
            user, self.through = self.through, None
            if not installed:
                user.restore(self.debugger, process)

    def owed_paid(self, process: lldb.SBProcess) -> None:
        """The last thread owed a fault at `off` stepped over it: the user's pass setting for
        the process, unless ualdbg was armed again meanwhile."""
        if self.deferred is not None:
            if self.saved is None:  # not re-armed meanwhile
                pas = self.deferred.effective()[0] if self.through is None else True
                process.GetUnixSignals().SetShouldSuppress(SIGBUS, not pas)
            self.deferred = None
