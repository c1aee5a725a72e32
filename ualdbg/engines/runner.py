"""Running a program under a debugger from the shell: build the batch command line, pass the
program's stdio and environment through untouched, and collect the JSON and exit status."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..agent import rundir
from ..ci.gate import EXIT_CANNOT_EXECUTE, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_TOOL
from ..core.document import read_document
from ..core.errors import ToolError as ToolError  # where the commands have always imported it from
from ..core.external import find_tool
from ..core.programfile import elf_file_problem, elf_structure_problem, host_elf, script_interpreter
from ..core.result import TraceResult
from ..core.sections import StepSummary
from ..lazyclass import dataclass
from .procfs import children
from .wrapper import SignalGuard, child_setup, exec_status, program_environ, spawn_held, start_problem

if TYPE_CHECKING:
    from ..isa.arch import ArchInfo


class ProgramUntraced(ToolError):
    """The program ran, once, but ualdbg has no trace of it: one line; the exit status is the
    program's when it failed, else `status` (125: ualdbg failed; 2: a scope never entered)."""

    def __init__(self, message: str, exit_status: int | None, exit_signal: int | None, status: int = EXIT_TOOL) -> None:
        super().__init__(message, status)
        self.program_status, self.program_signal = exit_status, exit_signal

    def exit_status(self) -> int:
        """The program's failure is its own status (a death by signal re-raised on ualdbg)."""
        if self.program_signal is not None or self.program_status:
            return pass_exit_status(self.program_status, self.program_signal)
        return self.status


@dataclass
class RunRequest:
    program: list[str]
    debugger: str = "gdb"
    at: str = "main"
    all_modules: bool = False
    modules: list[str] = field(default_factory=list)
    buffer: int = 100_000
    aslr: bool = False  # keep address-space randomization on (debuggers turn it off by default)
    # "auto": the in-process agent where it can work, else the trap engine under `debugger`.
    engine: str = "auto"
    follow: bool = True  # agent: trace child processes too
    patch_after: int = 2  # agent: traps at a site before it is patched (0: --no-patch; issue 21)
    # The program's architecture (`--arch`, else the ELF's e_machine): one other than the host's
    # runs under qemu-user with gdb-multiarch attached to qemu's gdb stub (ualdbg.engines.qemu).
    arch: str | None = None
    # engine "step": the scope to single-step and the alignment policy (ualdbg.engines.stepnative)
    step_functions: list[str] = field(default_factory=list)
    step_ranges: list[str] = field(default_factory=list)
    everywhere: bool = False
    policy: str | None = None  # None: ac natively, natural on other architectures (issue 6)
    # A running process to attach to instead of a program to start (ualdbg.cli.attach), and how
    # long to trace it (None: until Ctrl-C or its exit).
    pid: int | None = None
    duration: float | None = None
    # The program's argv[0] as typed (`./prog`, `make`): what it gets, whatever program[0] becomes
    # (its path, once resolved). None: program[0] as given.
    argv0: str | None = None

    def argv(self) -> list[str]:
        """The argv the program gets, as a direct run gives it."""
        return [self.argv0 if self.argv0 is not None else self.program[0], *self.program[1:]]


@dataclass
class RunResult:
    result: TraceResult
    exit_status: int | None
    exit_signal: int | None
    log: str


def resolve_program(argv0: str, *, scripts: bool = False) -> str:
    """The program's path; a `#!` script only where the engine can run it (`scripts`: the agent,
    which follows the interpreter's exec of the programs the script starts). What a direct run
    could not start is refused before anything runs, with the shell's status: 127 not found (the
    program, its ELF interpreter, a library), 126 cannot execute."""
    path = argv0 if "/" in argv0 else (shutil.which(argv0) or argv0)
    if "/" not in argv0 and path == argv0:
        raise ToolError(f"{argv0}: command not found (not on PATH)", EXIT_NOT_FOUND)
    interp = script_interpreter(path) if os.path.isfile(path) else None
    if interp is not None:
        if not os.access(path, os.X_OK):
            raise ToolError(f"{argv0}: not executable", EXIT_CANNOT_EXECUTE)
        if not os.path.isfile(interp):
            raise ToolError(f"{argv0}: a script whose interpreter {interp} does not exist", EXIT_NOT_FOUND)
        if not scripts:
            raise ToolError(f"{argv0}: a script run by {interp}; this engine needs a native program "
                            f"(name one after --, or use the agent engine, the default, which traces the programs the script runs)")
        return os.path.abspath(path)
    if not os.path.lexists(path):
        raise ToolError(f"{argv0}: no such file", EXIT_NOT_FOUND)
    problem = elf_file_problem(path, argv0, what="a program",
                               not_elf="not an ELF executable, nor a #! script (ualdbg runs native programs and the scripts that start them)")
    if problem:
        raise ToolError(problem, EXIT_NOT_FOUND if not os.path.exists(path) else EXIT_CANNOT_EXECUTE)
    problem = elf_structure_problem(path)
    if problem:  # a truncated or corrupt ELF is bad input, as the charter has it: 2, not the shell's 126
        raise ToolError(f"{argv0}: {problem}", EXIT_ERROR)
    if not os.access(path, os.X_OK):
        raise ToolError(f"{argv0}: not executable", EXIT_CANNOT_EXECUTE)
    start = start_problem(path, argv0, program_environ())
    if start is not None:
        raise ToolError(start[1], start[0])
    return os.path.abspath(path)


