"""Where a module makes a syscall (lldb has no `catch syscall`; the agent's thread-birth watch needs libc's clone and rt_sigprocmask):
the `syscall` instructions whose number is loaded as a constant just before them, found in the
module's code so that breakpoints on them and on the next instruction act as entry and exit."""
from __future__ import annotations

import re
from collections.abc import Callable

import capstone

from ..lazyclass import dataclass

_SYSCALL = re.compile(b"\x0f\x05", re.DOTALL)
# `mov eax, imm32` (b8) and `mov rax, simm32` (48 c7 c0): how compilers load a constant number.
_MOV_EAX = re.compile(b"\xb8|\x48\xc7\xc0", re.DOTALL)
_WINDOW = 64  # glibc loads the number at most a few argument moves before `syscall`
# Instructions that may sit between the number and `syscall` without touching rax: argument
# set-up. Anything else (a branch, a call, an implicit rax writer) makes the site unproven.
_SAFE = frozenset({"mov", "movabs", "movsxd", "movzx", "movsx", "lea", "xor", "and", "or", "sub", "add",
                   "test", "cmp", "push", "pop", "nop", "endbr64", "shl", "shr", "sar", "neg", "not"})
_RAX_NAMES = frozenset({"rax", "eax", "ax", "al", "ah"})


@dataclass(frozen=True)
class SyscallSite:
    addr: int  # address of the `syscall` instruction: a breakpoint here is the syscall's entry
    nr: int  # the syscall number it makes
    # Where a breakpoint is the syscall's exit: the instruction after `syscall`, or for the
    # task-creating ones the one after that (see exit_after).
    exit_addr: int
    # Where a thread is after lldb single-stepped the instruction under the exit breakpoint
    # (to get past it): a trace stop there is lldb's, not the user's.
    after_exit: int = 0
    # The first argument (rdi) is the constant 0 (for rt_sigprocmask: SIG_BLOCK), zeroed in the
    # straight-line code before the `syscall`: how glibc blocks signals for itself.
    zero_arg: bool = False


_FLOW = frozenset({"jmp", "ret", "call", "syscall", "int3", "hlt", "ud2"})


def exit_after(md: capstone.Cs, code: bytes, off: int, base: int, skip_one: bool) -> int:
    """The exit breakpoint of the `syscall` at `off`. After fork and vfork lldb resumes the
    parent from its fork event stop, already at `syscall + 2`, and steps over a breakpoint at
    the PC it resumes from without reporting it: those exits go one instruction further, when
    that instruction is not a branch (all threads and children pass through it)."""
    nxt = off + 2
    if skip_one:
        for _address, size, mnemonic, _ops in md.disasm_lite(code[nxt:nxt + 16], nxt, 1):
            if not mnemonic.startswith("j") and mnemonic not in _FLOW and not mnemonic.startswith("loop"):
                return base + nxt + size
    return base + nxt


def _writes_rax(mnemonic: str, op_str: str) -> bool:
    dest = op_str.split(",", 1)[0].strip()
    return dest in _RAX_NAMES


def _site_at(md: capstone.Cs, code: bytes, off: int) -> int | None:
    """The constant syscall number of the `syscall` at `off`, when straight-line code from a
    `mov eax, imm` lands exactly on it (an instruction boundary only if the `mov` is one:
    on_boundary)."""
    lo = max(0, off - _WINDOW)
    best: int | None = None
    for m in _MOV_EAX.finditer(code, lo, off):
        start = m.start()
        nr: int | None = None
        pos = start
        ok = True
        for address, size, mnemonic, op_str in md.disasm_lite(code[start:off + 2], start):
            if address == start:
                if mnemonic != "mov" or op_str.split(",")[0].strip() not in ("eax", "rax"):
                    ok = False
                    break
                try:
                    nr = int(op_str.split(",")[1].strip(), 0)
                except ValueError:
                    ok = False
                    break
            elif address == off:
                ok = mnemonic == "syscall"
                pos = address
                break
            elif mnemonic not in _SAFE or _writes_rax(mnemonic, op_str):
                ok = False
                break
            pos = address + size
        if ok and pos == off and nr is not None:
            best = nr  # later candidates are closer to the syscall: keep the last that proves it
    return best


_ARG_WINDOW = 96  # glibc may set the arguments well before the number (posix_spawn: 71 bytes)
_RDI_NAMES = frozenset({"rdi", "edi", "di", "dil"})


def _zero_first_arg(md: capstone.Cs, code: bytes, off: int) -> bool:
    """Whether some straight-line decoding of argument set-up lands on the `syscall` at `off`
    with `xor edi, edi` (or `mov edi, 0`) as the last writer of rdi."""
    for start in range(max(0, off - _ARG_WINDOW), off):
        zero = False
        for address, _size, mnemonic, op_str in md.disasm_lite(code[start:off + 2], start):
            if address >= off:
                if address == off and mnemonic == "syscall" and zero:
                    return True
                break
            if mnemonic not in _SAFE:
                break
            ops = [o.strip() for o in op_str.split(",")]
            if ops[0] in _RDI_NAMES:
                zero = ((mnemonic == "xor" and len(ops) == 2 and ops[1] == ops[0])
                        or (mnemonic == "mov" and len(ops) == 2 and ops[1] in ("0", "0x0")))
    return False


def _next(md: capstone.Cs, code: bytes, off: int) -> int:
    for _address, size, _mnemonic, _ops in md.disasm_lite(code[off:off + 16], off, 1):
        return off + size
    return off


def on_boundary(md: capstone.Cs, code: bytes, start: int, off: int) -> bool:
    """Whether decoding the code from `start` (its function's first instruction) reaches an
    instruction at `off`. `_site_at` alone proves only that straight-line code from *a* `b8`
    byte lands on `0f 05`: both can be bytes inside other instructions (a movabs immediate held
    `b8 0e 00 00 00 0f 05 00`; lldb's exit breakpoint then wrote 0xcc into it, and an int3 in a
    `jg`'s displacement sends it 0x34000000 below its target)."""
    pos = start
    while pos < off:
        step = pos
        for address, size, _mnemonic, _ops in md.disasm_lite(code[pos:off + 16], pos):
            step = address + size
            if step >= off:
                break
        if step == pos:
            return False  # undecodable: not proven
        pos = step
    return pos == off


def find_sites(code: bytes, base: int, wanted: frozenset[int], task: frozenset[int] = frozenset(),
               function_start: Callable[[int], int | None] = lambda addr: None) -> list[SyscallSite]:
    """Sites in `code` (an executable section loaded at `base`) making a syscall in `wanted`;
    those in `task` (task-creating) get their exit one instruction later (see exit_after).
    `function_start(addr)`: the address of the function holding `addr` (None when unknown): a
    site its decoding does not reach is inside another instruction and left out."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    sites = []
    for m in _SYSCALL.finditer(code):
        nr = _site_at(md, code, m.start())
        start = function_start(base + m.start()) if nr is not None and nr in wanted else None
        if start is not None and base <= start <= base + m.start() and not on_boundary(md, code, start - base, m.start()):
            continue
        if nr is not None and nr in wanted:
            exit_addr = exit_after(md, code, m.start(), base, nr in task)
            sites.append(SyscallSite(base + m.start(), nr, exit_addr, _next(md, code, exit_addr - base) + base,
                                     _zero_first_arg(md, code, m.start())))
    return sites
