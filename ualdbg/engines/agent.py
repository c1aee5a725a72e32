"""The agent engine: run the program with the in-process agent preloaded (LD_PRELOAD), show live
progress from its shared buffers, and turn them into the same TraceResult (core/result.py) the
trap engine makes: the same decoder, policy, scope and symbolizer, fed with the registers the
agent saved instead of a debugger's; several process images merged as objects, with the agent's
own sections (its processes, its summary, its notes)."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..agent import buffer as ab
from ..agent import rundir
from ..agent.build import BuildError, build, prune_code_maps
from ..core.model import Access, Module, SourceLoc
from ..core.result import FEW_TRAPS, BlindSpot, ProgramInfo, Site, TraceResult, sites_of
from ..core.sections import AgentSummary, OutOfScope, Patching, Process
from ..core.trace import PcCounter, TraceBuffer
from ..isa.alignment import AcPolicy, Policy
from ..lazyclass import dataclass
from .modulescope import Scope
from .wrapper import SignalGuard, child_setup, elf_interpreter, host_loader, program_environ, same_file

if TYPE_CHECKING:  # the decoder (capstone), the symbolizer and the data describer (pyelftools) are
    # imported when a fault in scope needs them: a run that made none starts and ends without
    # them (issue 34)
    from ..isa.insn import Insn
    from ..symbols.data import DataRef
    from ..symbols.maps import ModuleMap
    from ..symbols.resolver import Symbolizer
    from .records import RecordTable

NAME = "agent"
ENV_CONFIG = "UALDBG_AGENT"


class AgentUnavailable(Exception):
    """The agent cannot trace this program here: one line saying why (the trap engine can)."""


class AgentNotIn(Exception):
    """The program ran, once, but the agent never reported in from it (or was removed before the
    program's real work): one line saying why, and how the program ended. Never run again: a
    second run would repeat whatever the program did (issue 29)."""

    def __init__(self, message: str, exit_status: int | None, exit_signal: int | None) -> None:
        super().__init__(message)
        self.exit_status, self.exit_signal = exit_status, exit_signal


@dataclass
class AgentRun:
    """What to run and how (the CLI's RunRequest, as far as the agent cares)."""

    program: list[str]
    at: str = "main"
    all_modules: bool = False
    modules: list[str] = field(default_factory=list)
    buffer: int = 100_000
    follow: bool = True
    # Not following children, but the process's own exec: it keeps the agent's variables in its
    # environment (its fork and spawn children drop them). A debugger's `run` (agentlink.py).
    follow_exec: bool = False
    skip_out_of_scope: bool = True  # False: trap at every out-of-scope access (exact faults_ignored)
    aslr: bool = False  # like gdb, run with address randomisation off unless asked
    # Programs out of scope whatever they run (realpaths): a script's interpreter, so that the
    # programs a script starts are traced, not the shell itself (issue 17).
    exclude: tuple[str, ...] = ()
    # Seconds the program gets to end after ualdbg forwarded it SIGTERM/SIGINT/SIGHUP, before SIGKILL.
    grace: float = 10.0
    # Traps at a site before the agent patches it to count without trapping (issue 21; 0: never,
    # one trap and one record per fault, `--no-patch`).
    patch_after: int = 2
    # The program's argv[0] as the user typed it (`./prog`, `make`); program[0] is its path.
    argv0: str | None = None
    # Where the program's stdout and stderr go (a descriptor; None: ualdbg's own): `watch`'s pty,
    # whose output it prints around its live view (issue 31).
    stdout: int | None = None
    stderr: int | None = None
    # /proc/PID/maps texts a watcher read while the process ran, oldest first, by pid: an address
    # that no snapshot of the agent's maps (mapped after its last) is named from these (issue 31).
    later_maps: dict[int, list[str]] = field(default_factory=dict)
    # os.path.realpath of the paths the run's images name, asked once each (real_path): a suite of
    # 500 processes asked it 2,000 times, at 4 lstat each.
    realpaths: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def real_path(self, path: str) -> str:
        got = self.realpaths.get(path)
        if got is None:
            got = self.realpaths[path] = os.path.realpath(path)
        return got


@dataclass
class AgentResult:
    result: TraceResult
    exit_status: int | None
    exit_signal: int | None
    log: str


# --------------------------------------------------------------------------------------------
# Where the agent can work


def elf_facts(path: str) -> tuple[int, int, bool]:
    """(ELF class, machine, has PT_INTERP) of an executable."""
    import struct

    try:
        f = open(path, "rb")
    except OSError as exc:
        raise AgentUnavailable(f"cannot read {path}: {exc.strerror}") from None
    try:
        with f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b"\x7fELF":
                raise AgentUnavailable(f"{path} is not an ELF executable")
            cls = ident[4]
            if cls != 2:
                return cls, 0, False
            (machine,) = struct.unpack_from("<H", ident, 18)
            phoff, = struct.unpack_from("<Q", ident, 32)
            phentsize, phnum = struct.unpack_from("<HH", ident, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError as exc:  # an offset past the end, or negative: a hostile header
        raise AgentUnavailable(f"{path}: cannot read its headers ({exc.strerror})") from None
    # A truncated or hostile header: fewer bytes than it promises, or entries too small to read.
    if phentsize < 4 or len(table) < phentsize * phnum:
        raise AgentUnavailable(f"{path}: its program header table is truncated or corrupt")
    interp = any(struct.unpack_from("<I", table, i * phentsize)[0] == 3 for i in range(phnum))
    return cls, machine, interp


def preflight(path: str) -> None:
    """Raise AgentUnavailable when LD_PRELOAD cannot put the agent into this program (for a
    `#!` script: into its interpreter, which the kernel runs)."""
    from ..core.programfile import script_interpreter

    script_interp = script_interpreter(path)
    if script_interp is not None:
        path = script_interp
    host = os.uname().machine
    if host not in ("x86_64", "amd64"):
        raise AgentUnavailable(f"the agent runs on x86-64 hosts, not {host}")
    cls, machine, interp = elf_facts(path)
    if cls != 2 or machine != 62:
        raise AgentUnavailable(f"{os.path.basename(path)} is not a 64-bit x86 program")
    if not interp:
        raise AgentUnavailable(f"{os.path.basename(path)} is statically linked: LD_PRELOAD cannot load the agent into it")
    # A loader other than the system's glibc one (musl, another glibc as in a Nix build) would
    # refuse the agent, built against the system's glibc, and never run the program at all: that
    # is known before the run, so the trap engine runs it (once), not the agent then the trap.
    found, loader = elf_interpreter(path), host_loader()
    if found is not None and found[1] and loader is not None and not same_file(found[1], loader):
        raise AgentUnavailable(f"{os.path.basename(path)} uses the dynamic loader {found[1]}, not the system's "
                               f"({loader}) the agent is built for")
    st = os.stat(path)
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        raise AgentUnavailable(f"{os.path.basename(path)} is setuid/setgid: the dynamic loader ignores LD_PRELOAD for it")
    try:
        if os.getxattr(path, "security.capability"):
            raise AgentUnavailable(f"{os.path.basename(path)} has file capabilities: the dynamic loader ignores LD_PRELOAD for it")
    except OSError:
        pass


def injection_problem(pid: int) -> str | None:
    """Why the agent cannot be injected into the running process `pid` (`trace --pid`, or a
    debugger's `trace start` once the program runs), in a few words; None when it can be tried."""

    from ..agent.presence import libc_symbol
    from .procfs import comm, status_field

    if os.uname().machine not in ("x86_64", "amd64"):
        return f"the agent is injected on x86-64 hosts, not {os.uname().machine}"
    name = f"process {pid} ({comm(pid)})"
    try:
        cls, machine, interp = elf_facts(f"/proc/{pid}/exe")
    except AgentUnavailable as exc:
        return f"{name}: {exc}"
    if cls != 2 or machine != 62:
        return f"{name} is not a 64-bit x86 program"
    if not interp:
        return f"{name} is statically linked: there is no dlopen in it to load the agent with"
    mode = status_field(pid, "Seccomp")
    if mode not in (None, "0"):
        return f"{name} runs under seccomp (mode {mode}): the system calls of an injection could be refused or kill it"
    try:
        libc_symbol(pid, "dlopen")
    except (LookupError, OSError) as exc:
        return f"{name}: {exc}"
    return None


def agent_library() -> str:
    try:
        return str(build())
    except BuildError as exc:
        raise AgentUnavailable(str(exc)) from None


# --------------------------------------------------------------------------------------------
# Running


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="/._-+:@")


def agent_environment(run: AgentRun, lib: str, directory: str, base: Mapping[str, str], *,
                      system: bool = False) -> dict[str, str]:
    """What the program's environment gets: LD_PRELOAD (the agent first) and UALDBG_AGENT.
    `system`: the program is ualdbg's own child (a run from the shell), so the agent can tell
    the root from what it starts, and a system program that the root started runs unarmed, its
    faults being all out of scope (out_of_scope_program), unless modules are named, all are
    asked for, or out-of-scope faults are to be counted exactly (skip_out_of_scope off)."""
    system = system and not run.all_modules and not run.modules and run.skip_out_of_scope
    own = base.get("LD_PRELOAD")
    # Numbers at a fixed width: the environment (and so the program's initial stack, and what
    # it copies from it to the heap) is the same size whatever the options and ualdbg's PID, so
    # that a trace with --no-patch or another --buffer sees the same addresses (docs/AGENT.md).
    config = ";".join([
        "1", f"dir={_quote(directory)}", f"at={run.at:5}", f"follow={2 if run.follow_exec and not run.follow else int(run.follow)}",
        f"all={int(run.all_modules)}", f"noskip={int(not run.skip_out_of_scope)}", f"records={run.buffer:010d}",
        f"ualdbg={os.getpid():010d}", f"preload={_quote(own) if own is not None else '-'}",
        f"modules={_quote(','.join(run.modules))}", f"patch={run.patch_after:010d}",
        f"sys={int(system)}", f"sysdirs={_quote(','.join(SYSTEM_PROGRAM_DIRS))}",
    ])
    return {"LD_PRELOAD": f"{lib}:{own}" if own else lib, ENV_CONFIG: config}


def run_directory(records: int = AgentRun.buffer, **kw: Any) -> rundir.RunDir:
    """A new private, locked run directory for the agent's buffers (agent/rundir.py; killed runs'
    ones are reaped first), where one process's buffer of `records` records fits whole (a page
    the agent cannot allocate later is a SIGBUS in the program); AgentUnavailable when there is
    no safe place for one."""
    try:
        return rundir.make(room=ab.file_bytes(records), **kw)
    except OSError as exc:
        raise AgentUnavailable(f"no private directory for the agent's buffers: {exc.strerror}") from None


class Progress:
    """Sums the counters of every buffer in the run's directory, for the live display."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.buffers = ab.OpenBuffers()

    def read(self) -> tuple[int, int]:
        total = ignored = 0
        for buf in self.buffers.each(self.directory):
            t, i = buf.progress()
            total, ignored = total + t, ignored + i
        return total, ignored

    def close(self) -> None:
        self.buffers.close()


def run_agent(run: AgentRun, on_progress: Callable[[int, int, float], None] | None = None,
              on_directory: Callable[[str, float], None] | None = None) -> AgentResult:
    """Run the program under the agent. Raises AgentUnavailable before anything runs when the
    agent cannot work here, OSError when the program cannot be exec'd, and AgentNotIn after the
    run when the agent never reported in (the program ran untraced) or the program removed it
    before exec'ing its real work. The program gets argv[0] as typed, the environment a direct
    run gives it plus LD_PRELOAD and UALDBG_AGENT, and dies with ualdbg (engines/wrapper.py)."""
    path = run.program[0]
    preflight(path)
    lib = agent_library()
    run_dir = run_directory(run.buffer)
    directory = run_dir.buffers
    built = -1  # the code maps the run's agents built and kept (-1: not known): none, none to prune
    try:
        base = program_environ()
        added = agent_environment(run, lib, directory, base, system=True)
        env = dict(base)
        env.update(added)
        started = time.monotonic()
        guard = SignalGuard(None, run.grace)  # before the program exists: see SignalGuard
        try:
            proc = subprocess.Popen([run.argv0 or path, *run.program[1:]], executable=path, env=env,
                                    preexec_fn=child_setup(no_aslr=not run.aslr), close_fds=True,
                                    stdout=run.stdout, stderr=run.stderr)
        except BaseException:
            guard.restore()
            raise
        guard.start(proc)
        named = naming_shared()  # what the warming thread names, the document then finds named
        warmer = (_Warmer(run, directory, started, lib, proc.pid, named) if os.environ.get("UALDBG_WARM") != "0"
                  else None)
        progress = Progress(directory)
        done = threading.Event()
        poller = None
        if on_progress is not None or on_directory is not None:
            def poll() -> None:
                while not done.wait(0.2):
                    if on_progress is not None:
                        total, ignored = progress.read()
                        on_progress(total, ignored, time.monotonic() - started)
                    if on_directory is not None:  # `ualdbg watch` reads the buffers' per-PC counts
                        on_directory(directory, time.monotonic() - started)
            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
        try:
            returncode = guard.wait()
        finally:
            guard.restore()
            ended = time.monotonic()
            done.set()
            if warmer is not None:
                warmer.finish()
            if poller is not None:
                poller.join()
                if on_progress is not None:
                    total, ignored = progress.read()
                    on_progress(total, ignored, ended - started)  # the final figures
                if on_directory is not None:
                    on_directory(directory, ended - started)
            progress.close()
        exit_status = returncode if returncode >= 0 else None
        exit_signal = -returncode if returncode < 0 else None
        images = load_images(directory)
        built = sum(im.code_maps[0] for im in images)
        for pid, texts in run.later_maps.items():
            newest = [im for im in images if im.header.pid == pid][-1:]
            for im in newest:  # consulted after the agent's own snapshots (SnapshotSymbolizer: newest first)
                im.snapshots[:0] = texts
        root = [im for im in images if im.header.pid == proc.pid]
        if not root:
            raise AgentNotIn(f"the agent never reported in from {os.path.basename(path)} (its dynamic loader "
                             "ignored or lost LD_PRELOAD): it ran once, untraced; --engine trap traces it under gdb",
                             exit_status, exit_signal)
        last = root[-1]
        if last.header.stripped and last.header.state == ab.EXECED:
            raise AgentNotIn(f"{os.path.basename(path)} removes LD_PRELOAD before it runs "
                             f"{last.header.note.split(': ', 1)[-1]}: it ran once, untraced there; --engine trap "
                             "traces it under gdb", exit_status, exit_signal)
        result = document(run, images, proc.pid, started, ended, exit_status, exit_signal, added, lib, named)
        if guard.received:
            # What was recorded up to then is kept: the agent's buffers are shared memory, so even
            # a program killed by SIGKILL leaves the records it had written.
            result.interrupt(guard.received[0])
            result.note(f"interrupted by {guard.received[0]}: the trace is partial")
        return AgentResult(result, exit_status, exit_signal, "")
    finally:
        run_dir.close()
        if built != 0:  # (a scan of every kept map: 11 of a 42 ms run of /bin/true)
            prune_code_maps(lib)


# --------------------------------------------------------------------------------------------
# From buffers to the TraceResult


@dataclass
class Image:
    """One process image's buffer, read into memory."""

    header: ab.Header
    sites: list[ab.SiteEntry]
    ring: bytes  # the ring's records as the agent wrote them, in sequence order (engines/records.py)
    snapshots: list[str]
    patches: list[ab.PatchEntry] = field(default_factory=list)
    patch_after: int = 0
    code_maps: tuple[int, int, int] = (0, 0, 0)  # built, read from the run's folder, from an earlier run's


def load_images(directory: str, records: bool = True, known: dict[str, int] | None = None,
                records_up_to: int | None = None) -> list[Image]:
    """Every process image's buffer in the run's directory; `records` False: without the ring's
    records (the sites so far of a run still going: _Warmer), nor with more than `records_up_to`
    of them. `known`: the sites each buffer had when last read, by path; one with no new site
    since is left out (only its header is read)."""
    images = []
    for _pid, _gen, path in ab.buffer_files(directory):
        try:
            with ab.AgentBuffer(path) as buf:
                header = buf.header()
                if known is not None:
                    if known.get(path) == header.sites_used:
                        continue
                    known[path] = header.sites_used
                ring = records and (records_up_to is None or header.head <= records_up_to)
                images.append(Image(header, list(buf.sites()), buf.record_bytes() if ring else b"",
                                    [text for _ns, text in buf.maps_snapshots()], buf.patches(), buf.patch_after(),
                                    buf.code_maps()))
        except ab.BufferError:
            continue
    return images


WARM_FIRST, WARM_EVERY = 0.02, 0.1  # seconds to the first look at a running program's sites, then between two
WARM_RECORDS = 4096  # a buffer's records read by the warming thread at most (each look reads them all)


class _Warmer:
    """While the program runs, its sites so far are named as the document will name them (their
    source lines, functions and data: image_result on the new sites alone), at the lowest CPU
    priority, so that the DWARF the document needs is read while the program runs instead of
    after it (the symbolizer's and the data namer's indexes are per file and kept: symbols/
    elfindex.py, symbols/data.py). The document then finds them read. Nothing it computes is
    kept but those indexes and what `named` keeps (naming_shared: the parsed snapshots, the source
    line of each PC, what each site's data is), which the document takes over once this thread
    has stopped; any failure ends the warming, never the run. UALDBG_WARM=0 turns it off (to
    compare)."""

    def __init__(self, run: AgentRun, directory: str, started: float, lib: str, root_pid: int,
                 named: dict[str, Any] | None = None) -> None:
        self._args = (run, directory, started, lib, root_pid)
        self._named = {} if named is None else named
        self._stop = threading.Event()
        self._seen: set[tuple[str, int]] = set()
        self._thread = threading.Thread(target=self._loop, name="ualdbg-warm", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        run, directory, started, lib, root_pid = self._args
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux)
        except OSError:
            pass
        shared: dict[Any, Any] = dict(self._named)  # its own `described`: the document describes every site
        sites_read: dict[str, int] = {}  # (a suite's hundreds of finished processes are not read again)
        try:
            wait = WARM_FIRST  # (a short program's sites are there early: most runs of a suite's are short)
            while not self._stop.wait(wait):
                wait = WARM_EVERY
                # With the records so far where they are few (a patched site's first traps): the
                # range each site touched is named too, as the document will name it if no later
                # record moves its ends.
                for image in load_images(directory, known=sites_read, records_up_to=WARM_RECORDS):
                    if out_of_scope_program(run, image.header.exe, image.header.pid == root_pid):
                        continue  # a system program the run started: its sites are not named (a suite's shells)
                    new = [site for site in image.sites if (image.header.exe, site.pc) not in self._seen]
                    if not new:
                        continue
                    modules = SnapshotSymbolizer(image.snapshots, image.header.exe or None, shared.setdefault("maps", {}))
                    decided = shared.setdefault("scope", {})  # (image_result's: by executable and module)
                    # One site at a time, the stop looked at between two: `finish` waits for the
                    # site being named, not the rest of a batch (CPython's first had 11 sites, and
                    # the document waited half a second for them at this thread's low priority).
                    for site in new:
                        if self._stop.is_set():
                            return
                        self._seen.add((image.header.exe, site.pc))
                        module = modules.module(site.pc)
                        if module is not None and decided.get((image.header.exe, module)) is False:
                            continue  # out of scope, as an earlier site of the program's found: nothing to name
                        image_result(run, replace(image, sites=[site]), started, lib, image.header.pid == root_pid,
                                     shared)
        except Exception:  # noqa: BLE001 - best effort: the document does all of it anyway
            return

    def finish(self) -> None:
        """Stop, after the site being named (its work is the document's, done already). The
        program is gone, so the site is named at ualdbg's own priority from then on: the
        lowest one left the document waiting for it on a busy machine (half a second for
        CPython's first site, which reads its indexes). Raising a thread's priority again
        needs CAP_SYS_NICE (root): without it, the wait is as before."""
        self._stop.set()
        tid = self._thread.native_id
        if tid is not None and self._thread.is_alive():  # (a tid that ended may be another's soon)
            try:
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, 0))
            except OSError:
                pass
        self._thread.join()


