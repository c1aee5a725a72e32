"""Whether a ualdbg traces a process through the agent, read from outside it: every mapping of a
ualdbg_agent*.so in /proc/PID/maps (any user's build or copy, its file deleted or not) and the
`ualdbg_agent_owner` it exports: the ualdbg tracing with it, > 0 injected (`--pid`), < 0 preloaded
at launch, 0 inert (docs/SECURITY.md, "One tracer per process"); and `ualdbg_agent_orphan`: the
ualdbg that injected it and died, after which the agent disarmed itself (docs/AGENT.md)."""
from __future__ import annotations

import functools
import os
import stat
import struct
from collections.abc import Callable, Iterable

from ..lazyclass import dataclass

OWNER_SYMBOL = "ualdbg_agent_owner"
ORPHAN_SYMBOL = "ualdbg_agent_orphan"


@dataclass(frozen=True)
class LoadedAgent:
    """One copy of the agent mapped in a process."""

    path: str  # as /proc/PID/maps names it
    file: str  # where its ELF can be read (symbols), "" when nowhere
    bias: int
    owner: int  # the ualdbg tracing with it (> 0 injected, < 0 launched), 0 inert or unreadable
    orphan: int = 0  # the killed ualdbg that injected it, which it saw die and disarmed itself for

    @property
    def injected(self) -> bool:
        return self.owner > 0

    @property
    def ualdbg(self) -> int:
        return abs(self.owner)


