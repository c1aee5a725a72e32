"""Install the shared command declarations as lldb commands: a `ualdbg` command container (and
`ualdbg trace`), one command class per declaration, generated here from the same registry gdb
uses. Installing twice replaces (`-o`), never duplicates; settings are `ualdbg config`."""
from __future__ import annotations

import os
import shlex
import sys
import traceback
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...commands.all import COMMANDS, GROUPS, CommandSpec, HelpShown, UsageError
from ...engines.agentlink import AgentHost
from ...engines.session import Session
from ...engines.step import StepControl
from ...render.console import to_text
from .hooks import LldbHooks, hooks_of
from .target import LldbTarget


class _Host:
    """The Host a command runs against: the hooks of its debugger and the execution context
    lldb passed to this one command."""

    def __init__(self, hooks: LldbHooks, exe_ctx: lldb.SBExecutionContext | None) -> None:
        self.hooks = hooks
        self.session = hooks.session
        self.exe_ctx = exe_ctx

    def target(self) -> LldbTarget | None:
        process = self.exe_ctx.GetProcess() if self.exe_ctx is not None else None
        thread = self.exe_ctx.GetThread() if self.exe_ctx is not None else None
        if process is not None and not process.IsValid():
            process = None
        return self.hooks.target(process, thread)

    def install(self) -> None:
        self.hooks.install()

    def uninstall(self) -> None:
        self.hooks.uninstall()

    def step_control(self) -> StepControl:
        return self.hooks.step_control

    def agent_host(self) -> AgentHost:
        return self.hooks.agent_host

    def settle_faults(self) -> frozenset[int]:
        """lldb's threads stopped at a fault when ualdbg went off step past it when the process
        resumes (faultstep.py's leave): armed then (LldbHooks.left)."""
        return frozenset(self.session.stops.owed)

    def launch_info(self) -> tuple[str, list[str], tuple[str, ...], str]:
        """For `ualdbg stackcheck`: the loaded program, its `process launch` arguments and the
        environment lldb would give it (target.env-vars plus what it inherits, in lldb's order)."""
        target = self.exe_ctx.GetTarget() if self.exe_ctx is not None else None
        return launch_info(target if target is not None and target.IsValid() else self.hooks.debugger.GetSelectedTarget())


def launch_info(target: lldb.SBTarget) -> tuple[str, list[str], tuple[str, ...], str]:
    """The loaded program, its `process launch` arguments and the environment lldb's launch
    would give it (target.env-vars and the inherited environment, in lldb's own order, which
    is what its launch passes on: lldb keeps the environment in a hash map)."""
    path = target.GetExecutable().fullpath if target.IsValid() and target.GetExecutable().IsValid() else None
    if not path:
        raise UsageError("ualdbg: no program loaded: `target create PROG` first (or name one after --)")
    info = target.GetLaunchInfo()
    args = [str(info.GetArgumentAtIndex(i)) for i in range(info.GetNumArguments())]
    env = target.GetEnvironment()
    strings = tuple(f"{env.GetNameAtIndex(i)}={env.GetValueAtIndex(i)}" for i in range(env.GetNumValues()))
    return path, args, strings, "environment: what lldb's `process launch` would give (target.env-vars and inherited)"


def _color(debugger: lldb.SBDebugger) -> bool:
    return bool(debugger.GetUseColor()) and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def run_command(spec: CommandSpec, debugger: lldb.SBDebugger, command: str, exe_ctx: lldb.SBExecutionContext | None,
                result: lldb.SBCommandReturnObject) -> None:
    """Run one declared command; output to `result`, errors as one line."""
    hooks = hooks_of(debugger)
    if hooks is None:
        result.SetError("ualdbg is not installed in this debugger; `command script import lldb/ualdbg.py`")
        return
    try:
        hooks.sync()
        out = spec.invoke(_Host(hooks, exe_ctx), shlex.split(command or ""))
    except HelpShown as shown:
        result.AppendMessage(shown.text.rstrip("\n"))
        result.SetStatus(lldb.eReturnStatusSuccessFinishResult)
        return
    except UsageError as exc:
        result.SetError(str(exc))
        return
    except Exception as exc:
        if os.environ.get("UALDBG_DEBUG"):
            traceback.print_exc()
        result.SetError(f"ualdbg {' '.join(spec.path)}: {exc}")
        return
    out = [*hooks.notices, *out]
    hooks.notices.clear()
    if out:
        result.AppendMessage(to_text(out, color=_color(debugger)).rstrip("\n"))
    result.SetStatus(lldb.eReturnStatusSuccessFinishResult)


def _class_name(path: tuple[str, ...]) -> str:
    return "Command_" + "_".join(p.replace("-", "_") for p in path)


def _make_class(spec: CommandSpec) -> type:
    """A command class in lldb's style, whose help and behaviour come from the declaration."""

    class _Command:
        def __init__(self, debugger: lldb.SBDebugger, internal_dict: Any) -> None:
            pass

        def get_short_help(self) -> str:
            return spec.summary

        def get_long_help(self) -> str:
            return spec.help

        def __call__(self, debugger: lldb.SBDebugger, command: str, exe_ctx: lldb.SBExecutionContext,
                     result: lldb.SBCommandReturnObject) -> None:
            run_command(spec, debugger, command, exe_ctx, result)

    _Command.__name__ = _Command.__qualname__ = _class_name(spec.path)
    _Command.__doc__ = spec.summary
    return _Command


# lldb binds commands to classes by dotted name: each one is an attribute of this module.
for _path, _spec in COMMANDS.items():
    setattr(sys.modules[__name__], _class_name(_path), _make_class(_spec))


def _run(debugger: lldb.SBDebugger, line: str) -> None:
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(line, result)
    if not result.Succeeded():
        raise RuntimeError(f"`{line}` failed: {(result.GetError() or '').strip()}")


def _quote(text: str) -> str:
    # Newlines stay real: lldb keeps them inside a quoted argument, and prints `\n` as typed.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def install(debugger: lldb.SBDebugger) -> Session:
    """Install ualdbg into this lldb debugger; a second call keeps the existing session."""
    hooks = hooks_of(debugger)
    if hooks is None:
        hooks = LldbHooks(debugger, Session("lldb"))
    containers = sorted((p for p in GROUPS), key=len)
    for path in containers:
        doc = GROUPS[path]
        words = " ".join(("ualdbg",) + path)
        # lldb prints a container's long help after "Syntax: ": start it with the syntax.
        long_help = f"{words} <subcommand> [options]\n\n" + doc.partition("\n\n")[2]
        _run(debugger, f"command container add -o -h {_quote(doc.splitlines()[0])} -H {_quote(long_help)} {words}")
    for path in COMMANDS:
        words = " ".join(("ualdbg",) + path)
        _run(debugger, f"command script add -o -c {__name__}.{_class_name(path)} {words}")
    return hooks.session


def installed(debugger: lldb.SBDebugger) -> tuple[_Host, LldbHooks]:
    """The host and hooks of the installed session (for the batch driver)."""
    hooks = hooks_of(debugger)
    if hooks is None:
        raise RuntimeError("ualdbg is not installed in this debugger")
    return _Host(hooks, None), hooks