_BUFFER_MAPPING = re.compile(r"^[^\n]*/\d+\.\d+\.buf\n", re.M)  # the agent's buffer file (PID.GEN.buf)


def _no_elf(_path: str) -> None:
    """For a map that only tells modules apart: no ELF is read (their load bias is not needed)."""
    return None


class SnapshotSymbolizer:
    """Symbolizes the PCs of a process that is gone, from the maps snapshots its agent saved:
    the newest snapshot that maps the PC (a library unloaded later is in an older one). Which
    module a PC is in comes from the snapshots alone; ELF files and DWARF are read only for the
    PCs resolved (a fault out of scope needs neither)."""

    def __init__(self, snapshots: list[str], exe: str | None, shared: dict[Any, Any] | None = None) -> None:
        """`shared`: the snapshots already parsed for other images of the run, by their text
        and exe: the processes of one program (a test suite's) have the same maps, ASLR off."""
        self._texts = list(reversed(snapshots))
        self._exe = exe
        self._shared = {} if shared is None else shared
        self._light: dict[int, ModuleMap] = {}
        self._full: dict[int, tuple[ModuleMap, Symbolizer]] = {}
        self._cache: dict[int, tuple[int, Module] | None] = {}

    def _key(self, i: int) -> tuple[str, str | None]:
        # The one line that differs between two processes of a program: its own buffer file.
        return _BUFFER_MAPPING.sub("", self._texts[i]), self._exe

    def _light_map(self, i: int) -> ModuleMap:
        mm = self._light.get(i)
        if mm is None:
            key = ("modules", *self._key(i))
            mm = self._shared.get(key)
            if mm is None:  # a snapshot's map never changes (no reader): safe to share
                from ..symbols.maps import ModuleMap

                mm = self._shared[key] = ModuleMap.from_text(self._texts[i], main=self._exe, index_for=_no_elf)
            self._light[i] = mm
        return mm

    def _full_map(self, i: int) -> tuple[ModuleMap, Symbolizer]:
        pair = self._full.get(i)
        if pair is None:
            key = ("symbols", *self._key(i))
            pair = self._shared.get(key)
            if pair is None:
                from ..symbols.maps import ModuleMap
                from ..symbols.resolver import Symbolizer

                mm = ModuleMap.from_text(self._texts[i], main=self._exe)
                pair = self._shared[key] = (mm, Symbolizer(mm))
            self._full[i] = pair
        return pair

    def snapshots(self) -> list[ModuleMap]:
        """The parsed maps snapshots, newest first."""
        return [self._full_map(i)[0] for i in range(len(self._texts))]

    def _where(self, pc: int) -> tuple[int, Module] | None:
        """(snapshot, module) of the newest snapshot that maps `pc`."""
        if pc not in self._cache:
            self._cache[pc] = None
            for i in range(len(self._texts)):
                found = self._light_map(i).find(pc, refresh=False)
                if found is not None:
                    self._cache[pc] = (i, found)
                    break
        return self._cache[pc]

    def module(self, pc: int) -> Module | None:
        """The module that maps `pc` (its path and extent; its load bias is not read)."""
        hit = self._where(pc)
        return hit[1] if hit is not None else None

    def is_system(self, pc: int) -> bool:
        """Whether the module at `pc` is the system's (ModuleMap.is_system)."""
        hit = self._where(pc)
        if hit is None:
            return False
        i, module = hit
        if self._light_map(i).is_system(module):  # by its path: the full map says so too
            return True
        mm = self._full_map(i)[0]  # the executable's PT_INTERP may name a loader anywhere
        full = mm.find(pc, refresh=False)
        return full is not None and mm.is_system(full)

    def resolve(self, pc: int) -> SourceLoc:
        hit = self._where(pc)
        if hit is None:
            return SourceLoc(pc=pc)
        return self._full_map(hit[0])[1].resolve(pc)


