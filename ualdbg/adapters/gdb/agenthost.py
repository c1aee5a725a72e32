"""What the in-process agent asks of gdb (engines/agentlink.py, AgentHost): the environment of
the next `run`, set through gdb's `exec-wrapper` (`env NAME=VALUE...`: with gdb's default
`startup-with-shell` the shell would otherwise load the agent first and its start-up take the
variables out before the program is exec'd), and SIGBUS passed to the program without a stop."""
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

    def launch_environment(self) -> dict[str, str]:
        text = _show("environment LD_PRELOAD")
        m = re.match(r"LD_PRELOAD = (.*)$", text.strip())
        return {"LD_PRELOAD": m.group(1)} if m else {}

    def set_launch_environment(self, values: Mapping[str, str | None]) -> None:
        ours = {k: v for k, v in values.items() if v is not None}
        if self.user_wrapper is None:
            m = _WRAPPER.search(_show("exec-wrapper"))
            self.user_wrapper = m.group(1) if m else ""
        if not ours or all(k == "LD_PRELOAD" for k in ours):
            # The user's own again (the agent's release gives back LD_PRELOAD as it was: gdb's
            # environment never held ours).
            gdb.execute(f"set exec-wrapper {self.user_wrapper}" if self.user_wrapper else "unset exec-wrapper",
                        to_string=True)
            self.user_wrapper = None
            return
        shell = "on" in _show("startup-with-shell")
        # Without a shell gdb splits the wrapper at spaces and quotes nothing; the agent's
        # values hold no space (engines/agent.py quotes them), only `;` for a shell to see.
        words = [f"{k}={v}" for k, v in ours.items()]
        env = " ".join(shlex.quote(w) for w in words) if shell else " ".join(words)
        gdb.execute(f"set exec-wrapper env {env} {self.user_wrapper}".rstrip(), to_string=True)

    def pass_sigbus(self, on: bool) -> None:
        self.signals.pass_through(on, bool(self.installed()))
        if on:
            self.drop_drain()
