"""Running a program under a debugger from the shell: build the batch command line, pass the
program's stdio and environment through untouched, and collect the JSON and exit status."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import capstone
import elftools
import rich

import ualdbg

from ..core.progress import poll
from ..isa.arch import ArchInfo
from ..symbols.elfindex import elf_file_problem, script_interpreter


class ToolError(Exception):
    """A usage or tool problem: one line for the user, exit status 2."""


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
    # runs under qemu-user with gdb-multiarch attached to qemu's gdb stub (ualdbg.isa.qemu).
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


@dataclass
class RunResult:
    doc: dict[str, Any]
    exit_status: int | None
    exit_signal: int | None
    log: str


def resolve_program(argv0: str, *, scripts: bool = False) -> str:
    """The program's path; a `#!` script only where the engine can run it (`scripts`: the agent,
    which follows the interpreter's exec of the programs the script starts)."""
    path = argv0 if "/" in argv0 else (shutil.which(argv0) or argv0)
    interp = script_interpreter(path) if os.path.isfile(path) else None
    if interp is not None:
        if not os.access(path, os.X_OK):
            raise ToolError(f"{argv0}: not executable")
        if not os.path.isfile(interp):
            raise ToolError(f"{argv0}: a script whose interpreter {interp} does not exist")
        if not scripts:
            raise ToolError(f"{argv0}: a script run by {interp}; this engine needs a native program "
                            f"(name one after --, or use the agent engine, the default, which traces the programs the script runs)")
        return os.path.abspath(path)
    problem = elf_file_problem(path, argv0, what="a program",
                               not_elf="not an ELF executable, nor a #! script (ualdbg runs native programs and the scripts that start them)")
    if problem:
        raise ToolError(problem)
    problem = _elf_structure_problem(path)
    if problem:
        raise ToolError(f"{argv0}: {problem}")
    if not os.access(path, os.X_OK):
        raise ToolError(f"{argv0}: not executable")
    return os.path.abspath(path)


def _elf_structure_problem(path: str) -> str | None:
    """Why an ELF file cannot be run (truncated or corrupt headers), before any engine reads it."""
    from elftools.common.exceptions import ELFError

    try:
        with open(path, "rb") as f:
            from elftools.elf.elffile import ELFFile

            elf = ELFFile(f)
            if elf["e_type"] not in ("ET_EXEC", "ET_DYN"):
                return f"not an executable ELF file ({elf['e_type']})"
            for _seg in elf.iter_segments():
                pass
    except (ELFError, OSError, ValueError, EOFError, KeyError, AssertionError) as exc:
        return f"a truncated or corrupt ELF file ({type(exc).__name__}: {str(exc)[:80]})"
    except Exception as exc:  # pyelftools raises many kinds on hostile input (construct's errors among them)
        return f"a truncated or corrupt ELF file ({type(exc).__name__})"
    return None


def pkg_roots() -> list[str]:
    """Folders that make ualdbg and its dependencies importable in the debugger's Python."""
    roots = []
    for mod in (ualdbg, capstone, elftools, rich):
        d = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__ or "")))
        if d not in roots:
            roots.append(d)
    return roots


def find_gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise ToolError("gdb not found on PATH; install it (Debian: apt-get install gdb)")
    return gdb


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
    return [
        *gdb_batch(find_gdb() if remote is None else cfg["gdb"], log, aslr=req.aslr),
        "-ex", f"python from ualdbg.adapters.gdb.driver import main; main({json.dumps(json.dumps(cfg))})",
        *(["-iex", f"set sysroot {cfg['sysroot']}"] if cfg.get("sysroot") else []),
        # Under qemu the program is already started (held at its first instruction): gdb only
        # loads its symbols and connects (driver.py).
        *(["--args", *req.program] if remote is None else [req.program[0]]),
    ]


def find_lldb() -> str:
    for name in ("lldb-19", "lldb"):  # Debian's package is lldb-19; others call it lldb
        path = shutil.which(name)
        if path is not None:
            return path
    raise ToolError("lldb not found on PATH; install it (Debian: apt-get install lldb-19 python3-lldb-19 liblldb-19-dev)")


