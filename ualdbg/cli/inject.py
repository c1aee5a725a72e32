"""Injecting the agent into a running process (`ualdbg trace --pid`, issue 20), with ptrace(2)
from this process: stop every thread (PTRACE_SEIZE + PTRACE_INTERRUPT: no SIGSTOP, nothing left
pending), call dlopen(agent, RTLD_NOW) and then `ualdbg_agent_inject(config)` in one of them, set
EFLAGS.AC in the saved registers of every thread that does not block SIGBUS, detach. From then
on the process runs alone and each alignment fault costs one signal in the agent, as at launch.

Detaching is two stops: `ualdbg_agent_disarm` (nothing sets AC again; AC cleared in every
thread's registers; threads inside the agent's handler run on and leave it with AC clear), then
`ualdbg_agent_release` (the program's own signal actions back in the kernel, the buffer
unmapped). The library stays loaded, inert: return addresses it swapped may still be on stacks.

A call is made as gdb's `call` makes one: the thread's registers saved, its stack pointer moved
below the red zone, a return address of 0 pushed (the return faults, and the SIGSEGV stop is the
call's end, never delivered), orig_rax set to -1 so that an interrupted system call is not
restarted under the call; the saved registers are restored after it, and the system call is
restarted then, as after any signal. The other threads run during dlopen (a lock one of them
holds cannot deadlock it) and are stopped for the rest. x86-64 Linux only."""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field

from ..agent.presence import creating_thread, elf_symbol, libc_symbol, module_bias, tracing_agent
from ..core.errors import UaldbgError
from ..engines.procfs import QUIET_SYSCALLS, blocked_signals, sigbus_blocked, syscall_of, system_ranges
from ..lazyclass import dataclass

PTRACE_CONT, PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_DETACH = 7, 12, 13, 17
PTRACE_GETSIGINFO, PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_EVENT_STOP = 0x4202, 0x4206, 0x4207, 128
BUS_ADRALN = 1
SEGV_BIT = 1 << (signal.SIGSEGV - 1)
WALL = 0x40000000
AC, TF = 0x40000, 0x100
RTLD_NOW = 2
REG_NAMES = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi",
             "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs")
DATA = object()  # an argument of Process.call: the address its data was written at


class InjectError(UaldbgError):
    """The agent could not be injected (or removed): one line saying why."""


class Traced(InjectError):
    """Someone else traces the process, and it was left as it was: ptrace refused to attach
    (`tracer` is the tracer's pid), or another ualdbg's agent is armed in it (`ualdbg` its pid,
    `injected` whether it was injected or preloaded at launch). Never a reason to fall back to
    gdb: one tracer per process (docs/SECURITY.md)."""

    def __init__(self, pid: int, tracer: int = 0, ualdbg: int = 0, injected: bool = True) -> None:
        super().__init__(f"process {pid} is already traced")
        self.pid, self.tracer, self.ualdbg, self.injected = pid, tracer, ualdbg, injected


def _tracer_of(tid: int) -> int:
    try:
        with open(f"/proc/{tid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("TracerPid:")), 0)
    except (OSError, ValueError, IndexError):
        return 0


class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in REG_NAMES]


_libc = ctypes.CDLL(None, use_errno=True)
_ptrace_fn = _libc.ptrace
_ptrace_fn.restype = ctypes.c_long
_ptrace_fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def _ptrace(req: int, tid: int, addr: int = 0, data: int = 0) -> int:
    ctypes.set_errno(0)
    r = _ptrace_fn(req, tid, addr, data)
    if r == -1 and ctypes.get_errno():
        e = ctypes.get_errno()
        raise OSError(e, f"ptrace({req:#x}, {tid}): {os.strerror(e)}")
    return int(r)