def pkg_roots() -> list[str]:
    """Folders that make ualdbg and its dependencies importable in the debugger's Python."""
    import capstone
    import elftools
    import rich

    import ualdbg

    roots = []
    for mod in (ualdbg, capstone, elftools, rich):
        d = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__ or "")))
        if d not in roots:
            roots.append(d)
    return roots


def gdb_batch(gdb: str, log: str, *, aslr: bool = False) -> list[str]:
    """A batch gdb that logs its own messages to `log` (the program writes to the user's
    stdout/stderr) and has ualdbg's package on its Python path; the caller adds what it runs."""
    return [
        gdb, "-q", "-nx", "-batch",
        "-iex", f"set logging file {log}", "-iex", "set logging overwrite on",
        "-iex", "set logging redirect on", "-iex", "set logging enabled on",
        "-iex", "set pagination off", "-iex", "set confirm off",
        "-iex", "set print thread-events off", "-iex", "set print inferior-events off",
        *(["-iex", "set disable-randomization off"] if aslr else []),
        "-ex", f"python import sys; sys.path[:0] = {pkg_roots()!r}",
    ]


def gdb_command(req: RunRequest, cfg: dict[str, Any], log: str) -> list[str]:
    remote = cfg.get("remote")
    if remote is not None:
        # Under qemu the program is already started (held at its first instruction): gdb only
        # loads its symbols and connects (driver.py).
        program = [req.program[0]]
    elif cfg.get("exec_wrapper"):
        program = ["--args", req.program[0]]  # the exec helper has the arguments (exec_spec)
    else:
        program = ["--args", *req.program]
    return [
        *gdb_batch(find_tool("gdb") if remote is None else cfg["gdb"], log, aslr=req.aslr),
        "-ex", f"python from ualdbg.adapters.gdb.driver import main; main({json.dumps(json.dumps(cfg))})",
        *(["-iex", f"set sysroot {cfg['sysroot']}"] if cfg.get("sysroot") else []),
        *program,
    ]


def exec_spec(req: RunRequest, folder: str) -> list[str] | None:
    """The exec helper and its spec for gdb's `exec-wrapper` (stepper/src/exec.c): the program
    gets the argv (argv[0] as typed) and environment of a direct run, not the absolute path gdb
    execs and the variables its shell and gdb itself add. None without a C compiler: then gdb's
    own exec, as before."""
    from ..agent.build import BuildError
    from ..stepper.execspec import LaunchSpec, build

    try:
        helper = str(build())
    except BuildError:
        return None
    spec = os.path.join(folder, "exec.spec")
    env = tuple(f"{k}={v}" for k, v in program_environ().items())
    with open(spec, "wb") as f:
        f.write(LaunchSpec(req.program[0], tuple(req.argv()), env, aslr=req.aslr).encode())
    return [helper, spec]


def lldb_command(cfg: dict[str, Any]) -> list[str]:
    setup = f"import sys; sys.path[:0] = {pkg_roots()!r}"
    return [
        find_tool("lldb"), "--no-lldbinit", "--batch",
        "-o", f"script {setup}",
        # `import ualdbg...` binds `ualdbg` in lldb's script namespace, where lldb looks up the
        # command classes and callbacks by their dotted names.
        "-o", f"script import ualdbg.adapters.lldb.driver; ualdbg.adapters.lldb.driver.main(lldb.debugger, {json.dumps(json.dumps(cfg))})",
    ]


