"""Tracing a process that is already running (`ualdbg trace --pid`, `check --pid`): why it cannot
be attached to, in one line, before anything touches it; then the agent is injected into it
(ualdbg.cli.inject: ptrace, dlopen, AC set in every thread, detach) and reports through its shared
buffers as at launch, until Ctrl-C, --duration or the process's exit, when it is disarmed and made
inert. Where it cannot be injected (a static binary, seccomp, no dlopen in libc, no compiler),
one line says so and gdb attaches in batch mode instead (adapters/gdb/attach_driver.py), arms
every thread and disarms and detaches at the end. Either way the process is stopped only while
the agent is injected or removed (or gdb attaches and arms it)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..agent import rundir
from ..agent.presence import creating_note
from ..core.document import read_document
from ..core.external import find_tool
from ..core.progress import poll
from ..core.sections import AttachState
from ..engines.procfs import comm, same_pid_namespace, status_field
from ..engines.runner import RunRequest, RunResult, ToolError, finished_status, gdb_batch
from .watch import Sample

YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"  # absent without the Yama LSM: attach as ptrace allows


def _is_ancestor(ancestor: int, pid: int) -> bool:
    while pid > 1:
        ppid = status_field(pid, "PPid")
        if ppid is None:
            return False
        pid = int(ppid)
        if pid == ancestor:
            return True
    return False


def attach_problem(pid: int) -> str | None:
    """Why `pid` cannot be traced, as the one line the user gets; None when it can be tried."""
    if pid == os.getpid():
        return f"process {pid} is ualdbg itself"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"no process {pid}"
    except PermissionError:
        return f"process {pid} ({comm(pid)}) belongs to another user: only root may trace it"
    state = status_field(pid, "State") or ""
    if state.startswith("Z"):
        return f"process {pid} ({comm(pid)}) has exited (a zombie): nothing to trace"
    tracer = int(status_field(pid, "TracerPid") or 0)
    if tracer:
        return traced_line(pid, tracer)
    try:
        with open(YAMA_SCOPE) as f:
            scope = int(f.read().strip() or 0)
    except (OSError, ValueError):
        scope = 0
    if scope >= 3:
        return f"kernel.yama.ptrace_scope is {scope}: no process may be attached to (ptrace_scope 3 cannot be lowered without a reboot)"
    if scope == 2 and os.geteuid() != 0:
        return f"kernel.yama.ptrace_scope is 2: only root may attach to process {pid}"
    if scope == 1 and os.geteuid() != 0 and not _is_ancestor(os.getpid(), pid):
        return (f"kernel.yama.ptrace_scope is 1: only a parent may attach to process {pid}; run as root, or "
                f"`sudo sysctl kernel.yama.ptrace_scope=0`")
    return None


def _program_of(pid: int) -> tuple[str, list[str]]:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = comm(pid)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        argv = []
    return exe, argv[1:]


def gdb_attach_command(cfg: dict[str, Any], log: str) -> list[str]:
    return [
        *gdb_batch(find_tool("gdb"), log),
        "-ex", f"python from ualdbg.adapters.gdb.attach_driver import main; main({json.dumps(json.dumps(cfg))})",
    ]


class _Ender:
    """Ctrl-C, SIGTERM or SIGHUP to ualdbg, or --duration: end the trace (not the process)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.by: str | None = None
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self._old[signo] = signal.signal(signo, self._handle)

    def _handle(self, signo: int, _frame: Any) -> None:
        if self.by is None:
            self.by = signal.Signals(signo).name
        self.requested.set()

    def restore(self) -> None:
        for signo, old in self._old.items():
            signal.signal(signo, old)