def _pending(pid: int, tid: int, mask: int = ~0) -> bool:
    """A signal (of `mask`) pending for the thread itself (a fault's is: it would be delivered in
    a call)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            return any(line.startswith("SigPnd:") and int(line.split()[1], 16) & mask != 0 for line in f)
    except (OSError, ValueError):
        return False


@dataclass
class Process:
    """The threads of one process under PTRACE_SEIZE, stopped or running, and its memory."""

    pid: int
    threads: dict[int, bool] = field(default_factory=dict)  # tid -> stopped
    timeout: float = 10.0
    # Wait while another tracer holds the process (a second ualdbg that attached to find ours
    # armed and is detaching again), rather than fail: our own detach must go through.
    patient: bool = False
    creating: list[int] = field(default_factory=list)  # left unarmed by set_ac: inside pthread_create

    def __post_init__(self) -> None:
        self.mem = os.open(f"/proc/{self.pid}/mem", os.O_RDWR)

    def close(self) -> None:
        os.close(self.mem)

    # ---- stopping and resuming

    def _wait_stop(self, tid: int, deadline: float) -> bool:
        """Wait for `tid`'s interrupt (or group) stop, delivering signals met on the way. False:
        it exited."""
        while True:
            try:
                w, status = os.waitpid(tid, WALL | os.WNOHANG)
            except ChildProcessError:
                return False
            if w == 0:
                if time.monotonic() > deadline:
                    raise InjectError(f"thread {tid} of process {self.pid} did not stop within {self.timeout:g} s")
                time.sleep(0.0002)
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                return False
            if (status >> 16) == PTRACE_EVENT_STOP:
                return True
            # A signal for it: delivered as if nobody watched; the pending interrupt stops it next.
            _ptrace(PTRACE_CONT, tid, 0, os.WSTOPSIG(status) if (status >> 16) == 0 else 0)

    def _seize(self, tid: int, deadline: float) -> bool:
        """Attach to `tid` (or it exited meanwhile); False when another tracer holds it and this
        process waits for it to let go (patient)."""
        try:
            _ptrace(PTRACE_SEIZE, tid, 0, 0)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return True
            tracer = _tracer_of(tid) if exc.errno == errno.EPERM else 0
            if tracer and self.patient and time.monotonic() < deadline:
                time.sleep(0.005)
                return False
            if tracer:
                raise Traced(self.pid, tracer=tracer) from None
            raise InjectError(f"cannot attach to thread {tid} of process {self.pid}: {exc.strerror}") from None
        self.threads[tid] = False
        return True

    def stop_all(self) -> None:
        """Every thread stopped, including those created while stopping the others."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                tids = {int(t) for t in os.listdir(f"/proc/{self.pid}/task")}
            except OSError:
                raise InjectError(f"process {self.pid} exited") from None
            new = tids - set(self.threads)
            # The thread-group leader first: of two tracers, the one the kernel lets attach to it
            # is the one tracer, and the other leaves holding no thread of it (Traced).
            if not all(self._seize(tid, deadline) for tid in sorted(new, key=lambda t: t != self.pid)):
                continue
            running = [t for t, stopped in self.threads.items() if not stopped]
            if not new and not running:
                return
            self._stop(running, deadline)

    def _stop(self, tids: list[int], deadline: float) -> None:
        for tid in tids:
            try:
                _ptrace(PTRACE_INTERRUPT, tid)
            except OSError:
                pass
            if self._wait_stop(tid, deadline):
                self.threads[tid] = True
            else:
                del self.threads[tid]

    def resume(self, tid: int) -> None:
        _ptrace(PTRACE_CONT, tid, 0, 0)
        self.threads[tid] = False

    def resume_others(self, tid: int) -> None:
        for t, stopped in list(self.threads.items()):
            if t != tid and stopped:
                try:
                    self.resume(t)
                except OSError:
                    del self.threads[t]

    def detach_all(self) -> None:
        try:
            self.stop_all()
        except InjectError:  # a thread we could not attach to: the ones we hold are let go all the same
            self._stop([t for t, stopped in self.threads.items() if not stopped], time.monotonic() + self.timeout)
        for tid in list(self.threads):
            try:
                _ptrace(PTRACE_DETACH, tid, 0, 0)
            except OSError:
                pass
            del self.threads[tid]

    # ---- registers, memory, calls

    def regs(self, tid: int) -> Regs:
        r = Regs()
        _ptrace(PTRACE_GETREGS, tid, 0, ctypes.addressof(r))
        return r

    def set_regs(self, tid: int, r: Regs) -> None:
        _ptrace(PTRACE_SETREGS, tid, 0, ctypes.addressof(r))

    def read(self, addr: int, n: int) -> bytes:
        return os.pread(self.mem, n, addr)

    def write(self, addr: int, data: bytes) -> None:
        os.pwrite(self.mem, data, addr)

    def set_ac(self, on: bool) -> int:
        """AC set (where SIGBUS is not blocked) or cleared in every stopped thread's registers;
        the number of threads armed."""
        armed = 0
        self.creating = []
        for tid, stopped in self.threads.items():
            if not stopped:
                continue
            r = self.regs(tid)
            want = on and not sigbus_blocked(self.pid, tid)
            if want and creating_thread(self.pid, r.rip, r.rsp, self.read):
                want = False  # its new thread would inherit AC with every signal blocked
                self.creating.append(tid)
            if bool(r.eflags & AC) != want:
                r.eflags = (r.eflags | AC) if want else (r.eflags & ~AC)
                self.set_regs(tid, r)
            armed += want
        return armed

    def quiet_thread(self) -> tuple[int, bool]:
        """The thread to make calls in, and whether it is safe: one waiting in a blocking system
        call (it holds no lock of libc's), the main thread first; else one running code outside
        libc and the loader; else (not safe) the main thread."""
        tids = sorted(self.threads, key=lambda t: (t != self.pid, t))
        # Not one that blocks SIGSEGV: the call ends with one, which the kernel forces through a
        # blocked mask by resetting the program's SIGSEGV action to SIG_DFL.
        calm = [t for t in tids if not _pending(self.pid, t) and not blocked_signals(self.pid, t) & SEGV_BIT]
        for tid in calm:
            if syscall_of(self.pid, tid) in QUIET_SYSCALLS:
                return tid, True
        system = system_ranges(self.pid)
        for tid in calm:
            if syscall_of(self.pid, tid) is None:
                rip = self.regs(tid).rip
                if not any(lo <= rip < hi for lo, hi in system):
                    return tid, True
        return (self.pid if self.pid in self.threads else tids[0]), False

    def stop_quietly(self, tries: int = 50, bus_calm: bool = True) -> int:
        """Every thread stopped, with one of them safe to make a call in and none with an
        alignment fault's SIGBUS pending (raised with AC set, it would reach the program once AC
        is cleared and its handler is back), if a few tries find that (the process runs 2 ms
        between tries); the thread to make calls in."""
        bus = 1 << (signal.SIGBUS - 1)
        for _ in range(tries):
            self.stop_all()
            tid, safe = self.quiet_thread()
            if safe and not (bus_calm and any(_pending(self.pid, t, bus) for t in self.threads)):
                return tid
            for t in list(self.threads):
                self.resume(t)
            time.sleep(0.002)
        self.stop_all()
        return self.quiet_thread()[0]

    def _si_code(self, tid: int) -> int:
        info = ctypes.create_string_buffer(128)
        _ptrace(PTRACE_GETSIGINFO, tid, 0, ctypes.addressof(info))
        return int(struct.unpack_from("<i", info.raw, 8)[0])

    def call(self, tid: int, fn: int, args: list[object], data: bytes = b"") -> int:
        """fn(*args) in the stopped thread `tid`, whose registers are as they were afterwards;
        its return value. DATA in args is the address `data` was written at (on its stack)."""
        saved = self.regs(tid)
        r = Regs.from_buffer_copy(saved)
        top = (saved.rsp - 1024) & ~0xF  # the red zone and then some
        where = (top - len(data)) & ~0xF
        if data:
            self.write(where, data)
        sp = where - 64
        sp -= 8
        self.write(sp, struct.pack("<Q", 0))  # the return address: the return faults at 0
        values = [where if a is DATA else int(a) for a in args]  # type: ignore[call-overload]
        for name, v in zip(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), values):
            setattr(r, name, v & 0xFFFFFFFFFFFFFFFF)
        r.rip, r.rsp, r.rax = fn, sp, 0
        r.orig_rax = 0xFFFFFFFFFFFFFFFF  # no restart of an interrupted system call under the call
        r.eflags &= ~(AC | TF)
        self.set_regs(tid, r)
        _ptrace(PTRACE_CONT, tid, 0, 0)
        self.threads[tid] = False
        deadline = time.monotonic() + self.timeout
        while True:
            w, status = os.waitpid(tid, WALL | os.WNOHANG)
            if w == 0:
                if time.monotonic() > deadline:
                    raise InjectError(f"a call in process {self.pid} did not return within {self.timeout:g} s")
                time.sleep(0.0002)
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                raise InjectError(f"process {self.pid} exited during the injection")
            event, sig = status >> 16, os.WSTOPSIG(status)
            if event == 0 and sig == signal.SIGBUS and self._si_code(tid) == BUS_ADRALN:
                # An alignment fault of the thread's own code, raised before it was stopped: it
                # faults again once its registers are back; never delivered in the call.
                _ptrace(PTRACE_CONT, tid, 0, 0)
                continue
            if event == 0 and sig == signal.SIGSEGV:
                now = self.regs(tid)
                self.set_regs(tid, saved)
                self.threads[tid] = True
                if now.rip != 0:
                    raise InjectError(f"the call at {fn:#x} in process {self.pid} crashed at {now.rip:#x} (undone)")
                return int(now.rax)
            _ptrace(PTRACE_CONT, tid, 0, sig if event == 0 else 0)  # the program's own signal


