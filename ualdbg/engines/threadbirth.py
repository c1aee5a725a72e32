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
from collections.abc import Callable, Collection, Sequence
from dataclasses import field
from typing import Any, Protocol

from ..agent.presence import creating_thread, libc_function, module_bias, open_regular
from ..core.target import Target
from ..isa.arch import SIGBUS, SIGTRAP
from ..isa.arch.x86_64 import TRAP_FLAGS
from ..isa.syscall_sites import find_sites
from ..lazyclass import dataclass
from .procfs import blocked_signals, syscall_of, system_ranges

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
    # After each rt_sigprocmask `syscall` that sets or unblocks a mask: where a thread libc starts
    # has restored its creator's mask. Never glibc's own SIG_BLOCKs: a breakpoint taken with
    # SIGTRAP blocked makes the kernel reset the program's SIGTRAP action to SIG_DFL (and unblock
    # it), as it would a trap at a clone's return, where every signal is blocked: no breakpoint
    # goes there either (docs/DEBUGGERS.md).
    masks: frozenset[int]
    path: str  # libc's file, as the process maps it
    bias: int
    spin: int | None = None  # a `jmp .` (eb fe) in libc's code: where Parking holds a thread
    # clone's and clone3's `syscall` and the parent's way from it to its `ret`: no FDE covers
    # them (the child's frame differs: glibc ends the CFI before the `syscall`), and the parent's
    # return address is at rsp (both are leaf functions).
    clone_returns: frozenset[int] = frozenset()


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
    clone_returns: set[int] = set()
    spin: int | None = None
    try:
        with os.fdopen(open_regular(f"/proc/{pid}/root{path}"), "rb") as f:
            elf = ELFFile(f)
            search = EhFrameSearch(elf)
            for seg in elf.iter_segments():
                if seg["p_type"] != "PT_LOAD" or not seg["p_flags"] & 1:  # PF_X
                    continue
                code = seg.data()
                at = code.find(b"\xeb\xfe")
                if spin is None and at >= 0:
                    spin = bias + seg["p_vaddr"] + at
                for site in find_sites(code, seg["p_vaddr"], TASK | {MASK}, TASK, search.function_start):
                    if site.nr in TASK:
                        births.add(bias + site.exit_addr)
                    elif not site.zero_arg:  # (SIG_BLOCK: see LibcSites.masks)
                        masks.add(bias + site.addr + 2)
                    if site.nr in TASK:
                        clone_returns.add(bias + site.addr)  # (the `syscall` itself: a creator stopped on it)
                        clone_returns.update(bias + a for a in _parent_tail(code, seg["p_vaddr"], site.addr + 2))
    except (OSError, ELFError, ValueError):
        return None
    if not masks:
        return None
    return LibcSites(frozenset(births), frozenset(masks), path, bias, spin, frozenset(clone_returns))


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


def _unwind_to(pid: int, target: Target, tid: int, found: Callable[[int, int], bool],
               leaves: frozenset[int] = frozenset()) -> int | None:
    """Unwind a stopped thread's frames, each by its own module's CFI (libc, ld.so, ...), from
    its registers; the first caller PC for which found(pc, caller_pc) holds, or None."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from ..symbols.cfi import FrameRules

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
            if caller is None and first and pc in leaves and target.read_register("rax", tid) != 0:
                # (LibcSites.clone_returns: the parent's side; a new thread there has rax 0)
                caller = {**regs, "rip": int.from_bytes(target.read_memory(regs["rsp"], 8), "little"),
                          "rsp": regs["rsp"] + 8}
            if caller is None:
                return None
            if found(pc, caller["rip"]):
                return caller["rip"]
            regs = caller
            first = False
    except (OSError, ELFError, ValueError):
        return None
    finally:
        for f in files.values():
            f.close()
    return None


def _parent_tail(code: bytes, base: int, start: int) -> list[int]:
    """The instructions a clone's parent runs from after the `syscall` to its `ret` (tests and
    conditional jumps only: glibc's clone.S and clone3.S), each with its return address at rsp."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    out: list[int] = []
    for address, _size, mnemonic, _ops in md.disasm_lite(code[start - base:start - base + 32], start):
        if mnemonic != "test" and not mnemonic.startswith("j") and mnemonic not in ("ret", "cmp"):
            return []
        if mnemonic == "jmp":
            return []
        out.append(address)
        if mnemonic == "ret":
            return out
    return []


