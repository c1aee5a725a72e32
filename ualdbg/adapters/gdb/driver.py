"""The batch driver the CLI runs inside gdb: arm, run the program to its end (delivering its own
fatal signals as gdb would not in batch mode), write the JSON document and the exit status."""
from __future__ import annotations

import json
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.progress import ProgressFile
from ...engines.lifecycle import Kind
from ...render.jsondoc import build_document, dump
from .install import install, installed


def main(config_json: str) -> None:
    cfg = json.loads(config_json)
    session = install()
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
    from ...commands.all import COMMANDS

    # Run as it would alone: the program's own signals go to it without a stop (`all` leaves
    # out SIGTRAP and SIGINT, which gdb keeps: a program's own int3 or raise(SIGTRAP) is not
    # delivered under the gdb engine; the agent engine delivers them).
    gdb.execute("handle all nostop noprint pass", to_string=True)
    COMMANDS[("trace", "start")].invoke(host, args)
    session.program.path = cfg["program"]
    session.program.args = cfg["args"]
    status: dict[str, Any] = {"exit_status": None, "exit_signal": None, "error": None}
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
    code = gdb.convenience_variable("_exitcode")
    sig = gdb.convenience_variable("_exitsignal")
    status["exit_status"] = None if code is None else int(code)
    status["exit_signal"] = None if sig is None else int(sig)
    session.program.exit_status = status["exit_status"]
    session.program.exit_signal = status["exit_signal"]
    progress.tick(session, force=True)
    dump(build_document(session.result()), cfg["json"])
    with open(cfg["status"], "w") as f:
        json.dump(status, f)