class _Frozen:
    """The code at a PC as the agent saw it (a MemoryReader): the process is gone."""

    def __init__(self, pc: int, code: bytes) -> None:
        self._pc, self._code = pc, code

    def read_memory(self, addr: int, size: int) -> bytes:
        if addr != self._pc:
            raise OSError("the process is gone")
        return self._code[:size]


class SavedCode:
    """The code the agent saved at each faulting PC, decoded once per PC, and what the access of
    a trapped instruction is for the registers the agent saved (FaultRules.analyse's answer
    for a live thread)."""

    def __init__(self, code: Mapping[int, bytes], policy: Policy,
                 decoded: dict[tuple[int, bytes], Insn | None] | None = None) -> None:
        """`decoded`: instructions already decoded, by PC and code (other images of the run)."""
        self.code, self.policy = code, policy
        self._insns: Any = None  # the InstructionCache, made at the first PC decoded (capstone)
        self._decoded = {} if decoded is None else decoded

    def insn(self, pc: int) -> Insn | None:
        key = (pc, self.code.get(pc, b""))
        if key not in self._decoded:
            if self._insns is None:
                from .rules import InstructionCache

                self._insns = InstructionCache()
            self._decoded[key] = self._insns.at(_Frozen(*key), pc)
        return self._decoded[key]

    def explain(self, pc: int, regs: Mapping[str, int]) -> tuple[Insn | None, Access | None]:
        """The instruction and its access that breaks the policy (else its first access)."""
        insn = self.insn(pc)
        if insn is None:
            return None, None
        from .rules import breaking_access

        return insn, breaking_access(insn, regs, self.policy)[0]