def return_address(pid: int, target: Target, tid: int, sites: LibcSites) -> int | None:
    """Where pthread_create returns to in a thread stopped inside it (its frames in libc, and
    in ld.so where libc calls it: the new thread's TLS); None when they cannot be unwound."""
    where = libc_function(pid, "pthread_create")
    if where is None:
        return None
    lo, hi = where
    return _unwind_to(pid, target, tid, lambda pc, caller: lo <= pc < hi, sites.clone_returns)


def exit_address(pid: int, target: Target, tid: int, system: list[tuple[int, int]],
                 sites: LibcSites) -> int | None:
    """Where a thread stopped in libc or the loader (`system`) returns to the program's code:
    its first caller outside them; None when that cannot be unwound."""
    return _unwind_to(pid, target, tid, lambda pc, caller: not any(lo <= caller < hi for lo, hi in system),
                      sites.clone_returns)


@dataclass
class BirthWatch:
    """The threads waited for in one process, and what arms one (AgentLink.arm_thread, without
    its pthread_create check: these are known to be out of it)."""

    pid: int
    sites: LibcSites
    arm: Callable[[Target, int], str]
    known: frozenset[int] = frozenset()  # the threads at the injection (armed or waited for there)
    creators: dict[int, int] = field(default_factory=dict)  # tid -> its pthread_create's return address
    children: set[int] = field(default_factory=set)  # threads being born, armed at their mask's restore
    armed: list[int] = field(default_factory=list)  # what the watch armed

    def addresses(self) -> list[int]:
        return sorted(self.sites.masks | set(self.creators.values()))

    @property
    def done(self) -> bool:
        return not self.creators and not self.children

    def hit(self, target: Target, tid: int, addr: int) -> None:
        """A thread reached one of the watched addresses (its breakpoint never stops). A thread
        the injection did not see, at a mask's restore that lets SIGBUS through, is one libc
        started since (or is starting): armed there, before its start routine."""
        if (addr in self.sites.masks and (tid in self.children or tid not in self.known) and tid not in self.armed
                and not _blocks_sigbus(self.pid, tid)):
            self.children.discard(tid)
            self._arm(target, tid)
        if self.creators.get(tid) == addr:
            del self.creators[tid]
            self._arm(target, tid)
            # The thread it created: armed at its mask's restore, or now if it is past it.
            for t in _tasks(self.pid) - self.known - set(self.armed):
                if _blocks_sigbus(self.pid, t):
                    self.children.add(t)
                else:
                    self._arm(target, t)
        self.children &= _tasks(self.pid)

    def _arm(self, target: Target, tid: int) -> None:
        self.arm(target, tid)
        self.armed.append(tid)


def _after_mask(target: Target, pc: int, sites: LibcSites, span: int = 48) -> bool:
    """Whether `pc` is at one of libc's mask restores (LibcSites.masks) or past it before the
    next call or jump out of straight-line code: in start_thread, between the restore of the
    creator's mask and the call of the start routine, where a thread holds nothing of libc's."""
    import capstone

    for mask in sites.masks:
        if not 0 <= pc - mask < span:
            continue
        if pc == mask:
            return True
        try:
            code = target.read_memory(mask, span)
        except (RuntimeError, OSError, ValueError):
            return False
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        for address, _size, mnemonic, _ops in md.disasm_lite(code, mask):
            if address == pc:
                return True
            if mnemonic in ("call", "ret", "jmp", "syscall") or address > pc:
                break
    return False


