"""What the in-process agent asks of gdb (engines/agentlink.py, AgentHost): the environment of
the next `run`, set through gdb's `exec-wrapper` (`env NAME=VALUE...`: with gdb's default
`startup-with-shell` the shell would otherwise load the agent first and its start-up take the
variables out before the program is exec'd; without a shell, gdb's own environment), and SIGBUS
passed to the program without a stop."""
from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

import gdb  # type: ignore[import-not-found]

from .signals import SignalHandles

_WRAPPER = re.compile(r'is "(.*)"\.\s*$', re.S)


def _show(setting: str) -> str:
    return str(gdb.execute(f"show {setting}", to_string=True))


class GdbAgentHost:
    """The agent's environment and signal settings in one gdb."""

    def __init__(self, signals: SignalHandles, installed: Any, drop_drain: Any) -> None:
        self.signals = signals
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
