"""Threads the in-process agent cannot arm from the debugger because they are inside libc's
pthread_create (agent/presence.creating_thread), and the threads they are creating: armed at
the first instruction where that is safe, instead of left uncounted.

- The creating thread: when pthread_create returns to its caller (the return address unwound
  through libc's CFI from where the thread stopped). From there it runs no libc code that could
  clone a thread with its AC.
- The thread being created: known at its first instruction (after clone's or clone3's `syscall`,
  where its creator passes too, with the new thread's id in rax), armed at the exit of the first
  rt_sigprocmask that lets SIGBUS through: start_thread restoring its creator's mask, before the
  start routine. Armed before that, it would fault in libc with every signal blocked and die.

The debugger keeps breakpoints at those addresses that never stop (AgentHost.watch_addresses),
while such threads remain; x86-64 only, as the agent."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..agent.presence import libc_function, module_bias, open_regular
from ..core.target import Target
from ..isa.arch import SIGBUS
from ..isa.arch.x86_64 import TRAP_FLAGS
from ..isa.syscall_sites import find_sites
from .procfs import blocked_signals

TASK = frozenset({56, 435})  # clone, clone3 (fork and vfork make processes: not ours here)
MASK = TRAP_FLAGS.sigprocmask_syscall
_REGS = ("rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15")
# Signals 1..31 but SIGKILL and SIGSTOP (never blocked) and SIGTRAP and SIGSEGV (the injected
# agent unblocks them in the thread its start-up call ran in).
_ALL_BLOCKED = ~((1 << 8) | (1 << 18) | (1 << 4) | (1 << 10)) & 0x7FFFFFFF
MAX_FRAMES = 32


@dataclass
class LibcSites:
    """Where libc's threads are born and change their masks, in one process."""

    births: frozenset[int]  # the instruction both sides of a clone pass after the `syscall`
    masks: frozenset[int]  # after each rt_sigprocmask `syscall`
    path: str  # libc's file, as the process maps it
    bias: int


def libc_sites(pid: int) -> LibcSites | None:
    """libc's clone/clone3 and rt_sigprocmask sites, by run-time address; None without libc or
    when its code shows none (then nothing can be done safely)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from ..symbols.cfi import EhFrameSearch

    found = module_bias(pid, lambda p: os.path.basename(p).startswith(("libc.so", "libc-")))
    if found is None:
        return None
    path, bias = found
    births: set[int] = set()
    masks: set[int] = set()
    try:
        with os.fdopen(open_regular(f"/proc/{pid}/root{path}"), "rb") as f:
            elf = ELFFile(f)
            search = EhFrameSearch(elf)
            for seg in elf.iter_segments():
                if seg["p_type"] != "PT_LOAD" or not seg["p_flags"] & 1:  # PF_X
                    continue
                code = seg.data()
                for site in find_sites(code, seg["p_vaddr"], TASK | {MASK}, TASK, search.function_start):
                    (births if site.nr in TASK else masks).add(bias + (site.exit_addr if site.nr in TASK else site.addr + 2))
    except (OSError, ELFError, ValueError):
        return None
    if not births or not masks:
        return None
    return LibcSites(frozenset(births), frozenset(masks), path, bias)


def _modules(pid: int) -> list[tuple[int, int, str, int]]:
    """(start, end, file, load bias) of each file-backed executable mapping of `pid`."""
    bias: dict[str, int] = {}
    spans: list[tuple[int, int, str]] = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5].strip()
            if int(parts[2], 16) == 0:
                bias.setdefault(path, lo)
            if "x" in parts[1]:
                spans.append((lo, hi, path))
    return [(lo, hi, path, bias[path]) for lo, hi, path in spans if path in bias]


def return_address(pid: int, target: Target, tid: int, sites: LibcSites) -> int | None:
    """Where pthread_create returns to in a thread stopped inside it: its frames (in libc, and
    in ld.so where libc calls it: the new thread's TLS) unwound by each module's CFI from the
    thread's registers up to pthread_create's; None when that fails."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from ..symbols.cfi import FrameRules

    where = libc_function(pid, "pthread_create")
    if where is None:
        return None
    lo, hi = where
    try:
        regs = {name: target.read_register(name, tid) for name in _REGS}
        modules = _modules(pid)
    except (RuntimeError, ValueError, KeyError, OSError):
        return None
    files: dict[str, Any] = {}
    rules: dict[str, FrameRules] = {}
    try:
        first = True
        for _ in range(MAX_FRAMES):
            pc = regs["rip"]
            # A caller's PC is a return address: its call is the byte before.
            at = pc - (0 if first else 1)
            module = next((m for m in modules if m[0] <= at < m[1]), None)
            if module is None:
                return None
            path, bias = module[2], module[3]
            if path not in rules:
                files[path] = os.fdopen(open_regular(f"/proc/{pid}/root{path}"), "rb")
                rules[path] = FrameRules(ELFFile(files[path]))
            caller = rules[path].unwind(at - bias, regs, target.read_memory)
            if caller is None:
                return None
            if lo <= pc < hi:
                return caller["rip"]
            regs = caller
            first = False
    except (OSError, ELFError, ValueError):
        return None
    finally:
        for f in files.values():
            f.close()
    return None


@dataclass
class BirthWatch:
    """The threads waited for in one process, and what arms one (AgentLink.arm_thread, without
    its pthread_create check: these are known to be out of it)."""

    pid: int
    sites: LibcSites
    arm: Callable[[Target, int], str]
    creators: dict[int, int] = field(default_factory=dict)  # tid -> its pthread_create's return address
    children: set[int] = field(default_factory=set)  # threads being born, armed at their mask's restore
    armed: list[int] = field(default_factory=list)  # what the watch armed (for the notes)

    def addresses(self) -> list[int]:
        return sorted(self.sites.births | self.sites.masks | set(self.creators.values()))

    @property
    def done(self) -> bool:
        return not self.creators and not self.children

    def hit(self, target: Target, tid: int, addr: int) -> None:
        """A thread reached one of the watched addresses (its breakpoint never stops)."""
        if addr in self.sites.births:
            rax = target.read_register("rax", tid)
            if rax == 0:
                self.children.add(tid)
            elif rax < 1 << 63:  # the creating side: the new thread's id (a negative: clone failed)
                self.children.add(rax)
        if addr in self.sites.masks and tid in self.children:
            if not blocked_signals(self.pid, tid) & (1 << (SIGBUS - 1)):
                self.children.discard(tid)
                self._arm(target, tid)
        if self.creators.get(tid) == addr:
            del self.creators[tid]
            self._arm(target, tid)
        self.children = {t for t in self.children if os.path.exists(f"/proc/{self.pid}/task/{t}")}

    def _arm(self, target: Target, tid: int) -> None:
        self.arm(target, tid)
        self.armed.append(tid)



def being_born(pid: int, tid: int) -> bool:
    """A thread that blocks every signal: one libc is starting (start_thread has not restored
    its creator's mask yet), as seen at an injection."""
    return blocked_signals(pid, tid) & _ALL_BLOCKED == _ALL_BLOCKED