def _tasks(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


def _blocks_sigbus(pid: int, tid: int) -> bool:
    return bool(blocked_signals(pid, tid) & (1 << (SIGBUS - 1)))


def _keeps_sigtrap_blocked(pid: int, tid: int) -> bool:
    """A thread that blocks SIGTRAP by its own choice (not inside one of libc's block-everything
    windows, after which its mask comes back): no breakpoint for it where it goes (the kernel
    would reset the program's SIGTRAP handler)."""
    return bool(blocked_signals(pid, tid) & (1 << (SIGTRAP - 1))) and not being_born(pid, tid)


def being_born(pid: int, tid: int) -> bool:
    """A thread that blocks every signal: one libc is starting (start_thread has not restored
    its creator's mask yet), or its creator, inside pthread_create around the clone (newborn
    tells them apart)."""
    return blocked_signals(pid, tid) & _ALL_BLOCKED == _ALL_BLOCKED


def newborn(pid: int, target: Target, tid: int) -> bool:
    """A thread libc is starting, as seen at an injection: it blocks every signal and is not
    inside pthread_create. Its creator blocks them all too, around the clone: taken for a
    newborn, it would be armed at its own mask's restore and the watch would end there, before
    the thread it makes (unknown at the injection) is armed: that thread's faults all went
    uncounted, silently (lldb, 1 run in 30 under load)."""
    if not being_born(pid, tid):
        return False
    try:
        rip, rsp = target.read_register("rip", tid), target.read_register("rsp", tid)
    except (RuntimeError, ValueError, KeyError):
        return True
    return not creating_thread(pid, rip, rsp, target.read_memory)



@dataclass
class Parking:
    """While the agent's dlopen runs with the other threads running (one of them may hold a lock
    dlopen takes: agentlink.lock_holders), each other thread is held at a `jmp .` in libc before
    it runs any of the program's code, so that none makes a fault the agent cannot count yet:
    at once when it is stopped in the program's code, where it returns from libc or the loader
    (its first caller outside them) when it is stopped in there, at once when libc started it
    and it stopped at its mask's restore or past it before its start routine (_after_mask:
    nothing of libc's held), and a thread born meanwhile at its mask's restore. Afterwards each
    goes on from where it was held."""

    pid: int
    sites: LibcSites
    exits: dict[int, int] = field(default_factory=dict)  # tid -> where it leaves libc
    parked: dict[int, int] = field(default_factory=dict)  # tid -> the PC it goes on from
    loose: list[int] = field(default_factory=list)  # threads neither held nor to be: they ran
    # Threads stopped at a fault in the program's code, still to run it (`later`): the debugger
    # keeps them stopped through the call (AddressWatcher.hold): their step past the fault is
    # queued on them, and a thread moved to the spin would take that step there.
    held: list[int] = field(default_factory=list)
    born: set[int] = field(default_factory=set)  # being started by libc: held where it unblocks SIGBUS
    seen: frozenset[int] = frozenset()  # the threads at the plan: any other is born meanwhile

    @classmethod
    def plan(cls, pid: int, target: Target, others: list[int], sites: LibcSites,
             system: list[tuple[int, int]], later: frozenset[int] = frozenset()) -> Parking | None:
        if sites.spin is None:
            return None
        parking = cls(pid, sites, seen=frozenset(_tasks(pid)))
        for tid in others:
            pc = target.read_register("rip", tid)
            if tid in later and not any(lo <= pc < hi for lo, hi in system):
                parking.held.append(tid)
                continue
            if pc in sites.clone_returns and target.read_register("rax", tid) == 0:
                parking.park(target, tid, pc)  # being born: it has run nothing yet
                continue
            if any(lo <= pc < hi for lo, hi in system):
                if newborn(pid, target, tid):
                    # start_thread calls the start routine from libc: held when its mask is
                    # restored, just before (it may be inside a system call now: rseq).
                    parking.born.add(tid)
                    continue
                exit_at = None if _keeps_sigtrap_blocked(pid, tid) else exit_address(pid, target, tid, system, sites)
                if exit_at is not None:
                    parking.exits[tid] = exit_at
                    continue
                if not _blocks_sigbus(pid, tid) and _after_mask(target, pc, sites):
                    # No caller outside libc: one libc started, its creator's mask just restored
                    # in start_thread, its start routine next (held there, as hit() does).
                    parking.park(target, tid, pc)
                    continue
            elif syscall_of(pid, tid) is None:
                parking.park(target, tid, pc)
                continue
            parking.loose.append(tid)
        return parking

    def addresses(self) -> list[int]:
        return sorted(set(self.exits.values()) | self.sites.masks)

    def park(self, target: Target, tid: int, pc: int) -> None:
        assert self.sites.spin is not None
        self.parked[tid] = pc
        target.write_register("rip", self.sites.spin, tid)

    def hit(self, target: Target, tid: int, addr: int) -> None:
        if tid in self.parked:
            return
        if self.exits.get(tid) == addr:
            self.park(target, tid, addr)
        elif (addr in self.sites.masks and (tid in self.born or tid not in self.seen)
              and not _blocks_sigbus(self.pid, tid)):
            self.park(target, tid, addr)  # started by libc: its mask restored, its start routine next

    def release(self, target: Target) -> None:
        """Every held thread goes on from where it was held (the process stopped)."""
        for tid, pc in self.parked.items():
            try:
                target.write_register("rip", pc, tid)
            except (RuntimeError, ValueError):
                pass  # (a thread gone meanwhile)


class AddressWatcher(Protocol):
    """What a debugger offers for the watches here (agentlink.AgentHost has it)."""

    def watch_addresses(self, addrs: Sequence[int], on_hit: Callable[[Target, int, int], None]) -> None:
        """Breakpoints at `addrs` that never stop the program: on_hit(target, tid, addr) as a
        thread reaches one. Replaces those set before."""
        ...

    def hold(self, tids: Sequence[int]) -> bool:
        """Keep these threads stopped while the debugger runs the others (its calls included),
        until hold([]); False when it cannot (they run)."""
        ...

    def unwatch_addresses(self) -> None:
        """Those breakpoints go (at once, or as soon as the debugger allows it)."""
        ...


class ThreadBirths:
    """One debugger session's BirthWatch: made at an injection when a thread is inside
    pthread_create or being born, its breakpoints gone once every such thread is armed."""

    def __init__(self) -> None:
        self.watch_: BirthWatch | None = None
        self.host: AddressWatcher | None = None

    def waits_for(self, tid: int) -> bool:
        return self.watch_ is not None and tid in self.watch_.creators

    def watch(self, host: AddressWatcher, target: Target, pid: int, creating: list[int], blocked: list[int],
              arm: Callable[[Target, int], str]) -> set[int]:
        """Threads inside pthread_create (`creating`), and threads being born among `blocked`:
        armed by `arm` when that is safe. Returns those the watch will arm."""
        born = [t for t in blocked if newborn(pid, target, t)]
        if not creating and not born:
            return set()
        sites = libc_sites(pid)
        if sites is None:
            return set()
        watch = BirthWatch(pid, sites, arm, known=frozenset(_tasks(pid)))
        for tid in creating:
            ret = None if _keeps_sigtrap_blocked(pid, tid) else return_address(pid, target, tid, sites)
            if ret is not None:
                watch.creators[tid] = ret
        watch.children.update(born)
        if watch.done:
            return set()
        try:
            host.watch_addresses(watch.addresses(), self._hit)
        except RuntimeError:
            return set()
        self.watch_, self.host = watch, host
        return set(watch.creators) | watch.children

    def _hit(self, target: Target, tid: int, addr: int) -> None:
        watch = self.watch_
        if watch is None:
            return
        watch.hit(target, tid, addr)
        if watch.done:
            self.unwatch()

    def unwatch(self) -> None:
        if self.watch_ is not None and self.host is not None:
            self.watch_ = None
            self.host.unwatch_addresses()


def park_others(host: AddressWatcher, target: Target, pid: int, later: frozenset[int], caller: int) -> Parking | None:
    """The threads other than the one making the call held before the program's code while the
    agent's dlopen runs with them running (Parking); None when that cannot be arranged (they run
    free, and the injection says so). Let them go with `unpark`."""
    sites = libc_sites(pid)
    if sites is None:
        return None
    others = [t for t in target.threads() if t != caller]
    try:
        parking = Parking.plan(pid, target, others, sites, system_ranges(pid), later)
    except (RuntimeError, OSError, ValueError):
        return None
    if parking is not None:
        try:
            host.watch_addresses(parking.addresses(), parking.hit)
        except RuntimeError:
            parking.release(target)
            return None
        if parking.held and not host.hold(parking.held):
            parking.loose += parking.held
            parking.held = []
    return parking


def unpark(host: AddressWatcher, target: Target, parking: Parking) -> None:
    """After the call: every thread Parking moved to the spin goes on from where it was held
    (those the debugger holds, Parking.held, until its hold([]))."""
    parking.release(target)
    host.unwatch_addresses()


def hold_owed(host: AddressWatcher, owed: Collection[int]) -> list[int]:
    """Threads stopped at a fault in the program's code, still to step past it, kept stopped by
    the debugger through the calls that follow (until hold([])); returns those it cannot hold."""
    tids = sorted(owed)
    return [] if not tids or host.hold(tids) else tids