# Programs of the system (build tools, shells, coreutils) that a traced program starts: out of the
# default scope, as system libraries are, so that `check -- make test` gates the tests, not make.
SYSTEM_PROGRAM_DIRS = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/libexec/", "/usr/lib/", "/lib/")


def out_of_scope_program(run: AgentRun, exe: str, is_root: bool) -> bool:
    """Whether a process image's faults are all out of scope: a script's interpreter, or (by
    default) a system program started by the traced one. The program named on the command line
    is always in scope."""
    real = run.real_path(exe) if exe else ""
    if real and real in run.exclude:
        return True
    if is_root or run.all_modules or not real:
        return False
    if any(os.path.basename(real) == m or real == run.real_path(m) for m in run.modules):
        return False
    return real.startswith(SYSTEM_PROGRAM_DIRS)


def user_program_path(run: AgentRun, exe: str) -> bool:
    """Whether `exe` is a program of the user's rather than of the system."""
    return bool(exe) and not out_of_scope_program(run, exe, False)


@dataclass
class ImageTrace:
    """What one process image (or several, merged) recorded: the counts, the sites, the records
    as a table, and how many faults in scope have no record (patched sites)."""

    buffer: TraceBuffer
    sites: list[Site]
    table: RecordTable
    unrecorded: int
    scope: str
    program: ProgramInfo = field(default_factory=ProgramInfo)  # the image's (a merge: the first's)


