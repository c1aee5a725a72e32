"""The batch driver `ualdbg trace --pid` runs inside gdb: attach to a running process, arm every
thread, let it run until the CLI asks for the end (a SIGSTOP it sends to the process, which gdb
takes and never delivers), the CLI dies (gdb sends itself that SIGSTOP) or the process exits,
then disarm, detach and write the JSON."""
from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.progress import ProgressFile, SitesFile
from ...engines.faultpath import Decision
from ...engines.lifecycle import Kind
from ...render.formats import FORMATS, save
from .install import install, installed

SI_TKILL = -6


def _our_stop(cli_pid: int) -> bool:
    """The current stop is the SIGSTOP that ends the trace: tgkill from the CLI, or from gdb
    itself when the CLI died (_CliWatch)."""
    try:
        si = gdb.parse_and_eval("$_siginfo")
        return (int(si["si_signo"]) == signal.SIGSTOP and int(si["si_code"]) == SI_TKILL
                and int(si["_sifields"]["_kill"]["si_pid"]) in (cli_pid, os.getpid()))
    except gdb.error:
        return False


class _CliWatch:
    """The process is not ours to kill, and must not stay traced with AC set when the CLI dies
    (SIGKILL, a crash): a thread waits for the CLI's end (a pidfd; gdb's Python threads run while
    the process does) and then sends the process the SIGSTOP that ends the trace, as the CLI
    would; the loop in main disarms and detaches. gdb is in a session of its own: no signal to the
    CLI's process group reaches it."""

    def __init__(self, cli_pid: int, pid: int) -> None:
        self.cli_pid, self.pid = cli_pid, pid
        self.lock = threading.Lock()
        self.over = False  # the trace is ending: no SIGSTOP from here any more
        self.fired = False
        threading.Thread(target=self._wait_and_end, name="ualdbg-cli-watch", daemon=True).start()

    def _wait_and_end(self) -> None:
        try:
            fd = os.pidfd_open(self.cli_pid)
        except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3, Python < 3.9)
            fd = None
        if fd is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not poller.poll(1000):
                pass
        else:
            while os.getppid() == self.cli_pid:
                time.sleep(0.2)
        import ctypes

        with self.lock:
            if not self.over:
                self.fired = True
                ctypes.CDLL(None, use_errno=True).syscall(234, self.pid, self.pid, signal.SIGSTOP)  # tgkill, as the CLI

    def end(self) -> None:
        with self.lock:
            self.over = True

    def after_detach(self) -> None:
        """The CLI's SIGSTOP and ours may both have been sent: the one gdb did not take would stop
        the process for good once detached."""
        if not self.fired:
            return
        for _ in range(25):  # the pending one is delivered once the process runs again
            try:
                with open(f"/proc/{self.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        os.kill(self.pid, signal.SIGCONT)
                        return
            except OSError:
                return
            time.sleep(0.02)


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
    # Ours alone now (ptrace admits one tracer): another ualdbg may have injected its agent and
    # detached before this attach; it keeps the process (one tracer per process).
    from ...agent.presence import tracing_agent
    from ...cli.attach import traced_line

    agent = tracing_agent(pid)
    if agent is not None:
        gdb.execute("detach", to_string=True)
        status.update(error=traced_line(pid, ualdbg=agent.ualdbg, injected=agent.injected), traced=True)
        _write(cfg["status"], status)
        return
    args = ["--buffer", str(cfg["buffer"]), "--engine", "trap"]  # the shell's --pid injects the agent itself
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
    watch = _CliWatch(int(cfg["cli_pid"]), pid)
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
    watch.end()
    if gdb.selected_inferior().pid:
        COMMANDS[("trace", "stop")].invoke(host, [])
        gdb.execute("ualdbg off", to_string=True)
        gdb.execute("detach", to_string=True)
        watch.after_detach()
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
    save(session.result(), cfg["json"], FORMATS["json"])
    _write(cfg["status"], status)
