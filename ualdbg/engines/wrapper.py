"""What ualdbg owes the program it starts, as a wrapper (timeout(1), env(1), nice(1)) owes it: the
argv and environment a direct run gives it, the signal dispositions it inherited, signals sent to
ualdbg passed on with a grace deadline that holds (SignalGuard), and nothing ualdbg starts left
running when ualdbg dies (the parent-death signal). Every engine starts its processes through it."""
from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .procfs import descendants

PR_SET_PDEATHSIG = 1
ADDR_NO_RANDOMIZE = 0x0040000
# Signals ualdbg passes on to the program it runs (a CI timeout, a hang-up, an interrupt).
FORWARDED = ("SIGTERM", "SIGHUP", "SIGINT")
# timeout(1) signals its child and then the child's whole process group, so ualdbg gets the
# same signal twice within microseconds: one event, not the "second signal" that kills at once.
SAME_EVENT = 0.5
# How often a wait wakes up to look at the grace deadline. A wait without a timeout is restarted
# after each signal handler (PEP 475) and would never see the deadline the handler set.
WAIT_SLICE = 0.25

_libc: Any = None


def libc() -> Any:
    """The C library, loaded once in ualdbg: a forked child only calls into it."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


# --------------------------------------------------------------------------------------------
# What the program gets


def program_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a direct run gives the program: ualdbg's own, less what Python changed at
    its start. Python's locale coercion (PEP 538) sets LC_CTYPE=C.UTF-8 in its own environment
    when the locale is C or POSIX; /proc/self/environ still holds the strings ualdbg was started
    with (setenv never writes there), so LC_CTYPE is put back as it was."""
    env = dict(os.environ if base is None else base)
    original = _exec_environ()
    if original is None:
        return env
    if "LC_CTYPE" in original:
        env["LC_CTYPE"] = original["LC_CTYPE"]
    else:
        env.pop("LC_CTYPE", None)
    return env


def _exec_environ() -> dict[str, str] | None:
    try:
        with open("/proc/self/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq:
            out[os.fsdecode(key)] = os.fsdecode(value)
    return out


def inherited_ignored(names: tuple[str, ...] = FORWARDED) -> set[int]:
    """The signals among `names` that ualdbg was started with ignored (nohup: SIGHUP; a
    background job of a script: SIGINT). An ignored signal stays ignored across fork and exec,
    so the program inherits it as long as ualdbg never installs a handler for it. (SIGPIPE and
    SIGXFSZ cannot be told: Python ignores both as it starts, whatever it inherited; subprocess
    gives the program their default action, as to every program Python starts.)"""
    out = set()
    for name in names:
        signo = getattr(signal, name, None)
        if signo is not None and signal.getsignal(signo) == signal.SIG_IGN:
            out.add(signo)
    return out


def child_setup(*, no_aslr: bool = False, die_with_parent: bool = True) -> Callable[[], None]:
    """A `preexec_fn` (or the body of a forked child before its exec): the parent-death signal,
    so that what ualdbg starts never outlives it, and ASLR off as gdb and lldb run programs.

    PR_SET_PDEATHSIG fires when the *thread* that forked dies, so fork from the main thread; and
    a parent that died before the prctl would never send it: the child checks it is still the
    parent's and dies otherwise. The setting survives exec (not of a set-uid or file-capability
    program, for which the kernel clears it) and is not inherited by the program's own children."""
    c = libc()
    prctl, personality = c.prctl, c.personality
    parent = os.getpid()

    def setup() -> None:
        if die_with_parent:
            prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0))
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
        if no_aslr:
            current = personality(ctypes.c_ulong(0xFFFFFFFF))
            if current != -1:
                personality(ctypes.c_ulong(current | ADDR_NO_RANDOMIZE))

    return setup


def spawn_held(path: str, argv: list[str], env: Mapping[str, str], *, no_aslr: bool = True) -> tuple[int, int]:
    """Fork the program, held just before its exec until someone writes "1" to the returned fd
    (EOF: it exits 127 without running). lldb launches programs on a pseudo-terminal of its own;
    attaching to this child instead leaves the program the user's stdin, stdout, stderr, open
    files and process group, as the shell would, and `argv` and `env` exactly."""
    r, w = os.pipe()
    setup = child_setup(no_aslr=no_aslr)
    envb = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    pid = os.fork()
    if pid == 0:  # the child: nothing but exec or _exit
        try:
            os.close(w)
            # Python ignores these; an ignored signal stays ignored across exec (as subprocess's
            # restore_signals knows).
            for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            setup()
            go = os.read(r, 1) == b"1"
            os.close(r)
            if go:
                os.execve(path, argv, envb)
        finally:
            os._exit(127)
    os.close(r)
    return pid, w


# --------------------------------------------------------------------------------------------
# Whether a direct run would start


