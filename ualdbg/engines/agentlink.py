"""The in-process agent inside a debugger (issue 32): `ualdbg trace start` loads it at launch
through the program's environment, or injects it into the stopped process with the debugger's
own inferior calls (dlopen, then `ualdbg_agent_inject`, as `trace --pid` does with ptrace:
cli/inject.py), and has the debugger pass SIGBUS to the program without stopping: a fault then
costs the agent's one signal, a patched hot site nothing. Its buffers are read into TraceResults
(engines/agent.py) whenever a command asks; `off` and a detach release it as `--pid`'s detach
does (disarm, AC cleared in every thread, release: the program's signal actions and code back)."""
from __future__ import annotations

import os
import struct
import time
from collections.abc import Mapping
from dataclasses import field, replace
from typing import Any, Protocol

from ..agent import rundir
from ..agent.presence import creating_note, creating_thread, elf_function, elf_symbol, libc_symbol, loaded_agents
from ..core.result import Record, Site, TraceResult
from ..core.target import LiveThreads, StringCalls, Target, offers
from ..core.trace import TraceBuffer
from ..isa import arch as archmod
from ..isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP
from ..lazyclass import dataclass
from .agent import (
    ENV_CONFIG,
    AgentRun,
    AgentUnavailable,
    Image,
    ImageTrace,
    add_up,
    agent_environment,
    agent_library,
    agent_sections,
    image_result,
    injection_problem,
    load_images,
    merge_results,
    preflight,
    run_directory,
)
from .procfs import (
    QUIET_SYSCALLS,
    blocked_signals,
    same_pid_namespace,
    sigbus_blocked,
    status_field,
    syscall_of,
    system_ranges,
)
from .threadbirth import AddressWatcher, ThreadBirths, hold_owed, park_others, unpark

RTLD_NOW = 2
FUTEX = 202  # x86-64
ENV_NAMES = ("LD_PRELOAD", ENV_CONFIG)


class AgentHost(AddressWatcher, Protocol):
    """What the agent asks of the debugger it runs under (each adapter offers one), and the
    breakpoints that never stop (threadbirth.AddressWatcher)."""

    def launch_environment(self) -> dict[str, str]:
        """The variables `run` would add to or change in the program's environment that the
        agent's own touch (LD_PRELOAD): NAME -> VALUE, as the user set them in the debugger."""
        ...

    def set_launch_environment(self, values: Mapping[str, str | None]) -> None:
        """Set these variables for the next `run` (None: unset)."""
        ...

    def pass_sigbus(self, on: bool) -> None:
        """True: SIGBUS goes to the program without stopping the debugger (the agent handles
        it); False: the user's own settings again."""
        ...


@dataclass
class Arming:
    """One `trace start` through the agent: its configuration, library and run directory."""

    run: AgentRun
    lib: str
    directory: rundir.RunDir
    how: str  # "loaded at launch" | "injected"
    started: float = field(default_factory=time.monotonic)
    pid: int | None = None
    released: bool = False


ARMED, BLOCKED, CREATING = "armed", "blocked", "creating"  # what arm_thread did


@dataclass(frozen=True)
class Injected:
    """What an injection armed, and what it could not watch (said, never silent): threads that
    blocked SIGBUS (armed when they unblock it through a wrapped call, `sigprocmask`; not when
    libc unblocks it itself, as pthread_create does), and the other threads the debugger let run
    during dlopen (their faults meanwhile went uncounted)."""

    armed: tuple[int, ...]
    blocked: tuple[int, ...]
    ran: tuple[int, ...]
    creating: tuple[int, ...] = ()
    later: tuple[int, ...] = ()  # armed once out of pthread_create, or once born (threadbirth.py)

    def notes(self) -> list[str]:
        out = []
        if self.creating:
            out.append(f"ualdbg: {creating_note(self.creating)}")
        if self.ran:
            out.append(f"ualdbg: {len(self.ran)} other thread(s) ran while the agent was loaded (one may hold a lock "
                       "of libc's or the loader's that dlopen takes): faults they made meanwhile were not counted")
        if self.blocked:
            out.append(f"ualdbg: thread(s) {', '.join(map(str, self.blocked))} block SIGBUS now, not armed: armed when "
                       "they unblock it through sigprocmask or pthread_sigmask; their faults, and those of threads "
                       "they start, go uncounted until then (and if libc unblocks it itself, as pthread_create does)")
        return out