def open_regular(path: str) -> int:
    """A read-only descriptor of `path` if it is a regular file; never waits on a FIFO (a name
    another user chose may be one)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, f"{path} is not a regular file")
    return fd


def elf_symbol(path: str, name: str) -> int | None:
    """st_value of a defined dynamic symbol of a shared object (its address less the load bias,
    the first PT_LOAD's vaddr being 0 in shared objects)."""
    found = elf_function(path, name)
    return None if found is None else found[0]


def elf_function(path: str, name: str, tables: tuple[str, ...] = (".dynsym",)) -> tuple[int, int] | None:
    """(st_value, st_size) of a defined dynamic symbol of a shared object (elf_symbol); with
    `tables` (".dynsym", ".symtab"), a local one too (the agent's own hidden functions)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    with os.fdopen(open_regular(path), "rb") as f:
        try:
            elf = ELFFile(f)
            for table in tables:
                syms = elf.get_section_by_name(table)
                for sym in (syms.get_symbol_by_name(name) or []) if syms is not None else []:  # type: ignore[attr-defined]
                    if sym["st_shndx"] != "SHN_UNDEF" and sym["st_value"]:
                        return int(sym["st_value"]), int(sym["st_size"])
        except (ELFError, ValueError, KeyError, struct.error) as exc:
            raise OSError(0, f"{path}: {exc}") from None
    return None


def mapped_file(pid: int, lo: int, hi: int, path: str) -> str:
    """Where the file mapped at [lo, hi) in `pid` can be read: the mapping itself (root: the very
    file, deleted or renamed since), else its name in the process's root; "" if nowhere."""
    by_mapping = f"/proc/{pid}/map_files/{lo:x}-{hi:x}"
    try:
        os.close(open_regular(by_mapping))
        return by_mapping
    except OSError:
        pass
    if path.endswith(" (deleted)") or not path.startswith("/"):
        return ""
    return f"/proc/{pid}/root{path}"


def loaded_agents(pid: int) -> list[LoadedAgent]:
    """Every copy of the agent mapped in `pid`, with its owner as far as it can be read."""
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) != 6 or int(parts[2], 16) != 0:
            continue
        path = parts[5].strip()
        if not os.path.basename(path.removesuffix(" (deleted)")).startswith("ualdbg_agent"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        file = mapped_file(pid, lo, hi, path)
        owner = orphan = 0
        try:
            owner = _read_long(pid, file, lo, OWNER_SYMBOL)
            orphan = _read_long(pid, file, lo, ORPHAN_SYMBOL)  # (0 from an agent older than issue 29's)
        except (OSError, struct.error):
            pass  # unknown here: the agent itself refuses a second tracer (ualdbg_agent_inject)
        out.append(LoadedAgent(path, file, lo, owner, orphan))
    return out


def _read_long(pid: int, file: str, bias: int, symbol: str) -> int:
    value = elf_symbol(file, symbol) if file else None
    if value is None:
        return 0
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(bias + value)
        return int(struct.unpack("<q", mem.read(8))[0])


def tracing_agent(pid: int) -> LoadedAgent | None:
    """The copy of the agent a ualdbg traces `pid` with (its owner's process may be gone: killed)."""
    return next((a for a in loaded_agents(pid) if a.owner), None)


def orphaned_agent(pid: int) -> LoadedAgent | None:
    """A copy of the agent that disarmed itself when the ualdbg that injected it died: no one traces
    with it, and a new trace removes it first (its patched jumps, wrappers and buffer remain)."""
    return next((a for a in loaded_agents(pid) if a.orphan and not a.owner), None)


def module_bias(pid: int, pred: Callable[[str], bool]) -> tuple[str, int] | None:
    """(path, load address) of the first module of `pid` whose path satisfies `pred`."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and int(parts[2], 16) == 0:
                path = parts[5].strip()
                if pred(path):
                    return path, int(parts[0].split("-")[0], 16)
    return None


def libc_function(pid: int, name: str) -> tuple[int, int] | None:
    """[start, end) of libc's function `name` in `pid`, or None (no libc, no such symbol)."""
    found = module_bias(pid, lambda p: os.path.basename(p).startswith(("libc.so", "libc-")))
    if found is None:
        return None
    path, base = found
    try:
        st = os.stat(f"/proc/{pid}/root{path}")
        sym = _function_of(f"/proc/{pid}/root{path}", name, st.st_dev, st.st_ino, st.st_mtime_ns)
    except OSError:
        return None
    return None if sym is None else (base + sym[0], base + sym[0] + max(sym[1], 1))


@functools.lru_cache(maxsize=8)
def _function_of(path: str, name: str, dev: int, ino: int, mtime: int) -> tuple[int, int] | None:
    """elf_function, read once per file (its identity in the key): libc's, for every thread."""
    return elf_function(path, name)


CREATION_NOTE = ("were inside pthread_create, not armed (the new thread would start with AC set and every "
                 "signal blocked, and the program die of it): their faults, and those of the thread being "
                 "created, go uncounted")


def creating_note(tids: Iterable[int]) -> str:
    """What a trace says of the threads creating_thread kept unarmed."""
    return f"thread(s) {', '.join(map(str, sorted(tids)))} {CREATION_NOTE}"


def creating_thread(pid: int, rip: int, rsp: int, read: Callable[[int, int], bytes],
                    span: int = 16384) -> bool:
    """Whether a stopped thread is inside libc's pthread_create (its PC there, or, its PC in libc,
    a return address into it within `span` bytes above its stack pointer). Such a thread must
    not be armed from outside: libc blocks every signal around the clone, and the new thread
    inherits AC and faults at once with SIGBUS blocked, which the kernel makes fatal; the
    agent's own pthread_create wrapper clears AC first, but a call already under way went to
    libc's."""
    where = libc_function(pid, "pthread_create")
    if where is None:
        return False
    lo, hi = where
    if lo <= rip < hi:
        return True
    mappings = _mappings_holding(pid, (rip, lo, rsp))
    if rip not in mappings or mappings[rip][1] != mappings.get(lo, (0, None))[1] or rsp not in mappings:
        return False  # not in libc (pthread_create's callees are libc's: mmap, mprotect, memset, clone)
    top = rsp & ~7
    try:
        data = read(top, min(span, mappings[rsp][0] - top))
    except (OSError, RuntimeError, ValueError):
        return False
    return any(lo <= v < hi for (v,) in struct.iter_unpack("<Q", data[: len(data) & ~7]))


def _mappings_holding(pid: int, addrs: tuple[int, ...]) -> dict[int, tuple[int, str]]:
    """For each address mapped in `pid`: (its mapping's end, its file or "")."""
    out: dict[int, tuple[int, str]] = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, _, hi = parts[0].partition("-")
                start, end = int(lo, 16), int(hi, 16)
                for a in addrs:
                    if start <= a < end:
                        out[a] = (end, parts[5].strip() if len(parts) == 6 else "")
    except (OSError, ValueError):
        return {}
    return out


def libc_symbol(pid: int, name: str) -> int:
    """The address of libc's `name` in `pid` (dlopen, for an injection: `trace --pid`, or a
    debugger's `trace start` on a running process); LookupError saying why there is none."""
    found = module_bias(pid, lambda p: os.path.basename(p).startswith(("libc.so", "libc-")))
    if found is None:
        raise LookupError(f"process {pid} has no libc mapped (static, or not glibc)")
    path, base = found
    value = elf_symbol(f"/proc/{pid}/root{path}", name)
    if value is None:
        raise LookupError(f"{path} of process {pid} has no {name} (glibc before 2.34?)")
    return base + value
