"""Where a module makes the syscalls the trap engine must see (lldb has no `catch syscall`):
the `syscall` instructions whose number is loaded as a constant just before them, found in the
module's code so that breakpoints on them and on the next instruction act as entry and exit."""
from __future__ import annotations

import re
from dataclasses import dataclass

import capstone

_SYSCALL = re.compile(b"\x0f\x05", re.DOTALL)
# `mov eax, imm32` (b8) and `mov rax, simm32` (48 c7 c0): how compilers load a constant number.
_MOV_EAX = re.compile(b"\xb8|\x48\xc7\xc0", re.DOTALL)
_WINDOW = 64  # glibc loads the number at most a few argument moves before `syscall`
# Instructions that may sit between the number and `syscall` without touching rax: argument
# set-up. Anything else (a branch, a call, an implicit rax writer) makes the site unproven.
_SAFE = frozenset({"mov", "movsxd", "movzx", "movsx", "lea", "xor", "and", "or", "sub", "add",
                   "test", "cmp", "push", "pop", "nop", "endbr64", "shl", "shr", "sar", "neg", "not"})
_RAX_NAMES = frozenset({"rax", "eax", "ax", "al", "ah"})


@dataclass(frozen=True)
class SyscallSite:
    addr: int  # address of the `syscall` instruction: a breakpoint here is the syscall's entry
    nr: int  # the syscall number it makes
    # `addr + 2`, where a breakpoint is the syscall's exit (a new thread of clone also starts here)
    @property
    def exit_addr(self) -> int:
        return self.addr + 2


def _writes_rax(mnemonic: str, op_str: str) -> bool:
    dest = op_str.split(",", 1)[0].strip()
    return dest in _RAX_NAMES


def _site_at(md: capstone.Cs, code: bytes, off: int) -> int | None:
    """The constant syscall number of the `syscall` at `off`, when straight-line code from a
    `mov eax, imm` lands exactly on it (which also proves `off` is an instruction boundary)."""
    lo = max(0, off - _WINDOW)
    best: int | None = None
    for m in _MOV_EAX.finditer(code, lo, off):
        start = m.start()
        nr: int | None = None
        pos = start
        ok = True
        for address, size, mnemonic, op_str in md.disasm_lite(code[start:off + 2], start):
            if address == start:
                if mnemonic != "mov" or not op_str.split(",")[0].strip() in ("eax", "rax"):
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


def find_sites(code: bytes, base: int, wanted: frozenset[int]) -> list[SyscallSite]:
    """Sites in `code` (an executable section loaded at `base`) making a syscall in `wanted`."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    sites = []
    for m in _SYSCALL.finditer(code):
        nr = _site_at(md, code, m.start())
        if nr is not None and nr in wanted:
            sites.append(SyscallSite(base + m.start(), nr))
    return sites