class AgentLink:
    """The agent of one debugger session: armed (waiting for `run`, or in the process), or the
    buffers of earlier armings kept until the trace is cleared."""

    def __init__(self) -> None:
        self.armings: list[Arming] = []
        self.current: Arming | None = None
        self.user_env: dict[str, str | None] = {}  # the user's own values of the variables set
        self.note: str | None = None  # why the last release was incomplete, for `status`
        self.creating: set[int] = set()  # threads left unarmed inside pthread_create (arm_thread)
        self.births = ThreadBirths()  # threads in pthread_create and their new ones, armed when safe
        self.execed: set[int] = set()  # processes that ran a new program while an injected agent traced
        self.frames = TrampolineFrames()  # (program_frame)

    # -- state -------------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """Whether the agent traces (or will trace, at launch) now."""
        return self.current is not None

    @property
    def waiting(self) -> bool:
        """Armed for the next `run`, no process yet."""
        return self.current is not None and self.current.pid is None

    def describe(self) -> str:
        c = self.current
        if c is None:
            return "off"
        if c.pid is None:
            return "the in-process agent, loaded at the next run"
        if not os.path.exists(f"/proc/{c.pid}") and c.how == "loaded at launch":
            return f"the in-process agent (process {c.pid} has ended; loaded again at the next run)"
        return f"the in-process agent ({c.how} into process {c.pid}; SIGBUS passed to it without stopping)"

    def problem(self, program: str | None, target: Target | None) -> str | None:
        """Why the agent cannot trace here (then the trap engine does), or None."""
        if target is not None and target.pid() is not None:
            if target.maps_text() is None:
                return "the program runs under a remote stub (qemu): the agent is loaded only into local processes"
            if archmod.arch_info(target.arch()).name != "x86_64":
                return f"the agent runs in x86-64 programs, not {target.arch()}"
            pid = target.pid()
            assert pid is not None
            why = injection_problem(pid)
            if why is None and not offers(target, StringCalls):
                why = "this debugger cannot call functions in the program"
            if why is None and offers(target, LiveThreads) and target.running_threads():
                # gdb's non-stop mode: the call that loads the agent would run beside threads
                # that run on (or that ualdbg holds with a signal gdb reports during the call).
                why = "threads run on (non-stop mode): the agent is injected only with every thread stopped"
            if why is not None:
                return why
        elif program:
            try:
                preflight(program)
            except AgentUnavailable as exc:
                return str(exc)
            except OSError as exc:
                return f"{program}: {exc.strerror}"
        else:
            return "no program is loaded"
        try:
            agent_library()
        except AgentUnavailable as exc:
            return str(exc)
        return None

    # -- arming --------------------------------------------------------------------------------
    def prepare_launch(self, host: AgentHost, run: AgentRun) -> None:
        """Load the agent at the next `run`: LD_PRELOAD and its configuration in the program's
        environment (follow=2: the process keeps them, so that an exec of its own loads the
        agent again in the new program, which the debugger follows; its children drop them and
        run without it, as the debugger does not follow them), SIGBUS passed without a stop."""
        lib = agent_library()
        directory = run_directory()
        user = host.launch_environment()
        self.user_env = {name: user.get(name) for name in ENV_NAMES}
        run = replace(run, follow=False, follow_exec=True)  # its own execs carry the agent, nothing it starts
        added = agent_environment(run, lib, directory.buffers, user)
        host.set_launch_environment(added)
        host.pass_sigbus(True)
        self.current = Arming(run, lib, directory, "loaded at launch")
        self.armings.append(self.current)

    def launched(self, pid: int) -> None:
        """A process of a run the agent was loaded at launch for exists (each `run` again):
        its clock starts, and the trace is this process's."""
        c = self.current
        if c is not None and c.how == "loaded at launch" and c.pid != pid:
            c.pid = pid
            c.started = time.monotonic()
        elif c is not None and c.how == "injected" and c.pid == pid:
            self.execed.add(pid)  # a new program in the process: the injected agent is not in it

    def inject(self, host: AgentHost, target: Target, run: AgentRun, later: frozenset[int] = frozenset()) -> Injected:
        """Load the agent into the stopped process and arm every thread that does not block
        SIGBUS (except `later`: threads to arm once they ran their instruction, `arm_thread`).
        AgentUnavailable (nothing left in the process but an inert library) when it could not
        start."""
        pid = target.pid()
        assert pid is not None and offers(target, StringCalls)
        lib = agent_library()
        value = elf_symbol(lib, "ualdbg_agent_inject")
        if value is None:
            raise AgentUnavailable(f"{lib} has no ualdbg_agent_inject")
        try:
            dlopen = libc_symbol(pid, "dlopen")
        except (LookupError, OSError) as exc:
            raise AgentUnavailable(str(exc)) from None
        directory = run_directory()
        try:
            config = agent_environment(run, lib, directory.buffers, {})[ENV_CONFIG]
            if same_pid_namespace(pid):
                # The agent watches the debugger (this process) and disarms itself if it dies
                # without releasing it (SIGKILL, OOM): no thread left with AC, as `--pid` does.
                config += ";watch=1"
            # The others stay stopped (not armed yet, they would fault unseen) unless one may
            # hold a lock dlopen takes: then they run during it, as `trace --pid` lets them.
            caller = calling_thread(target, pid, later)
            busy = lock_holders(target, pid, caller)
            parking = park_others(host, target, pid, later, caller) if busy else None
            # A thread owed its step past a fault stays there through both calls: lldb takes that
            # step (its plan, queued on the thread) during a call, alone or not, before the agent
            # is live to arm it (2 threads at faults: one's 999 of 1000 lost, every run).
            unheld = hold_owed(host, later - {caller}) if parking is None else []
            try:
                try:
                    handle = target.call_with_strings(dlopen, [os.fsencode(lib), RTLD_NOW], alone=not busy, tid=caller)
                finally:
                    if parking is not None:
                        unpark(host, target, parking)
                if not handle:
                    raise AgentUnavailable(f"dlopen of the agent failed in process {pid}")
                bias = struct.unpack("<Q", target.read_memory(handle, 8))[0]  # struct link_map's l_addr
                rc = target.call_with_strings(bias + value, [config.encode()], alone=True, tid=caller) & 0xFFFFFFFF
            finally:
                host.hold([])
            if rc == 0xFFFFFFFE:
                raise AgentUnavailable(f"process {pid} is already traced by another ualdbg's agent")
            if rc != 0:
                raise AgentUnavailable(f"the agent could not start in process {pid} (no buffer)")
        except BaseException:
            directory.close()
            raise
        self.current = Arming(run, lib, directory, "injected", pid=pid)
        self.armings.append(self.current)
        host.pass_sigbus(True)
        out: dict[str, list[int]] = {ARMED: [], BLOCKED: [], CREATING: []}
        # (a thread owed its step past a fault that was held at its exit from libc took that step)
        stepped = set(later) & set(parking.parked) if parking is not None else set()
        for tid in target.threads():
            if (tid not in later or tid in stepped) and not _agents_own(pid, tid):
                out[self.arm_thread(target, tid)].append(tid)
        ran = ([t for t in target.threads() if t != caller and (parking is None or t in parking.loose)]
               if busy else unheld)
        # A thread armed once past its fault (`later`) may be inside pthread_create too (a fault
        # of libc's there, in a memset): the watch arms it when the call returns.
        creating = out[CREATING] + [t for t in later if _inside_create(target, pid, t)]
        waited = self.births.watch(host, target, pid, creating, out[BLOCKED], self._arm_out_of_creation)
        self.creating.difference_update(waited)
        return Injected(tuple(out[ARMED]), tuple(t for t in out[BLOCKED] if t not in waited), tuple(ran),
                        tuple(t for t in out[CREATING] if t not in waited), tuple(sorted(waited)))

    def _arm_out_of_creation(self, target: Target, tid: int) -> str:
        return self.arm_thread(target, tid, creating=False)

    def arm_thread(self, target: Target, tid: int, creating: bool = True) -> str:
        """Set AC in one thread of the process the agent traces (ARMED), unless it blocks SIGBUS
        (BLOCKED: the agent arms it when it unblocks it, through its wrappers) or is inside
        libc's pthread_create (CREATING: presence.creating_thread; `creating` False: known
        not to be, threadbirth.BirthWatch)."""
        pid = target.pid()
        if self.current is None or pid is None:
            return BLOCKED
        # (first: inside pthread_create a thread blocks every signal around the clone, and is
        # no thread being born: the thread it makes would go unarmed if it were taken for one)
        if creating and _inside_create(target, pid, tid):
            if not self.births.waits_for(tid):  # (else armed as the call returns)
                self.creating.add(tid)
            return CREATING
        if sigbus_blocked(pid, tid):
            return BLOCKED
        flags = archmod.trap_flags("x86_64")
        assert flags is not None
        value = target.read_register(flags.register, tid)
        if not value & flags.ac_bit:
            target.write_register(flags.register, value | flags.ac_bit, tid)
        return ARMED

    def release(self, host: AgentHost, target: Target | None) -> str | None:
        """`off`, `trace stop`, `break` (the debugger stops at faults again) or a detach: the
        agent disarmed and made inert in the process, as `--pid`'s detach does; the environment
        and SIGBUS settings the user had. Returns a line when something could not be done."""
        c = self.current
        if c is None:
            return None
        self.current = None
        c.released = True
        said = None
        self.births.unwatch()
        host.set_launch_environment(self.user_env)
        host.pass_sigbus(False)
        if c.pid is None or target is None or target.pid() != c.pid:
            return None
        try:
            said = _release_in(target, c)
        except Exception as exc:  # a call that did not complete: the process keeps running
            said = f"ualdbg: the agent could not be released in process {c.pid}: {exc}"
        self.note = said
        return said

    def clear(self) -> None:
        """Forget the buffers of released armings (a new trace starts)."""
        keep = [a for a in self.armings if a is self.current]
        for a in self.armings:
            if a not in keep:
                a.directory.close()
        self.armings = keep
        self.creating.clear()
        self.execed.clear()

    def close(self) -> None:
        self.frames.close()
        for a in self.armings:
            a.directory.close()
        self.armings = []
        self.current = None

    # -- reading -----------------------------------------------------------------------------
    def program_frame(self, target: Target, pc: int, rsp: int) -> tuple[int, int] | None:
        """A thread at `pc` inside one of the agent's patch trampolines: (the program's
        instruction it stands for, the program's rsp there), for a debugger's unwinder; None
        elsewhere. The slots are learnt from the live patch table (agent/trampoline.py)."""
        c = self.current or (self.armings[-1] if self.armings else None)
        return None if c is None else self.frames.frame(c.directory.buffers, target, pc, rsp)

    def totals(self) -> tuple[int, int]:
        """(faults in scope, faults ignored) over every arming's buffers, read live."""
        from ..agent import buffer as ab

        total = ignored = 0
        for a in self.armings:
            for _pid, _gen, path in ab.buffer_files(a.directory.buffers):
                try:
                    with ab.AgentBuffer(path) as buf:
                        t, i = buf.progress()
                except ab.BufferError:
                    continue
                total, ignored = total + t, ignored + i
        return total, ignored

    def results(self) -> list[ImageTrace]:
        """What every arming recorded, one ImageTrace per process image (engines/agent.py)."""
        return [r for _a, _image, r in self._traces()]

    def _traces(self) -> list[tuple[Arming, Image, ImageTrace]]:
        shared: dict[Any, Any] = {}
        out = []
        for a in self.armings:
            images = load_images(a.directory.buffers)
            # Loaded at launch and `run` again: the trace is the last process's (the debugger
            # told its pid, else the newest buffer's).
            pid = a.pid if a.pid is not None else (images[-1].header.pid if images else None)
            for image in images:
                if image.header.pid != pid:
                    continue
                # Loaded at launch: the trace starts when the process started the agent (its
                # clock, CLOCK_MONOTONIC as Python's), not at `trace start`.
                h = image.header
                started = (h.start_ns / 1e9) if a.how == "loaded at launch" and h.start_ns else a.started
                out.append((a, image, image_result(a.run, image, started, a.lib, is_root=True, shared=shared)))
        return out

    def sections(self, result: TraceResult) -> None:
        """The agent's sections of the document (`processes`, `agent`), as the shell's `trace`
        writes them (engines/agent.agent_sections), over every arming's images; the last
        arming's configuration. Its `notes` are a list, empty when nothing is to be said; an
        injected agent's process that exec'd is said (the new program has no agent)."""
        traces = self._traces()
        if traces:
            last = traces[-1][0]
            user = {k: v for k, v in self.user_env.items() if v is not None}
            added = agent_environment(last.run, last.lib, last.directory.buffers, user) if last.how == "loaded at launch" else {}
            agent_sections(result, last.run, [i for _a, i, _r in traces], [r for _a, _i, r in traces],
                           sum(r.unrecorded for _a, _i, r in traces), last.lib, added)
        if result.notes is None:
            result.notes = []
        for a in self.armings:
            if a.how == "injected" and a.pid is not None and a.pid not in self.execed and not a.released:
                # (lldb tells no exec without its stop hook: a live process without the agent ran one)
                state = status_field(a.pid, "State")
                if state is not None and not state.startswith(("Z", "X")) and not loaded_agents(a.pid):
                    self.execed.add(a.pid)
            if a.how == "injected" and a.pid in self.execed:
                result.note(f"process {a.pid} ran a new program (exec): the agent injected into the old one is not in "
                            "it, so the new program's faults were not counted (`ualdbg trace start` again, stopped in "
                            "it, counts them)")