def _run_lldb(cfg: dict[str, Any], log: str, forked: Callable[[], None] | None,
              aslr: bool = False) -> tuple[int, int | None, int | None]:
    """lldb attaches to the held program (the driver releases it); lldb's own output goes to
    the log. Returns lldb's exit status and the program's exit status or signal from wait()."""
    guard = _guard()  # before the fork: a signal that comes in between is not lost
    try:
        pid, release = spawn_held(cfg["program"], cfg["argv"], program_environ(), no_aslr=not aslr)
    except BaseException:
        guard.restore()
        raise
    if forked is not None:
        forked()
    cfg.update(attach_pid=pid, release_fd=release)
    try:
        with open(log, "w") as logf:
            proc = subprocess.Popen(lldb_command(cfg), stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    pass_fds=(release,), preexec_fn=child_setup())
    except BaseException:
        guard.restore()
        os.close(release)
        os.waitpid(pid, 0)
        raise
    os.close(release)  # lldb holds the other copy: if it dies, the program reads EOF and exits
    returncode, cfg["interrupted"] = _wait_guarded(proc, lambda: [pid], guard)
    _, wstatus = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wstatus):
        return returncode, None, os.WTERMSIG(wstatus)
    return returncode, os.WEXITSTATUS(wstatus), None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _program_of(debugger: int) -> Callable[[], list[int]]:
    """The targets of SignalGuard for a debugger running the program: its children now, or the
    last ones seen while they live. Read empty (a race with /proc), the program would miss its
    SIGKILL at the deadline and the debugger be killed instead, with the trace in it."""
    seen: list[int] = []

    def targets() -> list[int]:
        now = children(debugger)
        if now:
            seen[:] = now
            return now
        return [pid for pid in seen if _parent(pid) == debugger]  # never a pid reused by another

    return targets


def finished_status(cfg: dict[str, Any], log: str, failure: str, status: int = EXIT_TOOL) -> tuple[dict[str, Any], str]:
    """The status file the driver inside the debugger wrote, and the debugger's log. Without the
    file the debugger died first: `failure` in one line (the log's tail, a Python traceback as
    often as not, only with UALDBG_DEBUG=1)."""
    log_text = open(log, errors="replace").read() if os.path.exists(log) else ""
    if not os.path.exists(cfg["status"]):
        if os.environ.get("UALDBG_DEBUG"):
            print(log_text, file=sys.stderr)
        raise ToolError(failure + " (UALDBG_DEBUG=1 shows its log)", status)
    try:
        with open(cfg["status"]) as f:
            return json.load(f), log_text
    except ValueError:  # cut short: the run directory's filesystem filled up, say
        free = shutil.disk_usage(os.path.dirname(cfg["status"])).free
        raise ToolError(f"{failure}: its status file is cut short ({free:,} bytes free where it was written)",
                        status) from None


def _guard() -> SignalGuard:
    """A SignalGuard set before the debugger starts (engines/wrapper.SignalGuard)."""
    return SignalGuard(None, 10.0)


def _wait_guarded(proc: subprocess.Popen[Any], program: Callable[[], list[int]], guard: SignalGuard) -> tuple[int, str | None]:
    """Wait for the debugger while SIGTERM/SIGHUP/SIGINT sent to ualdbg go to the program it
    runs, as with the agent (engines/wrapper.SignalGuard): the debugger then writes the trace of a
    program that ended. Returns the debugger's status and the first signal received, if any."""
    guard.start(proc, program)
    try:
        returncode = guard.wait()
    finally:
        guard.restore()
    return returncode, guard.received[0] if guard.received else None


def _cross_arch(req: RunRequest) -> ArchInfo | None:
    """The program's architecture when it is not the host's (None: native). `--arch` must agree
    with the ELF header: a mismatch is a usage error, not a guess."""
    if req.arch is None and host_elf(req.program[0]):
        return None  # the common case, without isa.arch (it imports capstone: issue 34)
    from ..isa.arch import arch_by_name, elf_arch

    try:
        wanted = arch_by_name(req.arch) if req.arch else None
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    found = elf_arch(req.program[0])
    if wanted is not None and found is not None and found is not wanted:
        raise ToolError(f"{req.program[0]} is a {found.name} program, not {wanted.name}")
    arch = found or wanted
    if arch is None or arch.name == os.uname().machine:
        return None
    from .fixup import has_signal_engine

    if not has_signal_engine(arch) and not (req.engine == "step" and arch.step_only):  # README: architectures
        if arch.step_only:
            raise ToolError(f"{arch.name} programs: {arch.step_only}; use --engine step --in FUNC (README: architectures)")
        raise ToolError(f"{arch.name} programs: ualdbg has no engine for them yet (see README: architectures)")
    return arch


