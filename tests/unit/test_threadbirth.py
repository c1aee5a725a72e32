"""engines/threadbirth.py: libc's thread-birth and mask-restore sites found in a real process,
and the watch's decisions (a fake target: the debuggers' runs are tests/debuggers'
test_trace_start_inside_pthread_create)."""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from ualdbg.engines.threadbirth import BirthWatch, Parking, being_born, libc_sites


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/maps") as f:
                if "libc.so" in f.read():
                    break
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_libc_sites_are_inside_libc_code(sleeper: int) -> None:
    sites = libc_sites(sleeper)
    assert sites is not None and sites.births and sites.masks
    spans = []
    with open(f"/proc/{sleeper}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 6 and "x" in parts[1] and os.path.basename(parts[5]).startswith("libc.so"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                spans.append((lo, hi))
    with open(f"/proc/{sleeper}/mem", "rb") as mem:
        for addr in sites.masks:
            assert any(lo <= addr < hi for lo, hi in spans)
            mem.seek(addr - 2)
            assert mem.read(2) == b"\x0f\x05"  # right after a `syscall`
        for addr in sites.births:
            assert any(lo <= addr < hi for lo, hi in spans)
    assert not being_born(sleeper, sleeper)  # sleep blocks nothing


def test_the_watch_arms_the_creator_at_its_return_and_a_new_thread_at_its_mask(sleeper: int) -> None:
    """The creator is armed where pthread_create returns, and the thread it made (one the
    injection did not know) at its mask's restore, or at once when it is past it. No breakpoint
    goes where a thread has SIGTRAP blocked (a clone's return, glibc's own SIG_BLOCKs): the
    kernel would reset the program's SIGTRAP action."""
    sites = libc_sites(sleeper)
    assert sites is not None
    armed: list[int] = []
    watch = BirthWatch(sleeper, sites, lambda target, tid: armed.append(tid) or "armed", known=frozenset({4242}))
    watch.creators[4242] = 0x1234
    assert 0x1234 in watch.addresses() and not set(watch.addresses()) & sites.births and not watch.done
    watch.hit(None, 4242, 0x1234)  # type: ignore[arg-type]
    assert armed == [4242, sleeper] and watch.done  # (the sleeper's thread: unknown, SIGBUS open)
    armed.clear()
    late = BirthWatch(sleeper, sites, lambda target, tid: armed.append(tid) or "armed", known=frozenset())
    late.hit(None, sleeper, min(sites.masks))  # type: ignore[arg-type]
    late.hit(None, sleeper, min(sites.masks))  # type: ignore[arg-type]
    assert armed == [sleeper]  # once


class RegisterTarget:
    """Registers of fake threads (rip, rax), written as the debuggers write them."""

    def __init__(self, regs: dict[int, dict[str, int]]) -> None:
        self.regs = regs

    def read_register(self, name: str, tid: int | None = None) -> int:
        assert tid is not None
        return self.regs[tid][name]

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        assert tid is not None
        self.regs[tid][name] = value


def test_parking_holds_threads_before_the_programs_code_and_lets_them_go(sleeper: int) -> None:
    """A thread in the program's code is held at once, one in libc where it leaves libc, one
    started meanwhile where its mask is restored; each goes on from exactly there."""
    sites = libc_sites(sleeper)
    assert sites is not None and sites.spin is not None
    mask = min(sites.masks)
    parking = Parking(sleeper, sites, seen=frozenset({1, 2}))
    parking.exits[2] = 0x401234  # a thread in libc, whose caller is at 0x401234
    target = RegisterTarget({1: {"rip": 0x401000}, 2: {"rip": 0x7F0000}, sleeper: {"rip": mask}})
    parking.park(target, 1, 0x401000)  # type: ignore[arg-type]
    assert target.regs[1]["rip"] == sites.spin
    parking.hit(target, 2, 0x999)  # type: ignore[arg-type]  # not its exit
    assert 2 not in parking.parked
    parking.hit(target, 2, 0x401234)  # type: ignore[arg-type]
    parking.hit(target, sleeper, mask)  # type: ignore[arg-type]  # a thread not seen at the plan
    assert parking.parked == {1: 0x401000, 2: 0x401234, sleeper: mask}
    assert all(target.regs[t]["rip"] == sites.spin for t in (1, 2, sleeper))
    assert not set(parking.addresses()) & sites.births
    parking.release(target)  # type: ignore[arg-type]
    assert [target.regs[t]["rip"] for t in (1, 2, sleeper)] == [0x401000, 0x401234, mask]
    with open(f"/proc/{sleeper}/mem", "rb") as mem:
        mem.seek(sites.spin)
        assert mem.read(2) == b"\xeb\xfe"  # jmp .


def test_parking_holds_a_thread_libc_started_at_its_restored_mask(sleeper: int) -> None:
    """A thread stopped in libc where start_thread has just restored its creator's mask has no
    caller outside libc to be held at: it is held where it stands (its start routine is next),
    not left to run the program's code while the agent loads (lldb stops such a thread at the
    break engine's own breakpoint there; CI saw it left running, and the trace said so). A
    thread elsewhere in libc that cannot be unwound still runs, and is said to have run."""
    from ualdbg.engines.procfs import system_ranges

    sites = libc_sites(sleeper)
    assert sites is not None and sites.spin is not None
    mask = min(sites.masks)
    other = next(a for a in sorted(sites.births) if a not in sites.masks and a not in sites.clone_returns)
    # (registers beyond rip and rax are unknown: nothing unwinds, as at start_thread's bottom)
    target = RegisterTarget({sleeper: {"rip": mask, "rax": 0}})
    parking = Parking.plan(sleeper, target, [sleeper], sites, system_ranges(sleeper))  # type: ignore[arg-type]
    assert parking is not None and parking.parked == {sleeper: mask} and not parking.loose
    assert target.regs[sleeper]["rip"] == sites.spin
    parking.release(target)  # type: ignore[arg-type]
    assert target.regs[sleeper]["rip"] == mask
    target = RegisterTarget({sleeper: {"rip": other, "rax": 1}})
    parking = Parking.plan(sleeper, target, [sleeper], sites, system_ranges(sleeper))  # type: ignore[arg-type]
    assert parking is not None and parking.loose == [sleeper] and not parking.parked


def test_parking_holds_a_thread_libc_started_between_its_mask_and_its_start_routine(sleeper: int) -> None:
    """A thread stopped a few instructions past start_thread's restore of its mask, before the
    call of its start routine (CI: lldb stopped one there, no stop reason of its own, and it ran
    loose through the load), is held where it stands too; past a call it is not."""
    import capstone

    from ualdbg.engines.procfs import system_ranges

    sites = libc_sites(sleeper)
    assert sites is not None and sites.spin is not None

    class MemoryTarget(RegisterTarget):
        def read_memory(self, addr: int, size: int) -> bytes:
            with open(f"/proc/{sleeper}/mem", "rb") as mem:
                mem.seek(addr)
                return mem.read(size)

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    windows = []
    for mask in sorted(sites.masks):
        insns = list(md.disasm_lite(MemoryTarget({}).read_memory(mask, 48), mask))
        straight = []
        for address, _size, mnemonic, _ops in insns:
            straight.append(address)
            if mnemonic in ("call", "ret", "jmp", "syscall"):
                windows.append((straight, insns[len(straight)][0] if len(straight) < len(insns) else None))
                break
    inside = next((w for w, _ in windows if len(w) > 1), None)
    assert inside is not None, "no mask restore of libc's is followed by straight-line code"
    for pc in inside:
        target = MemoryTarget({sleeper: {"rip": pc, "rax": 0}})
        parking = Parking.plan(sleeper, target, [sleeper], sites, system_ranges(sleeper))  # type: ignore[arg-type]
        assert parking is not None and parking.parked == {sleeper: pc} and not parking.loose, hex(pc)
    past = next(after for _, after in windows if after is not None and after not in sites.masks)
    target = MemoryTarget({sleeper: {"rip": past, "rax": 0}})
    parking = Parking.plan(sleeper, target, [sleeper], sites, system_ranges(sleeper))  # type: ignore[arg-type]
    assert parking is not None and parking.loose == [sleeper], hex(past)


def test_parking_has_the_debugger_hold_a_thread_owed_its_step_in_the_programs_code(sleeper: int) -> None:
    """A thread stopped at a fault in the program's code, still to step past it (`later`: lldb's
    step is queued on it), is not moved to the spin (that step would be taken there) but held by
    the debugger through the call; one owed its step inside libc may hold a lock there and is
    held at its way out, as any other (CI: lldb let such a thread run through the load, its step
    ended there before the agent was live, and it ran unarmed: 19 of a worker's 20 faults lost)."""
    from ualdbg.engines.procfs import system_ranges
    from ualdbg.engines.threadbirth import hold_owed, park_others, unpark

    class Host:
        def __init__(self, can_hold: bool) -> None:
            self.can_hold, self.held, self.watched = can_hold, [], []

        def watch_addresses(self, addrs, on_hit):  # type: ignore[no-untyped-def]
            self.watched = list(addrs)

        def unwatch_addresses(self) -> None:
            self.watched = []

        def hold(self, tids):  # type: ignore[no-untyped-def]
            if tids and not self.can_hold:
                return False
            self.held = list(tids)
            return True

    sites = libc_sites(sleeper)
    assert sites is not None and sites.spin is not None
    program_pc, caller = 0x401000, 7
    assert not any(lo <= program_pc < hi for lo, hi in system_ranges(sleeper))

    class Threads(RegisterTarget):
        def threads(self) -> list[int]:
            return sorted(self.regs)

    target = Threads({sleeper: {"rip": program_pc, "rax": 0}, caller: {"rip": program_pc, "rax": 0}})
    host = Host(can_hold=True)
    parking = park_others(host, target, sleeper, frozenset({sleeper}), caller)  # type: ignore[arg-type]
    assert parking is not None and parking.held == [sleeper] and not parking.parked and not parking.loose
    assert host.held == [sleeper] and target.regs[sleeper]["rip"] == program_pc  # not moved
    unpark(host, target, parking)  # type: ignore[arg-type]
    assert host.held == [sleeper] and host.watched == []  # (held through both calls: hold([]) after)
    assert hold_owed(host, {sleeper}) == [] and host.held == [sleeper]  # (no lock holder: no Parking)
    assert hold_owed(Host(can_hold=False), {sleeper}) == [sleeper]  # it runs, and is said to
    # A debugger that cannot hold it: it runs, and is said to have run.
    host = Host(can_hold=False)
    parking = park_others(host, target, sleeper, frozenset({sleeper}), caller)  # type: ignore[arg-type]
    assert parking is not None and parking.loose == [sleeper] and not parking.held
    # Owed its step inside libc, at a mask's restore with no caller outside: held there by the spin.
    mask = min(sites.masks)
    target = Threads({sleeper: {"rip": mask, "rax": 0}, caller: {"rip": program_pc, "rax": 0}})
    parking = park_others(Host(can_hold=True), target, sleeper, frozenset({sleeper}), caller)  # type: ignore[arg-type]
    assert parking is not None and parking.parked == {sleeper: mask} and not parking.held