def image_result(run: AgentRun, image: Image, started: float, lib: str = "", is_root: bool = True,
                 shared: dict[Any, Any] | None = None) -> ImageTrace:
    """What the trap engine would have recorded for this image. The agent's own library is never
    in scope. `shared`: what the images of one run share (document's): parsed snapshots and
    scope decisions, so that a suite of many processes costs per distinct program, not per process."""
    h = image.header
    shared = {} if shared is None else shared
    scope = Scope(all_modules=run.all_modules, modules=tuple(run.modules))
    buf = TraceBuffer(run.buffer)
    buf.started_at = started
    symbolizer = SnapshotSymbolizer(image.snapshots, h.exe or None, shared.setdefault("maps", {}))
    saved = SavedCode({s.pc: s.code for s in image.sites}, AcPolicy(), shared.setdefault("insns", {}))
    data_at: dict[int, DataRef] = {}
    regs_at: dict[int, ab.Registers] = {}  # the registers its data was named with, per site

    agent_lib = run.real_path(lib) if lib else ""
    excluded = out_of_scope_program(run, h.exe, is_root)
    decided: dict[tuple[str, Module], bool] = shared.setdefault("scope", {})  # by (executable, module)
    # What the data is, once per site of a program: merged, a site keeps its first image's (_merge).
    described: set[tuple[str, int]] = shared.setdefault("described", set())
    names: dict[tuple[Any, ...], DataRef] = shared.setdefault("names", {})

    def name_data(va: int, pc: int, regs: ab.Registers) -> DataRef:
        """What the data at `va` is for the site at `pc` (describe_saved), named once per key:
        a warming thread's naming is the document's (naming_shared)."""
        from ..symbols.data import describe_saved, naming_view

        snapshots = symbolizer.snapshots()
        key = (h.pid, pc, va, regs.gpr, regs.seg_base, naming_view(va, pc, snapshots))
        ref = names.get(key)
        if ref is None:
            ref = names[key] = describe_saved(va, snapshots, pc, h.pid, regs.mapping())
        return ref

    def in_scope(pc: int) -> tuple[bool, str | None]:
        module = symbolizer.module(pc)
        if excluded:
            return False, module.name if module is not None else None
        if module is None:
            return scope.includes(None, False), None
        key = (h.exe, module)
        inside = decided.get(key)
        if inside is None:
            # Listed (or --all-modules) needs no answer on the module's system-ness.
            inside = decided[key] = (not (agent_lib and run.real_path(module.path) == agent_lib)
                                     and (scope.includes(module, True) or not symbolizer.is_system(pc)))
        return inside, module.name

    scoped: dict[int, bool] = {}
    for site in image.sites:
        inside, name = in_scope(site.pc)
        scoped[site.pc] = inside
        if not inside:
            buf.ignore(name, site.count)
            continue
        counter = buf.count_site(site.pc, site.count)
        site_classes(counter, site, saved.insn(site.pc))
        for regs in site.variants:
            insn, acc = saved.explain(site.pc, regs.mapping())
            if insn is not None and counter.insn is None:
                counter.insn = insn.text
            if acc is not None:
                counter.sizes.add(acc.size)
                counter.access = acc.kind if counter.access is None else counter.access.merge(acc.kind)
                if site.pc not in data_at and (h.exe, site.pc) not in described:  # what the data is (issue 9)
                    described.add((h.exe, site.pc))
                    data_at[site.pc] = name_data(acc.va, site.pc, regs)
                    regs_at[site.pc] = regs
    # The records: no Python object per record (engines/records.py). Each PC's instruction is
    # decoded once and its operands evaluated over the PC's records at once; the TraceResult's
    # records are the table, which writes its own JSON lines.
    def slow(pc: int, regs: ab.Registers) -> Access | None:
        return saved.explain(pc, regs.mapping())[1]

    from .records import table_from

    table = table_from(image.ring, started, saved.insn, saved.policy, slow, lambda pc: scoped.get(pc, False),
                       run.buffer)
    if regs_at:
        _name_ranges(data_at, regs_at, table.vas_by_pc(), name_data)
    end = h.end_ns / 1e9 if h.end_ns else time.monotonic()
    buf.stopped_at = max(started, end)
    sites = sites_of(buf, symbolizer.resolve, data_at)
    program = ProgramInfo(path=h.exe, args=list(h.argv[1:]), pid=h.pid, exit_status=h.exit_status)
    return ImageTrace(buf, sites, table, _mark_patched(sites, image, image.patch_after), scope.describe(), program)


