"""What the in-process agent asks of lldb (engines/agentlink.py, AgentHost): the environment of
the next `process launch` (target.env-vars; lldb launches the program itself, no shell in
between) and SIGBUS passed to the program without a stop."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

import lldb  # type: ignore[import-not-found]

from .interp import command
from .signals import SigbusHandling

_ROW = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)


class LldbAgentHost:
    """The agent's environment and signal settings in one lldb debugger."""

    def __init__(self, debugger: lldb.SBDebugger, sigbus: SigbusHandling, process: Callable[[], lldb.SBProcess],
                 installed: Callable[[], bool]) -> None:
        self.debugger = debugger
        self.sigbus = sigbus
        self.process = process
        self.installed = installed

    def _env_vars(self) -> dict[str, str]:
        return dict(_ROW.findall(command(self.debugger, "settings show target.env-vars")))

    def launch_environment(self) -> dict[str, str]:
        own = self._env_vars()
        value = own.get("LD_PRELOAD", os.environ.get("LD_PRELOAD"))  # target.inherit-env: lldb's own
        return {"LD_PRELOAD": value} if value is not None else {}

    def set_launch_environment(self, values: Mapping[str, str | None]) -> None:
        have = self._env_vars()
        for name, value in values.items():
            if name in have:
                command(self.debugger, f"settings remove target.env-vars {name}")
            if value is not None and not (name == "LD_PRELOAD" and value == os.environ.get("LD_PRELOAD")
                                          and name not in have):
                command(self.debugger, f'settings append target.env-vars "{name}={value}"')

    def pass_sigbus(self, on: bool) -> None:
        self.sigbus.pass_through(self.process(), on, self.installed())