def read_sites(path: str) -> tuple[dict[int, int], int] | None:
    """The attach driver's SitesFile: per-PC counts in scope and the traps out of scope."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
        sites = {int(pc): int(n) for pc, n in (line.split() for line in lines[1:] if line.strip())}
        return sites, int(lines[0])
    except (OSError, ValueError):
        return None


def run_attached(req: RunRequest, on_progress: Callable[[int, int, float], None] | None = None,
                 ready: Callable[[str], None] | None = None, *, on_sample: Callable[[Sample], None] | None = None,
                 interval: float = 1.0, quit: threading.Event | None = None,
                 say: Callable[[str], None] | None = None) -> RunResult:
    """Trace the running process req.pid: the agent injected into it unless req.engine is "trap"
    or it cannot be (then `say` gets the one line saying why, and gdb's trap engine traces it).
    Another tracer (a debugger, another ualdbg, its agent armed) is never shared: ToolError."""
    assert req.pid is not None
    problem = attach_problem(req.pid)
    if problem:
        raise ToolError(problem)
    _clear_agent_left(req.pid, say)
    if req.engine != "trap":
        from ..engines.agent import AgentUnavailable, agent_library, injection_problem
        from .inject import InjectError, Traced

        why = injection_problem(req.pid)
        lib = None
        if why is None:
            try:
                lib = agent_library()
            except AgentUnavailable as exc:
                why = str(exc)
        if lib is not None:
            try:
                return run_injected(req, lib, on_progress, ready, on_sample=on_sample, interval=interval, quit=quit)
            except Traced as exc:  # another tracer won the race: never fall back to gdb
                raise ToolError(traced_line(exc.pid, exc.tracer, exc.ualdbg, exc.injected)) from None
            except InjectError as exc:
                why = f"injecting the agent failed: {exc}"
        if say is not None:
            say(f"ualdbg: --pid: {why}; tracing with the trap engine under gdb instead")
    return run_gdb(req, on_progress, ready, on_sample=on_sample, interval=interval, quit=quit)


def traced_line(pid: int, tracer: int = 0, ualdbg: int = 0, injected: bool = True) -> str:
    """The one line for a process someone else traces: a ptrace tracer, or a ualdbg through its
    agent (0: which one is not known)."""
    if tracer:
        return f"process {pid} ({comm(pid)}) is already traced by process {tracer} ({comm(tracer)}): detach that first"
    how = "the agent injected" if injected else "which started it"
    who = f" (process {ualdbg}, {how})" if ualdbg else " (its agent is armed in it)"
    return f"process {pid} ({comm(pid)}) is already traced by ualdbg{who}: end that trace first"


def _clear_agent_left(pid: int, say: Callable[[str], None] | None) -> None:
    """Refuse (ToolError) a process a live ualdbg traces through the agent; remove the agent a
    killed ualdbg injected, whether it disarmed itself already (it saw its ualdbg die) or is
    still armed (one that could not watch: from another pid namespace, or before issue 29), with
    one line to `say`."""
    from ..agent.presence import orphaned_agent, tracing_agent
    from .inject import Injected, InjectError, remove

    left = tracing_agent(pid)
    if left is None:
        left = orphaned_agent(pid)
        if left is None or not left.file:
            return  # (an orphan whose file cannot be read: the agent refuses nothing for it, and it stays inert)
        how, killed = "which had disarmed itself", left.orphan
    else:
        if not _gone(left.ualdbg) or not left.file:
            raise ToolError(traced_line(pid, ualdbg=left.ualdbg, injected=left.injected))
        if not left.injected:  # preloaded: its wrappers are bound into the program, not removable from outside
            raise ToolError(f"process {pid} ({comm(pid)}) runs with the agent of a killed ualdbg "
                            f"(process {left.ualdbg}) armed since its start: restart it to trace it")
        how, killed = "left armed", left.ualdbg
    try:
        remove(Injected(pid, left.file, left.bias, 0, 0.0))
    except InjectError as exc:
        raise ToolError(f"process {pid}: cannot remove the agent a killed ualdbg (process {killed}) "
                        f"left: {exc}") from None
    if say is not None:
        say(f"ualdbg: --pid: removed the agent a killed ualdbg (process {killed}) left in process {pid}, {how}")


def _gone(pid: int) -> bool:
    state = status_field(pid, "State")
    return state is None or state.startswith(("Z", "X"))


def run_injected(req: RunRequest, lib: str, on_progress: Callable[[int, int, float], None] | None = None,
                 ready: Callable[[str], None] | None = None, *, on_sample: Callable[[Sample], None] | None = None,
                 interval: float = 1.0, quit: threading.Event | None = None) -> RunResult:
    """The agent injected into req.pid (ualdbg.cli.inject) for the window; its buffers read as at
    launch (engines.agent: the same reader, sessions and document). Raises InjectError, with
    nothing left in the process, when the injection fails."""
    from ..engines.agent import (
        ENV_CONFIG,
        AgentRun,
        AgentUnavailable,
        Progress,
        agent_environment,
        document,
        load_images,
        run_directory,
    )
    from .inject import InjectError, agent_mapped, inject, remove
    from .watch import AgentSampler

    assert req.pid is not None
    pid = req.pid
    exe, args = _program_of(pid)
    # Hot sites are patched as at launch; the detach puts the program's code back as it was
    # (agent/src/agent/patch.c, patch_release).
    run = AgentRun([exe, *args], all_modules=req.all_modules, modules=list(req.modules), buffer=req.buffer,
                   patch_after=req.patch_after)
    try:
        st = os.stat(f"/proc/{pid}")
        # Root tracing another user's process: it loads a root-owned copy of the agent (ualdbg's
        # cache may be unreadable to it) and writes its buffers in the one subdirectory it may
        # write in, which it cannot swap (agent/rundir.py, docs/SECURITY.md).
        mine = st.st_uid == os.geteuid()
        if not mine:
            lib = rundir.public_copy(lib)
        run_dir = run_directory() if mine else run_directory(for_uid=st.st_uid, for_gid=st.st_gid)
    except (OSError, AgentUnavailable) as exc:
        raise InjectError(str(exc) if isinstance(exc, AgentUnavailable) else f"process {pid}: {exc.strerror}") from None
    directory = run_dir.buffers
    try:
        config = agent_environment(run, lib, directory, {})[ENV_CONFIG]
        if same_pid_namespace(pid):  # the agent watches this process's pid and disarms itself if it dies
            config += ";watch=1"
        ender = _Ender()  # from here a Ctrl-C ends the trace; it never interrupts a ptrace sequence
        try:
            injected = inject(pid, lib, config)
        except BaseException:
            ender.restore()
            raise
        started = time.monotonic()
        if ready is not None:
            ready("agent injected")
        finished = threading.Event()
        progress = Progress(directory)
        sampler = AgentSampler() if on_sample is not None else None
        poller = None
        if on_progress is not None:
            def poll_progress() -> None:
                while not finished.wait(0.2):
                    total, ignored = progress.read()
                    on_progress(total, ignored, time.monotonic() - started)
            poller = threading.Thread(target=poll_progress, daemon=True)
            poller.start()
        exited = execed = False
        removed_s = 0.0
        try:
            next_sample = started + interval
            while True:
                now = time.monotonic()
                if _gone(pid):
                    exited = True
                    break
                if sampler is not None and now >= next_sample:
                    on_sample(sampler(directory, now - started))  # type: ignore[misc]
                    next_sample += interval
                if quit is not None and quit.is_set() and ender.by is None:
                    ender.by = "q"
                if req.duration is not None and now - started >= req.duration:
                    ender.by = ender.by or "duration"
                    break
                if ender.requested.is_set() or (quit is not None and quit.is_set()):
                    break
                ender.requested.wait(0.02)
            ended = time.monotonic()
            execed = not exited and not agent_mapped(pid, lib, injected.bias)
            if execed:  # a new image: the exec cleared AC and dropped the agent; nothing to undo
                pass
            elif not exited:
                try:
                    removed_s = remove(injected)
                except InjectError as exc:
                    if not _gone(pid):
                        raise ToolError(f"detaching from process {pid} failed: {exc}") from None
                    exited = True
            # Children it forked while attached inherited the agent: disarmed the same way.
            from ..agent import buffer as ab

            for child, _gen, _path in ab.buffer_files(directory):
                if child != pid and not _gone(child) and agent_mapped(child, lib, injected.bias):
                    try:
                        remove(injected, child)
                    except InjectError:
                        pass
        finally:
            finished.set()
            if poller is not None:
                poller.join()
            ender.restore()
            progress.close()
        if on_progress is not None:
            total, ignored = progress.read()
            on_progress(total, ignored, ended - started)
        if sampler is not None and on_sample is not None:
            on_sample(sampler(directory, ended - started))
            sampler.close()
        images = load_images(directory)
        root = [im for im in images if im.header.pid == pid]
        exit_status = root[-1].header.exit_status if exited and root else None
        result = document(run, images, pid, started, ended, exit_status, None, {}, lib)
    finally:
        run_dir.close()
    assert result.agent is not None  # the agent's trace has its summary
    result.agent.injected = True
    result.attached = AttachState(
        pid=pid, detached=not exited, ended_by=ender.by if not exited else "exit", engine="agent",
        threads_armed=injected.threads_armed, agent_left="loaded, inert" if not exited else None,
        stopped_s={"attach": round(injected.stopped_s, 6), "detach": round(removed_s, 6)})
    if execed:
        result.note(f"process {pid} exec'd {comm(pid)} during the trace: the new program "
                    "was not traced (an exec clears AC and drops the agent)")
    if injected.creating:
        result.note(f"process {pid}: {creating_note(injected.creating)}")
    if not injected.threads_armed:
        result.note(f"no thread of process {pid} could be armed at the attach (each blocked "
                    "SIGBUS); only threads it started or unblocked later were traced")
    if exited:
        how = f"exit status {exit_status}" if exit_status is not None else "its exit status is unknown: killed by a signal?"
        result.note(f"process {pid} exited during the trace ({how})")
    return RunResult(result, exit_status, None, "")


def _refuse_if_agent(pid: int) -> None:
    from ..agent.presence import tracing_agent

    agent = tracing_agent(pid)
    if agent is not None:
        raise ToolError(traced_line(pid, ualdbg=agent.ualdbg, injected=agent.injected))


def run_gdb(req: RunRequest, on_progress: Callable[[int, int, float], None] | None = None,
            ready: Callable[[str], None] | None = None, *, on_sample: Callable[[Sample], None] | None = None,
            interval: float = 1.0, quit: threading.Event | None = None) -> RunResult:
    """gdb's trap engine attached to req.pid (adapters/gdb/attach_driver.py)."""
    assert req.pid is not None
    pid = req.pid
    from .inject import one_at_a_time

    exe, args = _program_of(pid)
    with rundir.make() as run_dir:  # locked: a killed run's directory is reaped by the next
        tmp = run_dir.top
        cfg: dict[str, Any] = {
            "attach_pid": pid, "cli_pid": os.getpid(), "program": exe, "args": args,
            "all_modules": req.all_modules, "modules": req.modules, "buffer": req.buffer,
            "json": os.path.join(tmp, "trace.json"), "status": os.path.join(tmp, "status.json"),
            "attached": os.path.join(tmp, "attached"),
            "progress": os.path.join(tmp, "progress") if on_progress else None,
            "sites": os.path.join(tmp, "sites") if on_sample else None,
        }
        log = os.path.join(tmp, "debugger.log")
        ender = _Ender()
        finished = threading.Event()
        poller = None
        try:
            # A session of its own: a Ctrl-C at the terminal reaches ualdbg, which ends the trace;
            # gdb would turn it into a SIGINT to the traced process's whole process group.
            # gdb stops every thread to attach: not while another ualdbg injects the agent, and not
            # once one has (its agent could patch code under a thread gdb holds): cli/inject.py
            with one_at_a_time(pid):
                _refuse_if_agent(pid)
                proc = subprocess.Popen(gdb_attach_command(cfg, log), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                while proc.poll() is None and not os.path.exists(cfg["attached"]):
                    time.sleep(0.02)
            attached_at = time.monotonic()
            if proc.poll() is None:
                if ready is not None:
                    ready("trap engine under gdb")
                if on_progress is not None:
                    poller = threading.Thread(target=poll, args=(cfg["progress"], on_progress, finished), daemon=True)
                    poller.start()
            asked = False
            next_sample = attached_at + interval
            last: tuple[dict[int, int], int] = ({}, 0)
            while proc.poll() is None:
                now = time.monotonic()
                if on_sample is not None and now >= next_sample and not asked:
                    last = read_sites(cfg["sites"]) or last
                    on_sample(Sample(now - attached_at, last[0], last[1], (pid,)))
                    next_sample += interval
                due = req.duration is not None and now - attached_at >= req.duration
                if quit is not None and quit.is_set() and ender.by is None:
                    ender.by = "q"
                if not asked and (ender.requested.is_set() or due or (quit is not None and quit.is_set())):
                    asked = True
                    ender.by = ender.by or "duration"
                    try:  # gdb takes this SIGSTOP (nopass) and detaches: the process never stops
                        _tgkill(pid, pid, signal.SIGSTOP)
                    except OSError:
                        pass
                ender.requested.wait(0.05)
            if on_sample is not None and os.path.exists(cfg["status"]):
                final = read_sites(cfg["sites"])
                if final is not None:
                    on_sample(Sample(time.monotonic() - attached_at, final[0], final[1], (pid,)))
        finally:
            finished.set()
            if poller is not None and poller.is_alive():
                poller.join()
            ender.restore()
        status, log_text = finished_status(
            cfg, log, f"gdb did not finish the trace of process {pid} (gdb exit status {proc.returncode})")
        if status.get("error") and not os.path.exists(cfg["json"]):
            if status.get("traced"):  # the driver found another ualdbg's agent armed, and detached
                raise ToolError(status["error"])
            # gdb's attach refused: another tracer took the process since attach_problem looked
            # (a ualdbg injecting the agent holds it for milliseconds, then leaves it armed)
            from ..agent.presence import tracing_agent

            agent = tracing_agent(pid)
            gdb_said = "; ".join(str(status["error"]).splitlines())
            raise ToolError(attach_problem(pid) or (traced_line(pid, ualdbg=agent.ualdbg, injected=agent.injected) if agent
                            else f"cannot attach to process {pid}: {gdb_said}"))
        result = read_document(cfg["json"])
    result.program.pid = pid
    result.attached = AttachState(pid=pid, detached=bool(status.get("detached")),
                                  ended_by=ender.by if status.get("detached") else "exit", engine="trap")
    if not status.get("detached"):
        how = (f"killed by signal {status['exit_signal']}" if status.get("exit_signal")
               else f"exit status {status.get('exit_status')}")
        result.note(f"process {pid} exited during the trace ({how})")
    return RunResult(result, status.get("exit_status"), status.get("exit_signal"), log_text)


def _tgkill(tgid: int, tid: int, signo: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(234, tgid, tid, signo) != 0:  # SYS_tgkill on x86-64
        raise OSError(ctypes.get_errno(), "tgkill")