def lldb_command(cfg: dict[str, Any]) -> list[str]:
    setup = f"import sys; sys.path[:0] = {pkg_roots()!r}"
    return [
        find_lldb(), "--no-lldbinit", "--batch",
        "-o", f"script {setup}",
        # `import ualdbg...` binds `ualdbg` in lldb's script namespace, where lldb looks up the
        # command classes and callbacks by their dotted names.
        "-o", f"script import ualdbg.adapters.lldb.driver; ualdbg.adapters.lldb.driver.main(lldb.debugger, {json.dumps(json.dumps(cfg))})",
    ]


def _no_aslr() -> None:
    """personality(ADDR_NO_RANDOMIZE), as gdb and lldb do for what they launch by default."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current != -1:
        libc.personality(current | 0x0040000)


def spawn_held(argv: list[str], *, no_aslr: bool = True) -> tuple[int, int]:
    """Fork the program, held just before its exec until someone writes to the returned fd.
    lldb launches programs on a pseudo-terminal of its own; attaching to this child instead
    leaves the program the user's stdin, stdout, stderr, environment, open files and process
    group, as the shell would."""
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing but exec or _exit
        try:
            os.close(w)
            # Python ignores these; an ignored signal stays ignored across exec (as subprocess's
            # restore_signals knows).
            for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            if no_aslr:
                _no_aslr()
            go = os.read(r, 1) == b"1"
            os.close(r)
            if go:
                os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(r)
    return pid, w


def _run_lldb(cfg: dict[str, Any], log: str, forked: Callable[[], None] | None,
              aslr: bool = False) -> tuple[int, int | None, int | None]:
    """lldb attaches to the held program (the driver releases it); lldb's own output goes to
    the log. Returns lldb's exit status and the program's exit status or signal from wait()."""
    pid, release = spawn_held([cfg["program"], *cfg["args"]], no_aslr=not aslr)
    if forked is not None:
        forked()
    cfg.update(attach_pid=pid, release_fd=release)
    guard = _guard()
    try:
        with open(log, "w") as logf:
            proc = subprocess.Popen(lldb_command(cfg), stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    pass_fds=(release,))
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


def _children(pid: int) -> list[int]:
    """The processes `pid` started (the debugger's inferior), from /proc."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def finished_status(cfg: dict[str, Any], log: str, failure: str) -> tuple[dict[str, Any], str]:
    """The status file the driver inside the debugger wrote, and the debugger's log. Without the
    file the debugger died first: `failure` in one line, with the log's last lines."""
    log_text = open(log, errors="replace").read() if os.path.exists(log) else ""
    if not os.path.exists(cfg["status"]):
        tail = "\n".join(log_text.strip().splitlines()[-5:])
        raise ToolError(failure + (f": {tail}" if tail else ""))
    with open(cfg["status"]) as f:
        return json.load(f), log_text


def _guard() -> Any:
    """A SignalGuard set before the debugger starts (engines/agent.SignalGuard)."""
    from .agent import SignalGuard

    return SignalGuard(None, 10.0)


def _wait_guarded(proc: subprocess.Popen[Any], program: Callable[[], list[int]], guard: Any) -> tuple[int, str | None]:
    """Wait for the debugger while SIGTERM/SIGHUP/SIGINT sent to ualdbg go to the program it
    runs, as with the agent (engines/agent.SignalGuard): the debugger then writes the trace of a
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
    from ..isa.arch import arch_by_name, elf_arch

    try:
        wanted = arch_by_name(req.arch) if req.arch else None
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    found = elf_arch(req.program[0])
    if wanted is not None and found is not None and found is not wanted:
        raise ToolError(f"{req.program[0]} is a {found.name} program, not {wanted.name}")
    arch = found or wanted
    if arch is None or arch.name == platform.machine():
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
    from ..isa import qemu

    try:
        cfg["gdb"] = qemu.find_gdb_multiarch()
        run = qemu.start(arch, req.program, folder)
    except qemu.QemuError as exc:
        raise ToolError(str(exc)) from None
    try:
        cfg["remote"] = run.endpoint
        cfg["sysroot"] = arch.sysroot if arch.sysroot and os.path.isdir(arch.sysroot) else None
        returncode = subprocess.run(gdb_command(req, cfg, log), stdin=subprocess.DEVNULL, stdout=None, stderr=None,
                                    check=False).returncode
        status, sig = run.wait() if returncode == 0 else (None, None)
    finally:
        run.stop()
    return returncode, status, sig


def _run_agent(req: RunRequest, on_progress: Callable[[int, int, float], None] | None,
               exclude: tuple[str, ...] = ()) -> RunResult | None:
    """The agent engine (ualdbg.engines.agent); None, after one line on stderr saying why, when it
    cannot work for this program and the trap engine must."""
    from .agent import AgentRun, AgentUnavailable, run_agent

    run = AgentRun(list(req.program), at=req.at, all_modules=req.all_modules, modules=list(req.modules),
                   buffer=req.buffer, follow=req.follow, aslr=req.aslr, exclude=exclude, patch_after=req.patch_after)
    try:
        res = run_agent(run, on_progress)
    except AgentUnavailable as exc:
        if exclude:  # a script: the trap engine cannot run it
            raise ToolError(f"{exc}; the trap and step engines need a native program, not a script") from None
        print(f"ualdbg: {exc}; using the trap engine", file=sys.stderr, flush=True)
        return None
    return RunResult(res.doc, res.exit_status, res.exit_signal, res.log)


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
    from .stepnative import StepRun, StepUnavailable, run_step, validate

    run = StepRun(req.program, functions=list(req.step_functions), ranges=list(req.step_ranges),
                  everywhere=req.everywhere, policy=req.policy or "ac", at=req.at, all_modules=req.all_modules,
                  modules=list(req.modules), buffer=req.buffer, aslr=req.aslr)
    try:
        validate(run)
        req.program[0] = resolve_program(req.program[0])
        res = run_step(run, on_progress)
    except StepUnavailable as exc:
        raise ToolError(str(exc)) from None
    return RunResult(res.doc, res.exit_status, res.exit_signal, "")


def _cross_step(req: RunRequest) -> bool:
    """Whether `--engine step` is for a program of another architecture: then it is the step
    engine inside gdb-multiarch (breakpoint stepping under qemu), not the native stepper."""
    from ..isa.arch import arch_by_name, elf_arch

    if req.arch is not None:
        try:
            return arch_by_name(req.arch).name != platform.machine()
        except ValueError:
            return True  # _cross_arch says what is wrong with it
    try:
        found = elf_arch(resolve_program(req.program[0]))
    except ToolError:
        return False  # the native stepper reports it, after the scope
    return found is not None and found.name != platform.machine()


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
        find_lldb()
    with tempfile.TemporaryDirectory(prefix="ualdbg-") as tmp:
        cfg: dict[str, Any] = {
            "program": req.program[0], "args": req.program[1:], "at": req.at,
            "all_modules": req.all_modules, "modules": req.modules, "buffer": req.buffer,
            "json": os.path.join(tmp, "trace.json"), "status": os.path.join(tmp, "status.json"),
            "progress": os.path.join(tmp, "progress") if on_progress else None,
            "step": _step_args(req, cross) if cross is not None and req.engine == "step" else None,
        }
        log = os.path.join(tmp, "debugger.log")
        waited: tuple[int | None, int | None] | None = None
        interrupted: str | None = None
        finished = threading.Event()
        poller = None
        if on_progress is not None:
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
                else:
                    guard = _guard()
                    try:
                        gdb_proc = subprocess.Popen(gdb_command(req, cfg, log), stdin=None, stdout=None, stderr=None)
                    except BaseException:
                        guard.restore()
                        raise
                    returncode, interrupted = _wait_guarded(gdb_proc, lambda: _children(gdb_proc.pid), guard)
        finally:
            finished.set()
            if poller is not None and poller.is_alive():
                poller.join()
        status, log_text = finished_status(
            cfg, log, f"the debugger did not finish the trace ({req.debugger} exit status {returncode})")
        if waited is not None:
            # The kernel's word on how the program ended (lldb cannot tell exit 11 from SIGSEGV).
            status["exit_status"], status["exit_signal"] = waited
        if status.get("error") and status.get("exit_status") is None and status.get("exit_signal") is None:
            raise ToolError(f"{req.debugger} could not run {req.program[0]}: {status['error']}")
        doc = json.load(open(cfg["json"]))
        if waited is not None:
            doc["program"]["exit_status"], doc["program"]["exit_signal"] = waited
        if interrupted:
            doc["partial"], doc["interrupted_by"] = True, interrupted
        step = doc.get("step") if cfg.get("step") else None
        if step is not None and not step.get("steps") and not step.get("entries"):
            raise ToolError(f"the program never entered the scope {step.get('scope')}: nothing was stepped")
    return RunResult(doc, status["exit_status"], status["exit_signal"], log_text)


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