def _name_ranges(data_at: dict[int, DataRef], regs_at: Mapping[int, ab.Registers], vas: Mapping[int, list[int]],
                 name_data: Callable[[int, int, ab.Registers], DataRef]) -> None:
    """The range of data each site touched in its records (issue 31): the lowest and the highest
    address named as its first fault's data is (`table[0].stamp+0` .. `table[3].stamp+0`), and
    how many distinct addresses; a site whose records touched one address gets none."""
    from dataclasses import replace

    from ..core.dataref import Touched

    def named(ref: DataRef) -> str:
        return f"{ref.path}+{ref.offset}" if ref.path is not None and ref.offset is not None else ref.text

    for pc, ref in list(data_at.items()):
        mine = vas.get(pc) or []
        addrs = sorted(set(mine))
        if len(addrs) < 2:
            continue
        # The site's own address (its first fault's, often an end of the range) is named with
        # the same registers already: half of these ends were that one in sqlite3 and CPython.
        low, high = (ref if a == ref.va else name_data(a, pc, regs_at[pc]) for a in (addrs[0], addrs[-1]))
        data_at[pc] = replace(ref, touched=Touched(named(low), named(high), f"{addrs[0]:#x}", f"{addrs[-1]:#x}",
                                                   len(addrs), len(mine)))


def site_classes(counter: PcCounter, site: ab.SiteEntry, insn: Insn | None) -> None:
    """A site's cost classes (issue 33) from what the agent counted: its traps and its
    trampoline's executions that spanned two lines or two pages, the locked-ness from the
    instruction; the traps it could not size are `unknown`. Nothing for an older agent's buffer."""
    from ..core.cost import UNKNOWN, split_counts
    from ..isa.costclass import is_locked, is_vector

    if site.line_splits is None:
        return
    counter.classes = split_counts(site.count - site.unclassed, site.line_splits, site.page_splits, is_locked(insn))
    if site.unclassed:
        counter.classes[UNKNOWN] = site.unclassed
    counter.vector = is_vector(insn)


def _state(h: ab.Header) -> str:
    return {ab.RUNNING: "ended without exit", ab.EXITED: "exited", ab.EXECED: "exec"}.get(h.state, "?")


def naming_shared() -> dict[str, Any]:
    """What image_result keeps that depends on nothing but its key, so that a warming thread's work
    is the document's (_Warmer): the parsed maps snapshots and their symbolizers (by the
    snapshot's text), decoded instructions (by PC and bytes), scope decisions (by executable and
    module), and each site's data named (by process, PC, address, registers and snapshots)."""
    return {"maps": {}, "insns": {}, "scope": {}, "names": {}}