def _run_qemu(req: RunRequest, arch: ArchInfo, cfg: dict[str, Any], log: str,
              folder: str) -> tuple[int, int | None, int | None]:
    """qemu-ARCH -g on a private socket, gdb-multiarch in batch mode attached to it; the
    program's stdio are the user's and its end is qemu's wait status."""
    from . import qemu

    guard = _guard()  # SIGTERM to ualdbg reaches the program through qemu, which delivers it to the guest
    try:
        cfg["gdb"] = find_tool("gdb-multiarch")
        run = qemu.start(arch, req.program, folder, argv0=req.argv()[0], env=program_environ(),
                         preexec_fn=child_setup())
    except qemu.QemuError as exc:
        guard.restore()
        raise ToolError(str(exc), EXIT_TOOL) from None
    except BaseException:
        guard.restore()
        raise
    try:
        cfg["remote"] = run.endpoint
        cfg["sysroot"] = arch.sysroot if arch.sysroot and os.path.isdir(arch.sysroot) else None
        try:
            gdb_proc = subprocess.Popen(gdb_command(req, cfg, log), stdin=subprocess.DEVNULL, stdout=None, stderr=None,
                                        preexec_fn=child_setup())
        except BaseException:
            guard.restore()
            raise
        returncode, cfg["interrupted"] = _wait_guarded(gdb_proc, lambda: [run.proc.pid], guard)
        status, sig = run.wait(timeout=10) if returncode == 0 else (None, None)
    except subprocess.TimeoutExpired:
        status, sig = None, None
    finally:
        run.stop()
    return returncode, status, sig


def _run_agent(req: RunRequest, on_progress: Callable[[int, int, float], None] | None,
               exclude: tuple[str, ...] = ()) -> RunResult | None:
    """The agent engine (ualdbg.engines.agent); None, after one line on stderr saying why, when it
    cannot work for this program and the trap engine must: decided before the program runs, for
    the program never runs twice (a program the agent did not get into is not run again)."""
    from .agent import AgentNotIn, AgentRun, AgentUnavailable, run_agent

    run = AgentRun(list(req.program), at=req.at, all_modules=req.all_modules, modules=list(req.modules),
                   buffer=req.buffer, follow=req.follow, aslr=req.aslr, exclude=exclude, patch_after=req.patch_after,
                   argv0=req.argv()[0])
    try:
        res = run_agent(run, on_progress)
    except AgentUnavailable as exc:
        if exclude:  # a script: the trap engine cannot run it
            raise ToolError(f"{exc}; the trap and step engines need a native program, not a script", EXIT_TOOL) from None
        print(f"ualdbg: {exc}; using the trap engine", file=sys.stderr, flush=True)
        return None
    except AgentNotIn as exc:
        raise ProgramUntraced(str(exc), exc.exit_status, exc.exit_signal) from None
    except OSError as exc:  # the kernel refused the exec (resolve_program foresaw what it could)
        raise ToolError(f"{req.argv()[0]}: cannot execute: {exc.strerror}", exec_status(exc)) from None
    return RunResult(res.result, res.exit_status, res.exit_signal, res.log)


def _run_script(req: RunRequest, on_progress: Callable[[int, int, float], None] | None) -> RunResult | None:
    """A `#!` script runs as the kernel runs it, under the agent, which follows its exec of the
    programs it starts; the interpreter itself is out of scope. None: not a script."""
    interp = script_interpreter(req.program[0])
    if interp is None:
        return None
    if req.follow is False:
        raise ToolError(f"{req.program[0]} is a script run by {interp}: --no-follow would trace nothing but the interpreter")
    print(f"ualdbg: {os.path.basename(req.program[0])} is a script run by {interp}: tracing the programs it runs, "
          f"not {os.path.basename(interp)} itself", file=sys.stderr, flush=True)
    return _run_agent(req, on_progress, exclude=(os.path.realpath(interp),))