def _inside_create(target: Target, pid: int, tid: int) -> bool:
    return creating_thread(pid, target.read_register("rip", tid), target.read_register("rsp", tid), target.read_memory)


def finish_steps(c: Arming | None, target: Target) -> list[int]:
    """At a stop the user sees: the threads whose single-step by the agent (TF set by its
    handler, to re-arm after running a faulting instruction with AC clear) the debugger took
    as a step of its own, so that the agent never saw its trap; the step finished for the
    agent here, TF cleared and AC set, as its SIGTRAP handler would. gdb does this when it
    steps an instruction that faults: it steps over the passed SIGBUS by a breakpoint on the
    instruction, and then steps the instruction. Without this the thread keeps TF (the next
    `continue` stops with SIGTRAP) and AC clear (its faults are not counted). A thread still
    at the PC it faulted at has its trap to come: left alone."""
    from ..agent import buffer as ab

    pid = target.pid()
    if c is None or c.pid is None or pid != c.pid:
        return []
    flags = archmod.trap_flags("x86_64")
    assert flags is not None
    images = [path for file_pid, _gen, path in ab.buffer_files(c.directory.buffers) if file_pid == pid]
    if not images:
        return []
    try:
        with ab.AgentBuffer(images[-1]) as buf:  # the process's image now (an exec makes a new one)
            listed = buf.steps()
    except ab.BufferError:
        return []
    done = []
    readable = set(target.threads())
    for tid, pc in listed:
        if tid not in readable:
            continue
        value = target.read_register(flags.register, tid)
        if not value & flags.tf_bit or target.read_register("rip", tid) == pc:
            continue
        target.write_register(flags.register, (value & ~flags.tf_bit) | flags.ac_bit, tid)
        done.append(tid)
    return done