def document(run: AgentRun, images: list[Image], root_pid: int, started: float, ended: float,
             exit_status: int | None, exit_signal: int | None, env_added: dict[str, str], lib: str,
             named: dict[str, Any] | None = None) -> TraceResult:
    """The trace of a run: the trap engine's, per process image, merged, with the agent's own
    sections: every process image, what the agent did, and notes for the reader."""
    # A system program named on the command line (make, a shell, env) that ran programs of the
    # user's is a driver, like a script's interpreter: those programs are traced, not it.
    def user_program(im: Image) -> bool:
        return bool(im.header.exe) and not out_of_scope_program(run, im.header.exe, False)
    root_exe = next((im.header.exe for im in images if im.header.pid == root_pid), "")
    driver = (not run.all_modules and not user_program_path(run, root_exe)
              and any(im.header.pid != root_pid and user_program(im) for im in images))
    shared: dict[Any, Any] = dict(named or {})
    results = [image_result(run, image, started, lib, is_root=image.header.pid == root_pid and not driver, shared=shared)
               for image in images]
    one = results[0] if len(results) == 1 else merge_results(results, run.buffer)
    one.buffer.started_at, one.buffer.stopped_at = started, max(started, ended)
    result = TraceResult.of_buffer(
        one.buffer, engine=NAME, debugger="none", arch=os.uname().machine, version=__version__,
        program=ProgramInfo(path=run.program[0], args=list(run.program[1:]), pid=root_pid, exit_status=exit_status,
                            exit_signal=exit_signal),
        scope=one.scope, sites=one.sites, recording=True, records=one.table, unrecorded=one.unrecorded)
    result.blind_spots = blind_spots(images, lambda im: not out_of_scope_program(
        run, im.header.exe, im.header.pid == root_pid and not driver))
    agent_sections(result, run, images, results, one.unrecorded, lib, env_added)
    notes: list[str] = []
    system = sorted({os.path.basename(im.header.exe) for im in images
                     if (im.header.pid != root_pid or driver) and out_of_scope_program(run, im.header.exe, False)
                     and run.real_path(im.header.exe) not in run.exclude})
    if system:
        unarmed = " (they ran unarmed: none of their faults was counted)" if any(im.header.system for im in images) else ""
        notes.append(f"system programs it started ({', '.join(system)}) are out of scope, as system libraries are"
                     f"{unarmed}: --all-modules (or --module NAME) includes them")
    if any(not im.header.armed and not im.header.system for im in images):
        notes.append("some processes never reached their arming point (main): nothing was traced in them")
    assert result.agent is not None
    patching = result.agent.patching
    # The summary's counts are exact with patching: what it changes is the records, which only the
    # JSON and `report` show. So the note says so there only, when records are missing, and counts
    # the sites in scope (the patches of system libraries' sites are no concern of the report).
    unrecorded = patching.faults_in_scope_without_record
    patched_here = [s for s in result.sites if s.patched]
    if patched_here and unrecorded:
        result.agent = replace(result.agent, patching=replace(patching, note=(
            f"{_plural(len(patched_here), 'hot site')} in scope {'was' if len(patched_here) == 1 else 'were'} patched "
            f"after {run.patch_after} traps: their counts are exact, but {_plural(unrecorded, 'fault')} in scope "
            f"{'has' if unrecorded == 1 else 'have'} no record (--no-patch: one trap and one record per fault)")))
    result.notes = notes
    return result


def _process_note(h: ab.Header) -> str | None:
    """The agent's note on a process image, and whether it ran unarmed as a system program."""
    notes = [h.note] if h.note else []
    if h.system:
        notes.append("a system program: out of scope, run unarmed")
    return "; ".join(notes) or None


def agent_sections(result: TraceResult, run: AgentRun, images: list[Image], results: list[ImageTrace],
                   unrecorded: int, lib: str, env_added: dict[str, str]) -> None:
    """The document's `processes` (each image, its counts and end) and `agent` (what the agent did:
    out-of-scope traps, threads, patching) sections, for a run from the shell and for a debugger's
    `trace start` (engines/agentlink.py: with `env_added` empty when it was injected)."""
    result.processes = [Process(
        pid=im.header.pid, ppid=im.header.ppid, image=im.header.gen, path=im.header.exe, args=list(im.header.argv[1:]),
        faults_total=r.buffer.total, faults_ignored=r.buffer.ignored, armed=im.header.armed, end=_state(im.header),
        note=_process_note(im.header)) for im, r in zip(images, results)]
    result.agent = AgentSummary(
        library=lib,
        environment_added=env_added,
        follow_children=run.follow,
        armed_at=run.at,
        out_of_scope=OutOfScope(
            traps=sum(im.header.ignored for im in images),
            routine_calls_run_unarmed=sum(im.header.skipped_calls for im in images),
            # off with --all-modules, when asked, and under a CET shadow stack (the agent's call)
            skipping=not run.all_modules and all(not im.header.flags & ab.F_NOSKIP for im in images)),
        emulated=sum(im.header.emulated for im in images),
        single_stepped=sum(im.header.stepped for im in images),
        threads=sum(im.header.threads for im in images),
        threads_started_with_sigbus_blocked=sum(im.header.unarmed_threads for im in images),
        sites_dropped=sum(im.header.dropped_sites for im in images),
        patching=_patching_summary(run, images, unrecorded))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def blind_spots(images: list[Image], in_scope: Callable[[Image], bool] = lambda im: True) -> list[BlindSpot]:
    """What the agents of a run say they did not see (issue 29; ualdbg_agent.h, the blind-spot
    counters) in the images whose faults count (`in_scope`: not a system program the run merely
    started, whose faults are ignored anyway), and the processes that should have reported in and
    did not, whoever started them: a child counted by its parent with no buffer of its own, an
    exec whose new image never started the agent."""
    out: list[BlindSpot] = []
    by_pid: dict[int, list[Image]] = {}
    children: dict[int, set[int]] = {}  # the pids that reported in, by the pid that started them
    for im in images:
        by_pid.setdefault(im.header.pid, []).append(im)
        if im.header.ppid != im.header.pid:
            children.setdefault(im.header.ppid, set()).add(im.header.pid)
    for im in images:
        h, b = im.header, im.header.blind
        who = f"{os.path.basename(h.exe) or '?'} (pid {h.pid})"
        if not in_scope(im):
            b = ab.Blind(children=b.children, children_untraced=b.children_untraced, flags=b.flags & ab.B_EXEC_FOREIGN)
        if b.events:
            still = f", {b.now} still so at its end" if b.now else ""
            out.append(BlindSpot(
                "sigbus-blocked", f"{who}: {_plural(b.threads, 'thread')} blocked SIGBUS {_plural(b.events, 'time')} "
                f"while armed ({b.ns / 1e9:.3f} s unwatched{still}): unaligned accesses there were not seen",
                b.events, threads=b.threads, seconds=b.ns / 1e9, pid=h.pid, path=h.exe))
        if b.handler_events:
            out.append(BlindSpot(
                "handler-unarmed", f"{who}: its signal handlers ran {_plural(b.handler_events, 'time')} with SIGBUS "
                f"blocked ({b.handler_ns / 1e9:.3f} s unwatched): unaligned accesses there were not seen",
                b.handler_events, seconds=b.handler_ns / 1e9, pid=h.pid, path=h.exe))
        if b.flags & ab.B_SIGBUS_TAKEN:
            out.append(BlindSpot(
                "sigbus-taken", f"{who}: its SIGBUS action was no longer the agent's (set without libc's sigaction): "
                "unaligned accesses after that went to the program", 1, pid=h.pid, path=h.exe))
        if h.dropped_sites and in_scope(im):
            out.append(BlindSpot(
                "uncounted-faults", f"{who}: {_plural(h.dropped_sites, 'fault')} at PCs beyond the agent's site table "
                "were single-stepped and not counted", h.dropped_sites, pid=h.pid, path=h.exe))
        if h.state == ab.EXECED and not any(o.header.gen == h.gen + 1 for o in by_pid[h.pid]):
            target = h.note.split(": ", 1)[-1] or "a program"
            why = ("without the agent in LD_PRELOAD" if h.stripped else
                   "an ELF the agent cannot be loaded into (32-bit, another machine)" if b.flags & ab.B_EXEC_FOREIGN
                   else "which never started the agent (static, setuid, or a seccomp filter)")
            out.append(BlindSpot("untraced-process", f"{who}: exec'd {target}, {why}: it ran untraced", 1,
                                 pid=h.pid, path=target))
    for pid, ims in by_pid.items():
        who = f"{os.path.basename(ims[-1].header.exe) or '?'} (pid {pid})"
        expected = sum(im.header.blind.children for im in ims)
        reported = len(children.get(pid, ()))
        if expected > reported:
            out.append(BlindSpot(
                "untraced-process", f"{who}: {expected - reported} of the {_plural(expected, 'process', 'processes')} "
                "it started with the agent never reported in (a static or setuid program, or a seccomp filter that "
                "keeps the agent from its buffer): they ran untraced", expected - reported, pid=pid))
        untraced = sum(im.header.blind.children_untraced for im in ims)
        if untraced:
            out.append(BlindSpot(
                "untraced-process", f"{who}: {_plural(untraced, 'process', 'processes')} it started ran without the agent "
                "(an ELF it cannot be loaded into, or an environment without LD_PRELOAD)", untraced, pid=pid))
    return out