def _run_step(req: RunRequest, on_progress: Callable[[int, int, float], None] | None) -> RunResult:
    """The native single-step engine (ualdbg.engines.stepnative); its errors are one line. A bad
    scope or policy is reported before the program name is even looked at."""
    from .stepnative import StepBadInput, StepNothing, StepRun, StepUnavailable, run_step, validate

    run = StepRun(req.program, functions=list(req.step_functions), ranges=list(req.step_ranges),
                  everywhere=req.everywhere, policy=req.policy or "ac", at=req.at, all_modules=req.all_modules,
                  modules=list(req.modules), buffer=req.buffer, aslr=req.aslr, argv0=req.argv()[0])
    try:
        validate(run)
    except StepUnavailable as exc:
        raise ToolError(str(exc)) from None
    req.program[0] = resolve_program(req.program[0])
    try:
        res = run_step(run, on_progress)
    except StepNothing as exc:
        raise ProgramUntraced(str(exc), exc.exit_status, exc.exit_signal, exc.status) from None
    except StepBadInput as exc:
        raise ToolError(str(exc)) from None
    except StepUnavailable as exc:
        raise ToolError(str(exc), EXIT_TOOL) from None
    return RunResult(res.result, res.exit_status, res.exit_signal, "")


def _cross_step(req: RunRequest) -> bool:
    """Whether `--engine step` is for a program of another architecture: then it is the step
    engine inside gdb-multiarch (breakpoint stepping under qemu), not the native stepper."""
    from ..isa.arch import arch_by_name, elf_arch

    if req.arch is not None:
        try:
            return arch_by_name(req.arch).name != os.uname().machine
        except ValueError:
            return True  # _cross_arch says what is wrong with it
    typed = req.program[0]
    path = typed if "/" in typed else (shutil.which(typed) or typed)
    if not os.path.isfile(path):
        return False  # resolve_program reports it, after the scope
    found = elf_arch(path)
    return found is not None and found.name != os.uname().machine


def _step_args(req: RunRequest, arch: ArchInfo) -> list[str]:
    """`trace start` arguments of the step engine in the debugger (engines/step.py)."""
    if req.everywhere:
        raise ToolError(f"--everywhere: on {arch.name} the step engine puts a breakpoint on each instruction "
                        "of the scope; give --in FUNC or --range LO,HI")
    from ..core.model import Module
    from .scope import ScopeError, resolve_scope

    try:  # before qemu starts: an unknown function or a bad range is one line
        resolve_scope([Module(req.program[0], 0, 0, 0)] if req.step_functions else [],
                      functions=list(req.step_functions), range_text=list(req.step_ranges))
    except ScopeError as exc:
        raise ToolError(str(exc)) from None
    args = ["--engine", "step", "--policy", req.policy or "natural"]
    for f in req.step_functions:
        args += ["--in", f]
    for r in req.step_ranges:
        args += ["--range", r]
    return args