def elf_interpreter(path: str) -> tuple[int, str | None] | None:
    """(e_machine, PT_INTERP) of an ELF executable, the interpreter None for a static one; None
    when the file cannot be read as an ELF header (the callers' checks say why)."""
    import struct

    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
                return None
            end = "<" if ident[5] == 1 else ">"
            (machine,) = struct.unpack_from(end + "H", ident, 18)
            if ident[4] == 2:
                (phoff,) = struct.unpack_from(end + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
                entry = struct.Struct(end + "IIQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz
                fields = (0, 2, 5)
            else:
                (phoff,) = struct.unpack_from(end + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
                entry = struct.Struct(end + "IIIIII")  # p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
                fields = (0, 1, 4)
            if phentsize < entry.size or phnum > 4096:
                return machine, None
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(len(table) // phentsize):
                values = entry.unpack_from(table, i * phentsize)
                kind, offset, size = (values[k] for k in fields)
                if kind == 3 and 0 < size <= 4096:  # PT_INTERP
                    f.seek(offset)
                    return machine, f.read(size).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    except (OSError, ValueError, OverflowError, struct.error):
        return None
    return machine, None


def host_loader() -> str | None:
    """The dynamic loader of ualdbg's own Python: the system's glibc loader, which the agent is
    built against (on NixOS too, where /lib64 has none)."""
    import sys

    found = elf_interpreter(os.path.realpath(sys.executable))
    return found[1] if found is not None and found[1] and os.path.exists(found[1]) else None


# The machines whose programs run natively on this host (x86-64 and i386 programs on x86-64).
NATIVE_MACHINES = {"x86_64": (62, 3), "amd64": (62, 3)}


def start_problem(path: str, shown: str, env: Mapping[str, str]) -> tuple[int, str] | None:
    """Why a direct run of the native program `path` would end before any of its own code ran,
    in one line as the shell and the dynamic loader say it, with the status they give (127): a
    missing ELF interpreter (a musl or Nix build), a shared library the loader cannot find. The
    libraries are asked of the system's glibc loader itself (`ld.so --list`, which maps them and
    runs nothing of the program), only when the program uses that loader."""

    found = elf_interpreter(path)
    if found is None:
        return None
    machine, interp = found
    if interp is None or machine not in NATIVE_MACHINES.get(os.uname().machine, (machine,)):
        return None
    if not os.path.exists(interp):
        return 127, f"{shown}: cannot execute: its ELF interpreter {interp} does not exist (a program built for another system?)"
    loader = host_loader()
    if loader is None or machine != 62 or not same_file(interp, loader):
        return None
    try:
        done = subprocess.run([interp, "--list", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=dict(env), timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    said = "error while loading shared libraries: "
    text = done.stderr.decode("utf-8", "replace")
    if done.returncode != 127 or said not in text:
        return None
    line = text.split(said, 1)[1].splitlines()[0].strip()
    # Only a library not found. The loader run this way maps the program itself too, and a
    # program the kernel would map differently (or kill in its exec) must not be called missing.
    name = line.split(": ", 1)[0]
    if "cannot open shared object file" not in line or "/" in name:
        return None
    return 127, f"{shown}: {said}{line}"


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def exec_status(exc: OSError) -> int:
    """The status a shell gives a program it could not exec: 127 not found, 126 otherwise."""
    import errno

    return 127 if exc.errno == errno.ENOENT else 126


# --------------------------------------------------------------------------------------------
# Signals sent to ualdbg while the program runs


def debugger_keeps_running() -> None:
    """Called by the batch drivers inside gdb and lldb: the debugger ignores SIGTERM, SIGHUP and
    SIGINT from then on. Sent to ualdbg's whole process group (timeout(1) does, and a hang-up),
    they would end the debugger, and the program with it, before the program chose what to do
    with its own copy: ualdbg passes the program the signal it gets (SignalGuard) and ends the
    debugger with SIGKILL if it must (the program dies with it: the parent-death signal)."""
    for signo in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(signo, signal.SIG_IGN)
        except ValueError:  # not the debugger's main thread: nothing to be done from here
            return


_SELF_SENT: list[int] = []


def interrupt_program(signo: int = signal.SIGINT) -> None:
    """Pass the program `signo` through the running SignalGuard as if it came from outside
    (`watch`'s q and --duration): on a terminal, a SIGINT ualdbg sends itself would otherwise be
    taken for a Ctrl-C typed there, which the program already has."""
    _SELF_SENT.append(signo)
    os.kill(os.getpid(), signo)


def _stopped_tree(roots: list[int], rounds: int = 10) -> list[int]:
    """The descendants of `roots`, each sent SIGSTOP as it is found (a stopped process starts no
    other), read again until no new one shows."""
    seen: list[int] = []
    for _ in range(rounds):
        new = [d for root in roots for d in descendants(root) if d not in seen]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        seen += new
    return seen


class SignalGuard:
    """While the program runs: SIGTERM, SIGHUP and SIGINT sent to ualdbg reach the program as they
    would without ualdbg, and ualdbg waits for it to end: a second signal, or `grace` seconds
    (a monotonic deadline that holds whatever the program does), and the program gets SIGKILL
    (never an orphan with the agent in it); `grace` seconds more and the process ualdbg waits
    for (a debugger, the stepper) gets it too.

    A Ctrl-C typed at the terminal already reached the program (the same foreground process
    group): it is not sent twice, and whether the program ends on it is the program's choice, as
    without ualdbg (no deadline). A signal ualdbg was started with ignored (nohup) is left
    ignored, by ualdbg and so by the program."""

    def __init__(self, proc: subprocess.Popen[Any] | None, grace: float,
                 targets: Callable[[], list[int]] | None = None) -> None:
        """`proc` is what ualdbg waits for; `targets` the processes that get the signals (the
        program, when `proc` is a debugger running it; default: `proc` itself). Made before the
        process starts (proc None, then `start`), a signal that comes in between is not lost:
        it would otherwise end ualdbg itself and leave the program running."""
        self.grace = grace
        self.proc: subprocess.Popen[Any] | None = None
        self.targets: Callable[[], list[int]] = lambda: []
        self.received: list[str] = []
        self.deadline: float | None = None
        self._first: tuple[int, float] | None = None  # the signal that started the deadline, and when
        self._program_killed = False
        self._pending: list[int] = []
        self._old: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        ignored = inherited_ignored()
        for name in FORWARDED:
            signo = getattr(signal, name)
            if signo not in ignored:
                self._old[signo] = signal.signal(signo, self._handle)
        if proc is not None:
            self.start(proc, targets)

    def start(self, proc: subprocess.Popen[Any], targets: Callable[[], list[int]] | None = None) -> None:
        """The process to wait for has started: signals received before now reach it."""
        self.proc = proc
        self.targets = targets or (lambda: [proc.pid])
        early, self._pending = self._pending, []
        for signo in early:
            self._act(signo, replayed=True)

    @staticmethod
    def _typed_at_terminal() -> bool:
        """Whether a SIGINT may come from the terminal to our whole foreground process group."""
        try:
            fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
        except OSError:
            return False
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            return False
        finally:
            os.close(fd)

    def _handle(self, signo: int, _frame: Any) -> None:
        self.received.append(signal.Signals(signo).name)
        if self.proc is None:
            self._pending.append(signo)
            return
        self._act(signo)

    def _act(self, signo: int, replayed: bool = False) -> None:
        proc = self.proc
        assert proc is not None
        if proc.returncode is not None:
            return
        ours = signo in _SELF_SENT
        if ours:
            _SELF_SENT.remove(signo)
        if signo == signal.SIGINT and not replayed and not ours and self._typed_at_terminal():
            return  # the program has it already; its choice (see the class)
        now = time.monotonic()
        if self._first is not None:
            first, at = self._first
            if now - at < SAME_EVENT:
                if signo != first:
                    self._send(signo)
                return
            self._send(signal.SIGKILL)  # a second signal: at once
            self._program_killed = True
            self.deadline = now + self.grace
            return
        self._first = (signo, now)
        self.deadline = now + self.grace
        self._send(signo)

    def _send(self, signo: int) -> None:
        targets = self.targets()
        if signo == signal.SIGKILL:
            # The program's own processes too (a shell's commands, a test suite's programs): where
            # the program ignored SIGTERM, they would outlive ualdbg, orphaned. Stopped first, so
            # that none forks while the tree is read, then killed.
            tree = _stopped_tree(targets)
            targets = [*targets, *tree]
        for pid in targets:
            try:
                os.kill(pid, signo)
            except OSError:
                pass

    @property
    def program_killed(self) -> bool:
        """Whether ualdbg sent the program SIGKILL (a second signal, or the deadline passed)."""
        return self._program_killed

    def expired(self) -> None:
        """Past the deadline: SIGKILL to the program; the next time, to the process waited for."""
        proc = self.proc
        assert proc is not None
        if self.deadline is None or time.monotonic() < self.deadline:
            return
        if not self._program_killed:
            self._send(signal.SIGKILL)
            self._program_killed = True
        else:
            try:
                proc.kill()
            except OSError:
                pass
        self.deadline = time.monotonic() + self.grace

    def slice(self) -> float:
        """How long a wait may block before the deadline must be looked at again."""
        if self.deadline is None:
            return WAIT_SLICE
        return max(0.0, min(WAIT_SLICE, self.deadline - time.monotonic()))

    def wait(self) -> int:
        """The program's status, as soon as it ends: a pidfd wakes the wait at once (subprocess's
        own wait with a timeout polls, up to 50 ms late: a tenth of a short program's trace);
        the deadline is looked at every slice either way."""
        proc = self.proc
        assert proc is not None, "start() first"
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        try:
            while True:
                self.expired()
                if pidfd is None:
                    try:
                        return proc.wait(timeout=self.slice())
                    except subprocess.TimeoutExpired:
                        continue
                select.select([pidfd], [], [], self.slice())
                status = proc.poll()
                if status is not None:
                    return status
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def restore(self) -> None:
        for signo, old in self._old.items():
            signal.signal(signo, old)
        self._old = {}