def _mark_patched(sites: list[Site], image: Image, patch_after: int) -> int:
    """Sites the agent patched (issue 21): their count is exact, but only the faults that trapped
    (the first patch_after, and any the trampoline sent back to the trap) have records; a site
    left trapping says why (the agent's refusal, or too few traps in this process to be patched:
    issue 34). Returns how many faults have none: they did not fall out of the ring
    (TraceResult.records_dropped)."""
    patched = {s.pc: s for s in image.sites if s.patched or s.flags & ab.SITE_PATCHED}
    refused = {p.pc: p.reason for p in image.patches if p.state == ab.PATCH_REFUSED}
    unrecorded = 0
    for site in sites:
        entry = patched.get(site.loc.pc)
        if entry is not None:
            site.patched = True
            site.trapped = entry.traps
            unrecorded += entry.patched
        elif site.loc.pc in refused:
            site.unpatchable = refused[site.loc.pc]  # why it traps at every fault
        elif patch_after and site.count <= patch_after:
            site.unpatchable = FEW_TRAPS
    return unrecorded


def _patching_summary(run: AgentRun, images: list[Image], unrecorded: int) -> Patching:
    """What hot-site patching did, over every process image."""
    refused: dict[str, int] = {}
    patched = counted = 0
    for im in images:
        for p in im.patches:
            if p.state == ab.PATCH_ACTIVE:
                patched += 1
                counted += p.count
            elif p.reason is not None:
                refused[p.reason] = refused.get(p.reason, 0) + 1
    maps = [sum(im.code_maps[k] for im in images) for k in range(3)]
    return Patching(after_traps=run.patch_after, sites_patched=patched, faults_counted_by_patches=counted,
                    unpatchable=dict(sorted(refused.items())), faults_in_scope_without_record=unrecorded,
                    code_maps=dict(zip(("built", "read_from_run", "read_from_earlier_run"), maps)))


def add_up(buf: TraceBuffer, sites: dict[tuple[str | None, int | None, int], Site], counted: TraceBuffer,
           more: list[Site]) -> None:
    """One part's counts (`counted`) into `buf` and its sites into `sites`: the same code (module,
    offset, PC) is one site (merge_results, and agentlink.combine for the debugger's and the agent's)."""
    buf.total += counted.total
    buf.ignored += counted.ignored
    for k, v in counted.ignored_by_module.items():
        buf.ignored_by_module[k] = buf.ignored_by_module.get(k, 0) + v
    for s in more:
        key = (s.loc.module_name, s.loc.offset, s.loc.pc)
        have = sites.get(key)
        if have is None:
            sites[key] = replace(s)
        else:
            have.absorb(s)


def merge_results(results: list[ImageTrace], capacity: int) -> ImageTrace:
    """Several images: sites of the same code (module, offset, PC) add up; records interleave by
    time in one ring of the same capacity."""
    from .records import merged

    sites: dict[tuple[str | None, int | None, int], Site] = {}
    buf = TraceBuffer(capacity)
    for r in results:
        add_up(buf, sites, r.buffer, r.sites)
    # Records are numbered by trap: the faults patched sites counted without a record (issue 21)
    # are not among them. Ordered by (time, pid, seq), the last `capacity` kept (engines/records.py).
    unrecorded = sum(r.unrecorded for r in results)
    tables = [r.table for r in results]  # image_result's, all with the same start
    table = merged(tables, tables[0].started, capacity, buf.total - unrecorded)
    return ImageTrace(buf, sorted(sites.values(), key=lambda s: (-s.count, s.loc.pc)), table, unrecorded,
                      results[0].scope, results[0].program)
