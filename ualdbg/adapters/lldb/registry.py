"""Which hooks serve which lldb debugger: lldb's callbacks get a thread or a frame, never the
hooks, and find them here by the debugger's ID (hooks.py fills it; the breakpoint callbacks,
thread plans and the stop hook of breakpoints.py, faultstep.py, stophook.py and stepping.py
read it), as what `Hooks` declares."""
from __future__ import annotations

from typing import Any, Protocol

import lldb  # type: ignore[import-not-found]


class Hooks(Protocol):
    """What lldb's callbacks use of hooks.py's LldbHooks."""

    installed: bool
    step_control: Any  # stepping.LldbStepControl
    agent_host: Any  # agenthost.LldbAgentHost (its `hit`: breakpoints.watch_hit)

    @property
    def sites_active(self) -> bool: ...

    def see_process(self, process: lldb.SBProcess) -> str | None: ...

    def on_arm_point(self, thread: lldb.SBThread) -> None: ...

    def on_site(self, thread: lldb.SBThread, kind: str) -> bool: ...

    def on_exit_call(self, status: int) -> None: ...

    def on_stop(self, thread: lldb.SBThread, stream: lldb.SBStream) -> bool: ...

    def fault_stepped(self, thread: lldb.SBThread) -> None: ...

    def left(self, thread: lldb.SBThread) -> None: ...

    def turned_leave(self, tid: int) -> bool: ...


HOOKS: dict[int, Hooks] = {}  # lldb debugger ID -> the hooks.LldbHooks of its session


def hooks_of(debugger: lldb.SBDebugger) -> Hooks | None:
    return HOOKS.get(debugger.GetID())


def hooks_of_thread(thread: lldb.SBThread) -> Hooks | None:
    return hooks_of(thread.GetProcess().GetTarget().GetDebugger())