def run_traced(req: RunRequest, on_progress: Callable[[int, int, float], None] | None = None) -> RunResult:
    if req.argv0 is None:
        req.argv0 = req.program[0]  # what the program gets as argv[0], as typed (issue 29)
    if req.engine == "step" and not _cross_step(req):
        return _run_step(req, on_progress)
    req.program[0] = resolve_program(req.program[0], scripts=req.engine in ("auto", "agent"))
    script = _run_script(req, on_progress)
    if script is not None:
        return script
    cross = _cross_arch(req)
    if cross is None and req.engine == "step":
        raise ToolError(f"{req.program[0]} is a native program: --engine step runs the native stepper without --arch")
    if cross is not None and req.engine == "agent":
        raise ToolError(f"--engine agent runs native x86-64 programs only; {cross.name} programs run under qemu with the trap engine")
    if cross is not None and req.debugger != "gdb":
        raise ToolError(f"{cross.name} programs run under qemu-user with gdb-multiarch; --debugger {req.debugger} cannot attach there")
    if cross is None and req.engine != "trap":
        done = _run_agent(req, on_progress)
        if done is not None:
            return done
    if req.debugger not in ("gdb", "lldb"):
        raise ToolError(f"--debugger {req.debugger}: not available (gdb and lldb are)")
    if req.debugger == "lldb":
        find_tool("lldb")
    with rundir.make() as run_dir:  # locked: a killed run's directory is reaped by the next (agent/rundir.py)
        tmp = run_dir.top
        cfg: dict[str, Any] = {
            "program": req.program[0], "args": req.program[1:], "argv": req.argv(), "at": req.at,
            "all_modules": req.all_modules, "modules": req.modules, "buffer": req.buffer,
            "json": os.path.join(tmp, "trace.json"), "status": os.path.join(tmp, "status.json"),
            "progress": os.path.join(tmp, "progress") if on_progress else None,
            "step": _step_args(req, cross) if cross is not None and req.engine == "step" else None,
        }
        log = os.path.join(tmp, "debugger.log")
        waited: tuple[int | None, int | None] | None = None
        interrupted: str | None = None
        killed = False  # ualdbg's SIGKILL ended the program (gdb's side: SignalGuard)
        finished = threading.Event()
        poller = None
        if on_progress is not None:
            from ..core.progress import poll

            poller = threading.Thread(target=poll, args=(cfg["progress"], on_progress, finished), daemon=True)
        try:
            if req.debugger == "lldb":
                # The poller starts after the fork: a forked child gets only the forking thread.
                returncode, *program_end = _run_lldb(cfg, log, poller.start if poller is not None else None, req.aslr)
                waited = (program_end[0], program_end[1])
                interrupted = cfg.get("interrupted")
            else:
                if poller is not None:
                    poller.start()
                if cross is not None:
                    returncode, *program_end = _run_qemu(req, cross, cfg, log, tmp)
                    waited = (program_end[0], program_end[1])
                    interrupted = cfg.get("interrupted")
                else:
                    cfg["exec_wrapper"] = exec_spec(req, tmp)
                    guard = _guard()
                    try:
                        gdb_proc = subprocess.Popen(gdb_command(req, cfg, log), stdin=None, stdout=None, stderr=None,
                                                    preexec_fn=child_setup())
                    except BaseException:
                        guard.restore()
                        raise
                    returncode, interrupted = _wait_guarded(gdb_proc, _program_of(gdb_proc.pid), guard)
                    killed = guard.program_killed
        finally:
            finished.set()
            if poller is not None and poller.is_alive():
                poller.join()
        status, log_text = finished_status(
            cfg, log, f"{req.debugger} did not finish the trace (its exit status {returncode})")
        if waited is not None:
            # The kernel's word on how the program ended (lldb cannot tell exit 11 from SIGSEGV).
            status["exit_status"], status["exit_signal"] = waited
        if (status.get("error") and status.get("exit_status") is None and status.get("exit_signal") is None
                and killed and os.path.exists(cfg["json"])):
            # ualdbg's SIGKILL (the grace period over) came while gdb was at one of the program's
            # stops: gdb then finds the process gone ("Couldn't get registers: No such process"),
            # not an exit. gdb's driver wrote what was recorded; the program ended by that SIGKILL.
            waited, status["error"] = (None, signal.SIGKILL), None
            status["exit_status"], status["exit_signal"] = waited
        if status.get("error") and status.get("exit_status") is None and status.get("exit_signal") is None:
            reason = str(status["error"]).strip().splitlines()[0] if str(status["error"]).strip() else "?"
            raise ToolError(f"{req.debugger} could not run {req.program[0]}: {reason}", EXIT_TOOL)
        if not os.path.exists(cfg["json"]):
            raise ProgramUntraced(f"{req.debugger} wrote no trace of {req.program[0]} (UALDBG_DEBUG=1 shows its log)",
                                  status.get("exit_status"), status.get("exit_signal"))
        result = read_document(cfg["json"])
        if waited is not None:
            result.program.exit_status, result.program.exit_signal = waited
        if interrupted:
            result.interrupt(interrupted)
        step = result.step if cfg.get("step") else None
        if isinstance(step, StepSummary) and not step.steps and not step.entries:
            raise ProgramUntraced(f"the program never entered the scope {step.scope}: nothing was stepped",
                                  status["exit_status"], status["exit_signal"], EXIT_ERROR)
    return RunResult(result, status["exit_status"], status["exit_signal"], log_text)


def pass_exit_status(status: int | None, signal_no: int | None) -> int:
    """The program's own status as the CLI's; a death by signal is re-raised on ourselves."""
    if signal_no is not None:
        import signal

        sys.stdout.flush()
        sys.stderr.flush()
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signal_no, signal.SIG_DFL)
            os.kill(os.getpid(), signal_no)
        except (OSError, ValueError):
            pass
        return 128 + signal_no
    return status if status is not None else 0