SIGBUS_ENTRY = "ualdbg_sigbus_entry"  # agent/src/agent/entry.S: AC and TF cleared, then on_sigbus_c
UC_RIP = 168  # offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]) on x86-64 Linux
_entries: dict[tuple[int, str, int], tuple[int, int] | None] = {}  # (pid, agent file, load address) -> [lo, hi)


def _sigbus_entry(pid: int, pc: int) -> bool:
    """Whether `pc` is inside the SIGBUS handler's entry of an agent loaded in `pid` (its four
    instructions: the handler's arguments are still in rdi, rsi, rdx there)."""
    for agent in loaded_agents(pid):
        key = (pid, agent.file, agent.bias)
        if key not in _entries:
            try:  # (a hidden function: the agent's .symtab)
                found = elf_function(agent.file, SIGBUS_ENTRY, (".dynsym", ".symtab")) if agent.file else None
            except OSError:
                found = None
            _entries[key] = None if found is None else (agent.bias + found[0], agent.bias + found[0] + max(found[1], 1))
        span = _entries[key]
        if span is not None and span[0] <= pc < span[1]:
            return True
    return False


def handler_step_end(target: Target, tid: int, pc: int) -> int | None:
    """A debugger's instruction step that ended in the entry of the agent's SIGBUS handler: the
    stepped instruction faulted, and lldb steps into the handler of a signal it passes (the
    kernel reports the step at the handler's first instruction; gdb steps over the handler).
    Where the step ends instead: the faulting instruction's one successor, once the handler
    (which counts the fault) and the instruction have run. None when `pc` is not in that
    entry, or the instruction has no one successor (a branch, a rep string instruction)."""
    from ..isa.arch.x86_64 import X86Decoder

    pid = target.pid()
    try:  # (the register first: the agent's maps and symbols are read only when it holds SIGBUS)
        if pid is None or target.read_register("rdi", tid) != SIGBUS or not _sigbus_entry(pid, pc):
            return None  # (rdi: the handler's first argument, the signal)
        fault = struct.unpack("<Q", target.read_memory(target.read_register("rdx", tid) + UC_RIP, 8))[0]
        insn = X86Decoder().decode(target.read_memory(fault, 15), fault)
    except (RuntimeError, OSError, ValueError, struct.error):
        return None
    if insn is None or insn.rep or insn.flow != "next":
        return None
    return int(insn.next_pc)


