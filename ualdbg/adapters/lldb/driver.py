"""The batch driver the CLI runs inside lldb: attach to the program the CLI holds just before its
exec (so its stdin, stdout, stderr and environment are the user's own, not a pseudo-terminal
lldb would make), arm, run it to its end, and write the JSON document and the exit status."""
from __future__ import annotations

import json
import os
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...commands.all import COMMANDS
from ...core.progress import ProgressFile
from ...engines.lifecycle import Kind
from ...engines.wrapper import debugger_keeps_running
from ...render.formats import FORMATS, save
from .install import install, installed

_DONE = (lldb.eStateExited, lldb.eStateDetached, lldb.eStateInvalid)


def _release(fd: int | None) -> None:
    """Let the held program go on to its exec."""
    if fd is None:
        return
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)


def main(debugger: lldb.SBDebugger, config_json: str) -> None:
    cfg = json.loads(config_json)
    status: dict[str, Any] = {"exit_status": None, "exit_signal": None, "error": None}
    release_fd = cfg.get("release_fd")
    session = install(debugger)
    host, hooks = installed(debugger)
    progress = ProgressFile(cfg.get("progress"))
    session.events.subscribe(Kind.FAULT_RECORDED, lambda decision: progress.tick(session))
    debugger.SetAsync(False)
    debugger_keeps_running()
    try:
        # The program's file, so that the arm point is chosen from its symbols; lldb shows the
        # held fork's executable after the attach, and the program's again after its exec.
        target = debugger.CreateTarget(cfg["program"])
        debugger.SetSelectedTarget(target)
        # The shell's `--debugger lldb` is the trap engine in lldb (the agent is the shell's own).
        args = ["--buffer", str(cfg["buffer"]), "--at", cfg["at"], "--engine", "trap"]
        if cfg.get("all_modules"):
            args.append("--all-modules")
        for m in cfg.get("modules", []):
            args += ["--module", m]
        COMMANDS[("trace", "start")].invoke(host, args)
        session.program.path = cfg["program"]
        session.program.args = cfg["args"]
        # What we attach to is the CLI's fork, not yet the program: arm at main (or at the
        # exec, for --at start) of what it execs, not now.
        hooks.arm_on_attach = False
        err = lldb.SBError()
        process = target.AttachToProcessWithID(lldb.SBListener(), int(cfg["attach_pid"]), err)
        if not err.Success() or not process.IsValid():
            raise RuntimeError(f"cannot attach to process {cfg['attach_pid']}: {err.GetCString()}")
        # SIGINT is the program's, as without lldb (a Ctrl-C typed at the terminal, or passed on by
        # the CLI): lldb suppresses it by default, as gdb's `handle SIGINT nopass` does.
        ret = lldb.SBCommandReturnObject()
        debugger.GetCommandInterpreter().HandleCommand("process handle -p true -s false -n false SIGINT", ret)
        _release(release_fd)
        release_fd = None
        while process.GetState() not in _DONE:
            # Stops kept by the stop hook are the program's own (a signal lldb stops at, the
            # exec): go on as the program would without a debugger, delivering its signals.
            err = process.Continue()
            if not err.Success() and process.GetState() not in _DONE:
                raise RuntimeError(f"cannot continue: {err.GetCString()}")
        hooks.sync()
    except Exception as exc:
        status["error"] = str(exc)
    finally:
        if release_fd is not None:
            os.close(release_fd)  # the held program sees EOF and gives up
    p = session.program
    status["exit_status"], status["exit_signal"] = p.exit_status, p.exit_signal
    progress.tick(session, force=True)
    save(session.result(), cfg["json"], FORMATS["json"])
    with open(cfg["status"], "w") as f:
        json.dump(status, f)