# ---- symbols


def libc_function(pid: int, name: str) -> int:
    try:
        return libc_symbol(pid, name)
    except LookupError as exc:
        raise InjectError(str(exc)) from None


def agent_mapped(pid: int, lib: str, bias: int | None = None) -> bool:
    """Whether `pid` has the agent mapped (at `bias`): not after an exec, nor in another program."""
    real = os.path.realpath(lib)
    try:
        found = module_bias(pid, lambda p: p == real)
    except OSError:
        return False
    return found is not None and (bias is None or found[1] == bias)


@dataclass
class Injected:
    """An agent loaded into a process: where, and what ptrace cost the process."""

    pid: int
    lib: str
    bias: int
    threads_armed: int
    stopped_s: float  # from the first stop to the detach: at least as long as any thread was stopped
    creating: tuple[int, ...] = ()  # threads inside libc's pthread_create, left unarmed (set_ac)

    def symbol(self, name: str) -> int:
        value = elf_symbol(self.lib, name)
        if value is None:
            raise InjectError(f"{self.lib} has no {name}")
        return self.bias + value



@contextmanager
def one_at_a_time(pid: int, wait: float = 60.0) -> Iterator[None]:
    """While ualdbg stops `pid`'s threads to inject or remove the agent, no other ualdbg does:
    two of them seizing at once could each hold some of its threads, and a thread one of them
    holds is one the other's agent cannot see while it patches code (the program then resumed
    inside a patch's jump). An abstract Unix socket named after the process (and its start
    time: a reused pid is another name) is the lock: bound atomically, released by the kernel
    when its ualdbg ends however it ends, no file anyone could plant."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "0"
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                lock.bind(f"\0ualdbg-inject-{pid}-{start}")
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise InjectError(f"another ualdbg is injecting into or detaching from process {pid}") from None
                time.sleep(0.01)
        yield
    finally:
        lock.close()

def inject(pid: int, lib: str, config: str) -> Injected:
    """Load the agent into `pid` and arm every thread; the process runs on alone."""
    with one_at_a_time(pid):
        return _inject(pid, lib, config)


def _inject(pid: int, lib: str, config: str) -> Injected:
    dlopen = libc_function(pid, "dlopen")
    value = elf_symbol(lib, "ualdbg_agent_inject")  # before anything stops: parsing ELF takes ms
    if value is None:
        raise InjectError(f"{lib} has no ualdbg_agent_inject")
    # Refused before any thread is stopped, too: a thread this ualdbg holds stopped is one another
    # ualdbg's agent cannot see, and may patch the code under (the program then resumed inside a
    # patch's jump: tests/security/test_one_tracer.py). Checked again once every thread is ours.
    _refuse_if_traced(pid)
    try:
        proc = Process(pid)
    except OSError as exc:
        raise InjectError(f"cannot open the memory of process {pid}: {exc.strerror}") from None
    t0 = time.monotonic()
    try:
        tid = proc.stop_quietly()
        # Ours alone now (ptrace admits one tracer): a ualdbg that injected the agent before and
        # detached has left it armed with its pid in ualdbg_agent_owner.
        _refuse_if_traced(pid)
        proc.resume_others(tid)  # they run during dlopen: a lock one of them holds cannot deadlock it
        handle = proc.call(tid, dlopen, [DATA, RTLD_NOW], os.fsencode(lib) + b"\0")
        if not handle:
            raise InjectError(f"dlopen of the agent failed in process {pid}")
        bias = struct.unpack("<Q", proc.read(handle, 8))[0]  # struct link_map's l_addr
        rc = proc.call(tid, bias + value, [DATA], config.encode() + b"\0")
        if rc == 0xFFFFFFFE:  # the agent found itself, or another copy of itself, armed
            _refuse_if_traced(pid)
            raise Traced(pid, ualdbg=0)
        if rc != 0:
            raise InjectError(f"the agent could not start in process {pid} (no buffer)")
        proc.stop_all()
        armed = proc.set_ac(True)
        proc.detach_all()
        return Injected(pid, lib, bias, armed, time.monotonic() - t0, tuple(proc.creating))
    except OSError as exc:  # /proc or ptrace refused something midway
        raise InjectError(str(exc)) from None
    finally:
        if proc.threads:
            proc.detach_all()
        proc.close()


def _refuse_if_traced(pid: int) -> None:
    agent = tracing_agent(pid)
    if agent is not None:
        raise Traced(pid, ualdbg=agent.ualdbg, injected=agent.injected)


def remove(inj: Injected, pid: int | None = None, settle: float = 2.0) -> float:
    """Disarm the agent in `pid` (the injected process or a child it forked) and make it inert;
    the process goes on with no thread armed and its own signal actions. The seconds it was
    stopped, in all."""
    pid = inj.pid if pid is None else pid
    with one_at_a_time(pid):
        return _remove(inj, pid, settle)


def _remove(inj: Injected, pid: int, settle: float) -> float:
    disarm, release = inj.symbol("ualdbg_agent_disarm"), inj.symbol("ualdbg_agent_release")
    busy = inj.symbol("ualdbg_in_handler")
    try:
        proc = Process(pid, patient=True)
    except OSError as exc:
        raise InjectError(f"cannot open the memory of process {pid}: {exc.strerror}") from None
    stopped = 0.0
    try:
        t0 = time.monotonic()
        # disarm and release take no lock. Here a thread may still fault until its AC is cleared; a
        # pending fault is dropped by the agent (its context then has AC clear) or by the call.
        tid = proc.stop_quietly(tries=1, bus_calm=False)
        proc.call(tid, disarm, [])
        proc.set_ac(False)
        for t in list(proc.threads):
            proc.resume(t)
        stopped += time.monotonic() - t0
        # Threads that were inside the agent's handler finish it, and leave with AC clear.
        deadline = time.monotonic() + settle
        while struct.unpack("<i", proc.read(busy, 4))[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.01)
        t0 = time.monotonic()
        tid = proc.stop_quietly(tries=20)  # nothing can fault now: a pending SIGBUS is an old one
        proc.call(tid, disarm, [])  # again: a trampoline built after the first one
        proc.call(tid, release, [])
        proc.set_ac(False)
        proc.detach_all()
        stopped += time.monotonic() - t0
        return stopped
    except OSError as exc:
        raise InjectError(str(exc)) from None
    finally:
        if proc.threads:
            proc.detach_all()
        proc.close()