RT_SIGRETURN = bytes.fromhex("48c7c00f0000000f05")  # __restore_rt: mov $15, %rax; syscall
UC_SIGINFO = 304  # at a handler's return, rsp is its ucontext (304 bytes), then its siginfo


def returning_from_fault(target: Target, tid: int, pc: int) -> bool:
    """Whether a thread stopped at the start of the C library's signal return (__restore_rt) is
    coming back from an alignment fault the agent handled: a debugger's line step over a faulting
    instruction that lldb left there ("step over failed"), the handler run, the sigreturn to come."""
    pid = target.pid()
    try:  # (the bytes and the frame first: the maps are read only for such a stop)
        if pid is None or target.read_memory(pc, len(RT_SIGRETURN)) != RT_SIGRETURN:
            return False
        signo, _errno, code = struct.unpack("<iii", target.read_memory(target.read_register("rsp", tid) + UC_SIGINFO, 12))
    except (RuntimeError, OSError, ValueError, struct.error):
        return False
    return signo == SIGBUS and code == BUS_ADRALN and bool(loaded_agents(pid))


class TrampolineFrames:
    """The patch trampolines of the process a debugger shows (agent/trampoline.py), learnt from
    its buffer's live patch table at most once per stop (gdb's unwinder asks per frame)."""

    def __init__(self) -> None:
        self._tramps: tuple[int, Any, Any] | None = None  # pid, its Trampolines, its OpenBuffers
        self._read = 0.0

    def frame(self, directory: str, target: Target, pc: int, rsp: int) -> tuple[int, int] | None:
        from ..agent import buffer as ab
        from ..agent.trampoline import Trampolines

        pid = target.pid()
        if pid is None:
            return None
        if self._tramps is None or self._tramps[0] != pid:
            self.close()
            self._tramps = (pid, Trampolines(target.read_memory), ab.OpenBuffers())
        _pid, tramps, buffers = self._tramps
        now = time.monotonic()
        if now - self._read > 0.2:
            self._read = now
            for buf in buffers.each(directory):
                if buf.header().pid == pid:
                    tramps.learn(p.trampoline for p in buf.patches())
        return tramps.context(pc, rsp)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._tramps is not None:
            self._tramps[2].close()
            self._tramps = None


