"""What the in-process agent asks of gdb (engines/agentlink.py, AgentHost): the environment of
the next `run`, set through gdb's `exec-wrapper` (`env NAME=VALUE...`: with gdb's default
`startup-with-shell` the shell would otherwise load the agent first and its start-up take the
variables out before the program is exec'd; without a shell, gdb's own environment), and SIGBUS
passed to the program without a stop; breakpoints that never stop, for the threads it arms
once they are out of pthread_create or born (engines/threadbirth.py)."""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.target import Target
from .console import warn
from .signals import SignalHandles
from .target import GdbTarget

_WRAPPER = re.compile(r'is "(.*)"\.\s*$', re.S)


def _show(setting: str) -> str:
    return str(gdb.execute(f"show {setting}", to_string=True))


class WatchPoint(gdb.Breakpoint):
    """An internal breakpoint at one address that calls `on_hit` and never stops."""

    def __init__(self, addr: int, target: GdbTarget, on_hit: Callable[[Target, int, int], None]) -> None:
        super().__init__(f"*{addr:#x}", internal=True)
        self.silent = True
        self.addr, self.target, self.on_hit = addr, target, on_hit

    def stop(self) -> bool:
        try:
            with self.target.event():
                self.on_hit(self.target, self.target.current_tid(), self.addr)
        except Exception as exc:  # never let a hook error stop the user's program
            warn(f"arming a new thread failed: {exc}")
        return False


class GdbAgentHost:
    """The agent's environment and signal settings in one gdb."""

    def __init__(self, signals: SignalHandles, installed: Any, drop_drain: Any, target: GdbTarget) -> None:
        self.signals = signals
        self.target = target
        self.watches: list[WatchPoint] = []
        self.installed = installed  # () -> whether ualdbg's catchpoints own the signal settings
        # () -> None: the SIGBUS catchpoint `off` kept to swallow faults other threads had
        # pending (hooks.uninstall) goes: it would stop the program at the agent's faults
        # (it did, in 2 of 5 runs of break, off, trace start on examples/threads).
        self.drop_drain = drop_drain
        self.user_wrapper: str | None = None  # the user's exec-wrapper while ours is set
        self.env_set = False  # ours are in gdb's environment (no startup shell)

    def launch_environment(self) -> dict[str, str]:
        text = _show("environment LD_PRELOAD")
        m = re.match(r"LD_PRELOAD = (.*)$", text.strip())
        return {"LD_PRELOAD": m.group(1)} if m else {}

    def set_launch_environment(self, values: Mapping[str, str | None]) -> None:
        ours = {k: v for k, v in values.items() if v is not None}
        if not ours or all(k == "LD_PRELOAD" for k in ours):
            # The user's own again: LD_PRELOAD as it was (agentlink keeps the user's values).
            if self.env_set:
                for k, v in values.items():
                    gdb.execute(f"set environment {k}={v}" if v is not None else f"unset environment {k}",
                                to_string=True)
                self.env_set = False
            if self.user_wrapper is not None:
                gdb.execute(f"set exec-wrapper {self.user_wrapper}" if self.user_wrapper else "unset exec-wrapper",
                            to_string=True)
                self.user_wrapper = None
            return
        if "on" not in _show("startup-with-shell"):
            # No shell to run first: gdb's own environment is the program's. (gdb 13 loses
            # track of the start-up with an exec-wrapper and no shell: "During startup program
            # exited normally", the agent never loaded: tests/lldb/test_lldb_parity.py.)
            for k, v in ours.items():
                gdb.execute(f"set environment {k}={v}", to_string=True)
            self.env_set = True
            return
        if self.user_wrapper is None:
            m = _WRAPPER.search(_show("exec-wrapper"))
            self.user_wrapper = m.group(1) if m else ""
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in ours.items())
        gdb.execute(f"set exec-wrapper env {env} {self.user_wrapper}".rstrip(), to_string=True)

    def pass_sigbus(self, on: bool) -> None:
        self.signals.pass_through(on, bool(self.installed()))
        if on:
            self.drop_drain()

    def watch_addresses(self, addrs: Sequence[int], on_hit: Callable[[Target, int, int], None]) -> None:
        self.unwatch_addresses()
        try:
            self.watches = [WatchPoint(a, self.target, on_hit) for a in addrs]
        except gdb.error as exc:
            self.unwatch_addresses()
            raise RuntimeError(str(exc)) from None

    def hold(self, tids: Sequence[int]) -> bool:
        """gdb owes no thread a step past its fault at an injection (Host.settle_faults steps the
        selected one itself): nothing to hold, and no way to hold one in all-stop mode but
        scheduler locking, which would stop every thread."""
        return not tids

    def unwatch_addresses(self) -> None:
        """Deleted from gdb's event loop: not from inside a breakpoint's stop(), where the last
        hit calls this (gdb forbids it there)."""
        old, self.watches = self.watches, []

        def delete() -> None:
            for bp in old:
                if bp.is_valid():
                    bp.delete()

        if not self.target.can_call_functions():  # inside a stop() or a condition
            gdb.post_event(delete)
        else:
            delete()
