"""The batch driver the CLI runs inside gdb: arm, run the program to its end (delivering its own
fatal signals as gdb would not in batch mode), write the JSON document and the exit status."""
from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.progress import ProgressFile
from ...engines.lifecycle import Kind
from ...engines.session import Session
from ...engines.wrapper import debugger_keeps_running
from ...render.formats import FORMATS, save
from .install import install, installed

# gdb's words when the program (here: the exec helper's exec of it) ends before it is running.
_STARTUP = re.compile(r"During startup program (?:exited with code (\d+)|terminated with signal (SIG\w+))")


def main(config_json: str) -> None:
    """Never raises: whatever goes wrong is one line in the status file (the CLI prints it), not
    a Python traceback in gdb's output."""
    cfg = json.loads(config_json)
    status: dict[str, Any] = {"exit_status": None, "exit_signal": None, "error": None}
    session = None
    try:
        session = install()
        _run(session, cfg, status)
    except Exception as exc:  # a bug or a hostile binary: one line for the CLI
        status["error"] = status["error"] or f"{type(exc).__name__}: {exc}"
    if session is not None:
        # What was recorded is written whatever ended the run (as the lldb driver does): an
        # interrupted trace is still a trace.
        try:
            _ended(session, status)
            save(session.result(), cfg["json"], FORMATS["json"])
        except Exception as exc:
            status["error"] = status["error"] or f"{type(exc).__name__}: {exc}"
    with open(cfg["status"], "w") as f:
        json.dump(status, f)


def _ended(session: Session, status: dict[str, Any]) -> None:
    """How the program ended, as gdb saw it, into the status and the session."""
    code = gdb.convenience_variable("_exitcode")
    sig = gdb.convenience_variable("_exitsignal")
    if code is not None:
        status["exit_status"] = int(code)
    if sig is not None:
        status["exit_signal"] = int(sig)
    session.program.exit_status = status["exit_status"]
    session.program.exit_signal = status["exit_signal"]


def _run(session: Session, cfg: dict[str, Any], status: dict[str, Any]) -> None:
    host, hooks = installed()
    progress = ProgressFile(cfg.get("progress"))
    session.events.subscribe(Kind.FAULT_RECORDED, lambda decision: progress.tick(session))
    hooks.driver = True  # this loop takes the steps after delay-slot faults (hooks.finish_slot)
    args = ["--buffer", str(cfg["buffer"]), "--at", cfg["at"]]
    if cfg.get("all_modules"):
        args.append("--all-modules")
    for m in cfg.get("modules", []):
        args += ["--module", m]
    if cfg.get("step"):
        args += cfg["step"]  # the step engine for a program under qemu (runner._step_args)
    else:
        args += ["--engine", "trap"]  # the shell's --engine trap / --debugger gdb: the agent is its own
    from ...commands.all import COMMANDS

    # Run as it would alone: the program's own signals go to it without a stop (`all` leaves
    # out SIGTRAP and SIGINT, which gdb keeps: a program's own int3 or raise(SIGTRAP) is not
    # delivered under the gdb engine; the agent engine delivers them). SIGINT is the program's
    # too: a Ctrl-C typed at the terminal (gdb gives the program the terminal) or passed on by
    # the CLI reaches it, as without gdb.
    gdb.execute("handle all nostop noprint pass", to_string=True)
    gdb.execute("handle SIGINT nostop noprint pass", to_string=True)
    # gdb gives the program the dispositions it was started with, whatever it does itself.
    debugger_keeps_running()
    wrapper = cfg.get("exec_wrapper")
    if wrapper:
        # The exec helper execs the program with the argv and environment of a direct run, and
        # gives it the parent-death signal: it dies with gdb, which dies with ualdbg.
        helper, spec = wrapper
        gdb.execute(f"set exec-wrapper {shlex.quote(helper)} -p {os.getpid()} {shlex.quote(spec)}", to_string=True)
    COMMANDS[("trace", "start")].invoke(host, args)
    session.program.path = cfg["program"]
    session.program.args = cfg["args"]
    try:
        if cfg.get("remote"):
            # qemu-user holds the program at its first instruction until gdb connects.
            gdb.execute(f"target remote {cfg['remote']}", to_string=True)
            gdb.execute("continue", to_string=False)
        else:
            gdb.execute("run", to_string=False)
        # The program stopped without exiting: a signal of its own (SIGSEGV, SIGABRT...) that
        # gdb stops at by default. Deliver it as it would be without a debugger.
        while gdb.selected_inferior().pid:
            hooks.finish_slot()
            gdb.execute("continue", to_string=False)
    except gdb.error as exc:
        status["error"] = str(exc)
        start = _STARTUP.search(str(exc))
        if start is not None:  # the exec failed (the helper said why) or the program died at once
            status["error"] = None
            if start.group(1) is not None:
                status["exit_status"] = int(start.group(1))
            else:
                import signal

                status["exit_signal"] = int(getattr(signal, start.group(2), 0)) or None
    _ended(session, status)
    progress.tick(session, force=True)