WATCHDOG = "ualdbg-watch"  # the agent's own thread, asleep on the debugger's pidfd (watch=1)


def _agents_own(pid: int, tid: int) -> bool:
    """The agent's watchdog thread: never armed, never waited for (it blocks SIGBUS for good)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip() == WATCHDOG
    except OSError:
        return False


def calling_thread(target: Target, pid: int, avoid: frozenset[int] = frozenset()) -> int:
    """The thread the debugger makes ualdbg's calls in: the selected one, unless it blocks
    SIGTRAP (the call returns through a breakpoint, and a breakpoint taken with SIGTRAP blocked
    makes the kernel reset the program's SIGTRAP action to SIG_DFL and unblock it: a thread
    inside libc's thread start, or the program's own choice), then another that does not.
    AgentUnavailable when every thread blocks it."""
    def free(tid: int) -> bool:
        return not blocked_signals(pid, tid) & (1 << (SIGTRAP - 1))

    current = target.current_tid()
    if free(current):
        return current
    threads = [t for t in target.threads() if not _agents_own(pid, t)]
    # (one still to run the instruction it stopped at, `avoid`, only when no other will do)
    for tid in [t for t in threads if t not in avoid] + [t for t in threads if t in avoid]:
        if free(tid):
            return tid
    raise AgentUnavailable(f"every thread of process {pid} blocks SIGTRAP now (inside libc's thread start, say), and "
                           "a call made in one would reset the program's SIGTRAP handler: `continue` a little and "
                           "`ualdbg trace start` again")


def lock_holders(target: Target, pid: int, caller: int | None = None) -> list[int]:
    """The threads, other than the calling one, that may hold a lock of libc's or the loader's
    (procfs.system_ranges): stopped in their code, or in a system call other than a blocking
    wait (procfs.QUIET_SYSCALLS, or futex: a thread waits there for a lock, holding none of
    libc's but in another dlopen's constructors)."""
    caller = target.current_tid() if caller is None else caller
    try:
        system = system_ranges(pid)
    except OSError:
        return [t for t in target.threads() if t != caller]
    out = []
    for tid in target.threads():
        if tid == caller:
            continue
        call = syscall_of(pid, tid)
        if call in QUIET_SYSCALLS or call == FUTEX:
            continue
        if call is None:
            pc = target.read_register("rip", tid)
            if not any(lo <= pc < hi for lo, hi in system):
                continue
        out.append(tid)
    return out


def _release_in(target: Target, c: Arming) -> str | None:
    """Disarm, clear AC in every thread, release (engines' side of cli/inject.remove, with the
    debugger's calls: every thread is stopped by the debugger)."""
    pid = c.pid
    assert pid is not None and offers(target, StringCalls)
    real = os.path.realpath(c.lib)
    found = [a for a in loaded_agents(pid) if os.path.realpath(a.path) == real]
    if not found:
        return None  # exec'd since, or never loaded (the program stripped LD_PRELOAD)
    bias = found[0].bias

    def sym(name: str) -> int:
        value = elf_symbol(c.lib, name)
        if value is None:
            raise RuntimeError(f"{c.lib} has no {name}")
        return bias + value

    flags = archmod.trap_flags("x86_64")
    assert flags is not None

    def clear_ac() -> None:
        for tid in target.threads():
            value = target.read_register(flags.register, tid)
            if value & flags.ac_bit:
                target.write_register(flags.register, value & ~flags.ac_bit, tid)

    # The calls run with the thread's registers: AC set, the agent's own code would fault in
    # them. Cleared first, and again after the disarm (threads the debugger ran meanwhile).
    clear_ac()
    caller = calling_thread(target, pid)
    target.call_with_strings(sym("ualdbg_agent_disarm"), [], tid=caller)
    clear_ac()
    busy = struct.unpack("<i", target.read_memory(sym("ualdbg_in_handler"), 4))[0]
    if busy > 0:
        # A thread stopped inside the agent's handler: it leaves it with AC clear (disarmed),
        # but the buffer it writes must stay mapped until it has.
        return (f"ualdbg: the agent is disarmed in process {pid}, not released: {busy} thread(s) stopped inside its "
                "signal handler; `continue` and `ualdbg off` again give the program its SIGBUS action back")
    target.call_with_strings(sym("ualdbg_agent_release"), [], tid=caller)
    return None


def combine(own: TraceResult, trapped: TraceBuffer | None, agent: list[ImageTrace], capacity: int) -> TraceResult:
    """One TraceResult of a session whose faults went partly to the debugger (the trap engine:
    `break`; `own` is its trace, `trapped` its buffer, None when it counted nothing) and partly to
    the agent: counts add up per site, records interleave by time."""
    merged = agent[0] if len(agent) == 1 else merge_results(agent, capacity)
    if trapped is None:
        return TraceResult.of_buffer(merged.buffer, engine="agent", debugger=own.debugger or "", arch=own.arch or "",
                                     version=own.version, program=merged.program, scope=merged.scope,
                                     sites=merged.sites, recording=own.recording, records=merged.table,
                                     unrecorded=merged.unrecorded)
    buf = TraceBuffer(capacity)
    t0 = min(trapped.started_at, merged.buffer.started_at)
    rows: list[Record] = []
    for started, records in ((trapped.started_at, own.records), (merged.buffer.started_at, merged.table)):
        shift = started - t0
        rows += [replace(r, time=round(r.time + shift, 6)) for r in records]
    rows.sort(key=lambda r: r.time)
    rows = [replace(r, seq=i) for i, r in enumerate(rows[-capacity:], 1)]
    buf.started_at = t0
    ends = [b.stopped_at for b in (trapped, merged.buffer) if b.stopped_at is not None]
    buf.stopped_at = max(ends) if ends else None
    sites: dict[tuple[str | None, int | None, int], Site] = {}
    add_up(buf, sites, trapped, own.sites)
    add_up(buf, sites, merged.buffer, merged.sites)
    one = TraceResult.of_buffer(buf, engine="agent+trap", debugger=own.debugger or "", arch=own.arch or "",
                                version=own.version, program=own.program, scope=own.scope or "",
                                sites=sorted(sites.values(), key=lambda s: (-s.count, s.loc.pc)),
                                recording=own.recording, records=rows, unrecorded=merged.unrecorded)
    one.step, one.blind_spots = own.step, list(own.blind_spots)
    return one
