"""The batch driver `ualdbg trace --pid` runs inside gdb: attach to a running process, arm every
thread, let it run until the CLI asks for the end (a SIGSTOP it sends to the process, which gdb
takes and never delivers) or the process exits, then disarm, detach and write the JSON."""
from __future__ import annotations

import json
import os
import signal
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.progress import ProgressFile, SitesFile
from ...engines.faultpath import Decision
from ...engines.lifecycle import Kind
from ...render.jsondoc import build_document, dump
from .install import install, installed

SI_TKILL = -6


def _our_stop(cli_pid: int) -> bool:
    """The current stop is the SIGSTOP the CLI sent to end the trace (tgkill from its pid)."""
    try:
        si = gdb.parse_and_eval("$_siginfo")
        return (int(si["si_signo"]) == signal.SIGSTOP and int(si["si_code"]) == SI_TKILL
                and int(si["_sifields"]["_kill"]["si_pid"]) == cli_pid)
    except gdb.error:
        return False


def _write(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(config_json: str) -> None:
    cfg = json.loads(config_json)
    session = install()
    host, hooks = installed()
    progress = ProgressFile(cfg.get("progress"))
    sites = SitesFile(cfg.get("sites"))

    def recorded(decision: Decision) -> None:
        progress.tick(session)
        sites.tick(session)

    session.events.subscribe(Kind.FAULT_RECORDED, recorded)
    hooks.driver = True
    status: dict[str, Any] = {"exit_status": None, "exit_signal": None, "error": None, "detached": False}
    pid = int(cfg["attach_pid"])
    try:
        gdb.execute(f"attach {pid}", to_string=True)
    except gdb.error as exc:
        status["error"] = str(exc)
        _write(cfg["status"], status)
        return
    args = ["--buffer", str(cfg["buffer"])]
    if cfg.get("all_modules"):
        args.append("--all-modules")
    for m in cfg.get("modules", []):
        args += ["--module", m]
    from ...commands.all import COMMANDS

    # The program's own signals go to it without a stop, as when it runs alone; the CLI's
    # SIGSTOP ends the trace and is not delivered (a delivered one would stop the process).
    gdb.execute("handle all nostop noprint pass", to_string=True)
    gdb.execute("handle SIGSTOP stop print nopass", to_string=True)  # noprint would imply nostop (PLATFORM.md)
    gdb.execute("handle SIGINT nostop noprint pass", to_string=True)
    COMMANDS[("trace", "start")].invoke(host, args)
    session.program.path = cfg["program"]
    session.program.args = cfg["args"]
    session.program.pid = pid
    progress.tick(session, force=True)
    sites.tick(session, force=True)
    with open(cfg["attached"], "w") as f:
        f.write(f"{len(session.engine.armed)}\n")
    try:
        while gdb.selected_inferior().pid:
            hooks.finish_slot()
            gdb.execute("continue", to_string=True)
            if gdb.selected_inferior().pid and _our_stop(int(cfg["cli_pid"])):
                break
    except gdb.error as exc:
        status["error"] = str(exc)
    if gdb.selected_inferior().pid:
        COMMANDS[("trace", "stop")].invoke(host, [])
        gdb.execute("ualdbg off", to_string=True)
        gdb.execute("detach", to_string=True)
        status["detached"] = True
    else:
        code = gdb.convenience_variable("_exitcode")
        sig = gdb.convenience_variable("_exitsignal")
        status["exit_status"] = None if code is None else int(code)
        status["exit_signal"] = None if sig is None else int(sig)
        session.program.exit_status = status["exit_status"]
        session.program.exit_signal = status["exit_signal"]
    progress.tick(session, force=True)
    sites.tick(session, force=True)
    dump(build_document(session.result()), cfg["json"])
    _write(cfg["status"], status)
