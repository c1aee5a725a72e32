"""Reader of the agent's shared-memory trace buffer (the layout is documented once, in
ualdbg/agent/src/agent/ualdbg_agent.h): the header's counters for live progress, the exact per-PC
site table, the ring of in-scope records, and the /proc/PID/maps snapshots for symbolization."""
from __future__ import annotations

import array
import errno
import mmap
import os
import re
import stat
import struct
from collections.abc import Iterator, Mapping

from ..lazyclass import dataclass

MAGIC = b"UALDBGA1"
VERSION = 1
HEADER_SIZE = 4096
SITE_SIZE = 664  # 640 before issue 33's cost-class counters (line_splits, page_splits, unclassed): both read
OLD_SITE_SIZE = 640
RECORD_SIZE = 176
VARIANTS = 4


def file_bytes(records: int) -> int:
    """The length of one process's buffer file with room for `records` records, as the agent
    lays it out (agent.c, buffer_create: header, 16,384 sites, the records, 4,096 patch entries
    of 80 bytes, 16 MiB of maps): every page of it may be written."""
    patches = (HEADER_SIZE + 16384 * SITE_SIZE + records * RECORD_SIZE + 63) & ~63
    return ((patches + 4096 * 80 + 4095) & ~4095) + (16 << 20)
GPR_NAMES = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
             "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")

# header.state
RUNNING, EXITED, EXECED = 1, 2, 3
# header.flags
F_ARMED, F_FOLLOW, F_AT_START, F_ALL, F_STRIPPED, F_NOSKIP = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
F_INJECTED, F_DETACHED = 0x40, 0x80  # loaded into a running process (trace --pid); detached from
F_SYSTEM = 0x100  # a system program the run's root started: never armed, its faults all out of scope
# site.flags
SITE_IN_SCOPE, SITE_TRAMPOLINE, SITE_EMULATED, SITE_STEPPED, SITE_SKIP, SITE_REP = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
SITE_PATCHED, SITE_UNPATCHABLE, SITE_SHADOW = 0x40, 0x80, 0x100
SITE_READY = 2
# patch.state and patch.reason (hot-site patching, issue 21)
PATCH_ACTIVE, PATCH_REFUSED = 1, 2
PATCH_REASONS = {  # ualdbg_agent.h, UALDBG_PATCH_R_*: why a site keeps trapping at every fault
    1: "instruction kind", 2: "mapping", 3: "short instruction, a neighbour cannot move",
    4: "threads could not be stopped outside it", 5: "branch target inside", 6: "jump would straddle 16 bytes",
    7: "out of reach", 8: "mprotect refused", 9: "patch table full", 10: "module code not readable as code",
    11: "function extent unclear", 12: "indirect jump in its function", 13: "file differs from memory",
    14: "overlaps a patch", 15: "rep compare or scan string (one trap per element)", 16: "call, jmp or ret (emulated)",
    17: "single-stepped", 18: "out-of-scope string routine (one trap per call)", 19: "fs/gs or 32-bit address",
    20: "stack operation", 21: "bit string (bt with a register offset)", 22: "masked AVX-512 access",
    23: "a moved neighbour's copy not proved the same",
}

_HEADER = struct.Struct("<8sIIIIII QQQQ qq IIII QQQ QQQ QQQ Q q QQQ 512s 1024s 512s")
_HEADER_FIELDS = (
    "magic", "version", "header_size", "site_size", "record_size", "site_capacity", "record_capacity",
    "maps_capacity", "sites_offset", "records_offset", "maps_offset", "pid", "ppid", "gen", "state", "flags",
    "sites_used", "start_ns", "armed_ns", "end_ns", "total", "ignored", "head", "skipped_calls", "emulated",
    "stepped", "maps_len", "exit_status", "dropped_sites", "threads", "unarmed_threads", "exe", "cmdline", "note",
)
_PATCH_HEADER = struct.Struct("<QIIII")  # at 2256: patches_offset, patch_capacity, patch_size, patches_used, patch_after
_PATCH = struct.Struct("<QQQIIII QQII")
_PATCH_CLASSES = struct.Struct("<QQ")  # at 64 of an 80-byte patch entry (issue 33): line_splits, page_splits
PATCH_SIZES = (_PATCH.size, _PATCH.size + _PATCH_CLASSES.size)
# at 3584: what the agent knows it did not see (issue 29; ualdbg_agent.h, "blind-spot counters")
_BLIND = struct.Struct("<QQQQQQQII")
_BLIND_AT = 3584
STEP_SLOTS = 32  # at 2280: the threads the agent single-steps now, then the PC each faulted at
_STEPS = struct.Struct(f"<{STEP_SLOTS}I{STEP_SLOTS}Q")
_STEPS_AT = 2280
_CODEMAPS = struct.Struct("<III")  # at 2664: code maps built, read from the run's folder, from an earlier run's
_CODEMAPS_AT = 2664
B_SIGBUS_TAKEN, B_EXEC_FOREIGN = 0x1, 0x2
_REGS = struct.Struct("<17Q")  # 16 GPRs, then the fs/gs base
_SITE = struct.Struct("<QQIIII16sQihh")
_SITE_CLASSES = struct.Struct("<QQQ")  # at 640: line_splits, page_splits, unclassed
_RECORD = struct.Struct("<QQQIIiI17Q")
_GPR_INDEX = {name: i for i, name in enumerate(GPR_NAMES)}
_FILE_NAME = re.compile(r"^(\d+)\.(\d+)\.buf$")


class BufferError(ValueError):
    """A file that is not an agent buffer this reader understands."""


@dataclass(frozen=True)
class Registers:
    """What the decoder needs to compute the address of a faulting access."""

    gpr: tuple[int, ...]
    seg_base: int

    def mapping(self) -> Mapping[str, int]:
        return RegisterView(self)


class RegisterView(Mapping[str, int]):
    """Registers by the names ualdbg.isa.decode asks for (rax..r15, fs_base, gs_base), without
    building a dict per record."""

    __slots__ = ("_regs",)

    def __init__(self, regs: Registers) -> None:
        self._regs = regs

    def __getitem__(self, name: str) -> int:
        i = _GPR_INDEX.get(name)
        if i is not None:
            return self._regs.gpr[i]
        if name in ("fs_base", "gs_base"):
            return self._regs.seg_base
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from GPR_NAMES
        yield "fs_base"
        yield "gs_base"

    def __len__(self) -> int:
        return len(GPR_NAMES) + 2


@dataclass(frozen=True)
class Blind:
    """What one process image ran without the agent watching (ualdbg_agent.h: blind_ns...)."""

    ns: int = 0  # thread time armed threads spent with SIGBUS blocked by the program
    events: int = 0  # times an armed thread blocked SIGBUS
    threads: int = 0  # threads that did
    handler_ns: int = 0  # time in the program's handlers run with SIGBUS blocked
    handler_events: int = 0
    children: int = 0  # processes started with the agent: each must have reported in
    children_untraced: int = 0  # processes started without it
    flags: int = 0  # B_*
    now: int = 0  # threads blind when the header was read


@dataclass(frozen=True)
class Header:
    version: int
    site_capacity: int
    record_capacity: int
    pid: int
    ppid: int
    gen: int
    state: int
    flags: int
    sites_used: int
    start_ns: int
    armed_ns: int
    end_ns: int
    total: int
    ignored: int
    head: int
    skipped_calls: int
    emulated: int
    stepped: int
    maps_len: int
    exit_status: int | None
    dropped_sites: int
    threads: int
    unarmed_threads: int
    exe: str
    argv: tuple[str, ...]
    note: str
    blind: Blind

    @property
    def armed(self) -> bool:
        return bool(self.flags & F_ARMED)

    @property
    def stripped(self) -> bool:
        return bool(self.flags & F_STRIPPED)

    @property
    def system(self) -> bool:
        """A system program the root started, run unarmed (engines/agent.py, agent_environment)."""
        return bool(self.flags & F_SYSTEM)


@dataclass(frozen=True)
class SiteEntry:
    pc: int
    count: int  # every fault, exactly: the traps, plus what a patch trampoline counted
    flags: int
    code: bytes  # the 16 bytes at pc when the site was made
    insn_len: int  # the agent's idea of the instruction's length (0: it could not decode it)
    variants: tuple[Registers, ...]  # one register snapshot per distinct alignment of its operands
    patched: int = 0  # of `count`, the faults a patch trampoline counted (no record for them)
    # of `count` (issue 33): the faults that spanned two 64-byte lines, of those two 4 KiB pages,
    # and the traps the agent could not size; None: a buffer of an agent that did not count them
    line_splits: int | None = None
    page_splits: int = 0
    unclassed: int = 0

    @property
    def in_scope(self) -> bool:
        return bool(self.flags & SITE_IN_SCOPE)

    @property
    def traps(self) -> int:
        """The faults that trapped (each one went to the ring)."""
        return self.count - self.patched


@dataclass(frozen=True)
class PatchEntry:
    """A hot site the agent patched (state PATCH_ACTIVE) or found it could not (PATCH_REFUSED)."""

    pc: int
    count: int  # faults counted by its trampoline in this process
    traps: int  # the site's traps when it was patched (or refused)
    state: int
    reason: str | None
    length: int  # bytes moved to the trampoline
    mask: int  # the address bits its trampoline tests
    in_scope: bool = True  # the agent's view (ualdbg's scope, from the symbols, decides the report)
    line_splits: int = 0  # of `count`, the ones that spanned two 64-byte lines (issue 33)
    page_splits: int = 0  # of those, two 4 KiB pages
    trampoline: int = 0  # where the trampoline's code for the site's instruction is (process-local)


@dataclass(frozen=True)
class RecordEntry:
    seq: int
    time_ns: int
    pc: int
    pid: int
    tid: int
    cpu: int | None
    flags: int
    regs: Registers


def _open_buffer(path: str) -> int:
    """A descriptor of the buffer file `path`, read-only: never through a symbolic link, never a
    FIFO or device (O_NONBLOCK: opening one does not wait), never a file the directory's owner
    did not make (a hard link to someone else's). Root tracing another user's process reads a
    directory that user writes in (agent/rundir.py)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        folder = os.stat(os.path.dirname(path) or ".")
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != folder.st_uid:
            raise BufferError(f"{path}: not a buffer the agent made (a link, a special file or another user's)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


class AgentBuffer:
    """One buffer file, mapped read-only. Safe to read while the agent writes it: counters are
    read as they are, records whose sequence number does not match their slot are skipped."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            fd = _open_buffer(path)
            try:
                st = os.fstat(fd)
                self._id = (st.st_dev, st.st_ino)
                if st.st_size < HEADER_SIZE:
                    raise BufferError(f"{path}: too short for an agent buffer ({st.st_size} bytes)")
                self._map = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        except OSError as exc:
            raise BufferError(f"cannot read {path}: {exc.strerror}") from None
        raw = self._map[: _HEADER.size]
        if raw[:8] != MAGIC:
            self.close()
            raise BufferError(f"{path}: not an agent buffer (magic {raw[:8]!r})")
        values = dict(zip(_HEADER_FIELDS, _HEADER.unpack(raw)))
        if values["version"] != VERSION or values["site_size"] not in (SITE_SIZE, OLD_SITE_SIZE) \
                or values["record_size"] != RECORD_SIZE:
            self.close()
            raise BufferError(f"{path}: buffer version {values['version']} (site {values['site_size']}, record "
                              f"{values['record_size']} bytes); this ualdbg reads version {VERSION}")
        self._layout = values

    def close(self) -> None:
        try:
            self._map.close()
        except (AttributeError, ValueError):
            pass

    def __enter__(self) -> AgentBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- header --------------------------------------------------------------------------------
    def header(self) -> Header:
        v = dict(zip(_HEADER_FIELDS, _HEADER.unpack(self._map[: _HEADER.size])))
        argv = tuple(a.decode("utf-8", "surrogateescape") for a in v["cmdline"].rstrip(b"\0").split(b"\0") if a)
        return Header(
            version=v["version"], site_capacity=v["site_capacity"], record_capacity=v["record_capacity"],
            pid=v["pid"], ppid=v["ppid"], gen=v["gen"], state=v["state"], flags=v["flags"],
            sites_used=v["sites_used"], start_ns=v["start_ns"], armed_ns=v["armed_ns"], end_ns=v["end_ns"],
            total=v["total"], ignored=v["ignored"], head=v["head"], skipped_calls=v["skipped_calls"],
            emulated=v["emulated"], stepped=v["stepped"], maps_len=v["maps_len"],
            exit_status=None if v["exit_status"] < 0 else v["exit_status"], dropped_sites=v["dropped_sites"],
            threads=v["threads"], unarmed_threads=v["unarmed_threads"], exe=_cstr(v["exe"]), argv=argv,
            note=_cstr(v["note"]), blind=Blind(*_BLIND.unpack_from(self._map, _BLIND_AT)),
        )

    def progress(self) -> tuple[int, int]:
        """(faults in scope, faults out of scope) so far: two reads, and the patch table's
        counters when the agent patched sites."""
        total, ignored = struct.unpack_from("<QQ", self._map, 120)
        if len(self._map) >= 2256 + _PATCH_HEADER.size and struct.unpack_from("<I", self._map, 2272)[0]:
            for p in self.patches():
                if p.state == PATCH_ACTIVE:
                    if p.in_scope:
                        total += p.count
                    else:
                        ignored += p.count
        return total, ignored

    def steps(self) -> list[tuple[int, int]]:
        """(tid, PC) of each thread the agent single-steps now: TF set by its handler at a fault
        at PC, the step's SIGTRAP not yet taken (ualdbg_agent.h, step_tids)."""
        if len(self._map) < _STEPS_AT + _STEPS.size:
            return []
        raw = _STEPS.unpack_from(self._map, _STEPS_AT)
        return [(tid, pc) for tid, pc in zip(raw[:STEP_SLOTS], raw[STEP_SLOTS:]) if tid and tid != 0xFFFFFFFF]

    # -- patches -------------------------------------------------------------------------------
    def code_maps(self) -> tuple[int, int, int]:
        """The patcher's code maps in this image (ualdbg_agent.h, codemaps_built): (built by a
        sweep of a module, read from the run's folder, read from an earlier run's)."""
        if len(self._map) < _CODEMAPS_AT + _CODEMAPS.size:
            return (0, 0, 0)
        built, read, kept = _CODEMAPS.unpack_from(self._map, _CODEMAPS_AT)
        return built, read, kept

    def patch_after(self) -> int:
        """Traps at a site before the agent patches it (0: it does not)."""
        if len(self._map) < 2256 + _PATCH_HEADER.size:
            return 0
        offset, _cap, _size, _used, after = _PATCH_HEADER.unpack_from(self._map, 2256)
        return after if offset else 0

    def patches(self) -> list[PatchEntry]:
        """The patch table: patched sites and the ones refused, in the order decided."""
        offset, cap, size, used, _after = _PATCH_HEADER.unpack_from(self._map, 2256)
        if not offset or size not in PATCH_SIZES:
            return []
        out = []
        for i in range(min(used, cap)):
            pc, count, traps, state, reason, length, mask, _ns, tramp, flags, _res = _PATCH.unpack_from(self._map, offset + i * size)
            if pc == 0 or state not in (PATCH_ACTIVE, PATCH_REFUSED):
                continue
            why = PATCH_REASONS.get(reason, f"reason {reason}") if state == PATCH_REFUSED else None
            line, page = _PATCH_CLASSES.unpack_from(self._map, offset + i * size + _PATCH.size) if size > _PATCH.size else (0, 0)
            out.append(PatchEntry(pc, count, traps, state, why, length, mask, bool(flags & SITE_IN_SCOPE), line, page,
                                  tramp if state == PATCH_ACTIVE else 0))
        return out

    # -- sites ---------------------------------------------------------------------------------
    def sites(self) -> Iterator[SiteEntry]:
        """Every PC the agent trapped at, with its exact count (out-of-scope ones included): a
        patched site's count adds what its trampoline counted to its traps."""
        base, cap, size = self._layout["sites_offset"], self._layout["site_capacity"], self._layout["site_size"]
        patched: dict[int, int] = {}
        splits: dict[int, tuple[int, int]] = {}
        for p in self.patches():
            if p.state == PATCH_ACTIVE:
                patched[p.pc] = patched.get(p.pc, 0) + p.count
                lines, pages = splits.get(p.pc, (0, 0))
                splits[p.pc] = (lines + p.line_splits, pages + p.page_splits)
        raw = self._site_slots(base, cap, size)
        for off in range(0, len(raw), size):
            pc, count, state, flags, nvar, insn_len, insn, _tramp, _cr, _co, _ro = _SITE.unpack_from(raw, off)
            if pc == 0 or state != SITE_READY or flags & SITE_SHADOW:
                continue
            extra = patched.get(pc, 0)
            count += extra
            if count == 0:
                continue  # a patched site a fork child inherited, never run there
            variants = []
            for k in range(min(nvar, VARIANTS)):
                voff = off + 64 + k * 144
                (key,) = struct.unpack_from("<Q", raw, voff)
                if key == 0:  # claimed, not yet written
                    continue
                values = _REGS.unpack_from(raw, voff + 8)
                variants.append(Registers(values[:16], values[16]))
            line_splits: int | None = None
            page_splits = unclassed = 0
            if size > OLD_SITE_SIZE:
                line_splits, page_splits, unclassed = _SITE_CLASSES.unpack_from(raw, off + OLD_SITE_SIZE)
                more = splits.get(pc, (0, 0))
                line_splits, page_splits = line_splits + more[0], page_splits + more[1]
            yield SiteEntry(pc, count, flags, bytes(insn), insn_len, tuple(variants), extra, line_splits, page_splits,
                            unclassed)

    def _site_slots(self, base: int, cap: int, size: int = SITE_SIZE) -> bytes:
        """The site slots the agent wrote, one after the other (whole slots; unused ones among them).
        The table is a hash of 16,384 slots (10 MiB) of which a process uses a few: the pages it
        never touched are holes of the file (SEEK_DATA skips them), and reading those through
        the mapping would make tmpfs allocate every one (issue 34: 16 ms per traced process)."""
        end = base + cap * size
        runs: list[tuple[int, int]] = []  # [first slot, last slot + 1)
        for lo, hi in _data_extents(self.path, base, end):
            first, last = (lo - base) // size, min(cap, (hi - base + size - 1) // size)
            if runs and first <= runs[-1][1]:
                runs[-1] = (runs[-1][0], max(runs[-1][1], last))
            else:
                runs.append((first, last))
        return self._read([(base + first * size, (last - first) * size) for first, last in runs]) if runs else b""

    # -- records -------------------------------------------------------------------------------
    def records(self) -> list[RecordEntry]:
        """The ring's records in sequence order (the last record_capacity in-scope faults)."""
        head = struct.unpack_from("<Q", self._map, 136)[0]
        cap = self._layout["record_capacity"]
        base = self._layout["records_offset"]
        out: list[RecordEntry] = []
        for seq in range(max(1, head - cap + 1), head + 1):
            off = base + ((seq - 1) % cap) * RECORD_SIZE
            values = _RECORD.unpack_from(self._map, off)
            if values[0] != seq:
                continue
            _seq, time_ns, pc, pid, tid, cpu, flags = values[:7]
            out.append(RecordEntry(seq, time_ns, pc, pid, tid, None if cpu < 0 else cpu, flags,
                                   Registers(values[7:23], values[23])))
        return out

    def record_bytes(self) -> bytes:
        """The same records as records(), raw: RECORD_SIZE bytes each as the agent wrote them, in
        sequence order (ualdbg/engines/records.py reads them as columns)."""
        head = struct.unpack_from("<Q", self._map, 136)[0]
        cap = self._layout["record_capacity"]
        base = self._layout["records_offset"]
        first = max(1, head - cap + 1)
        if head < first:
            return b""
        lo, hi = (first - 1) % cap, (head - 1) % cap  # the slots of the first and the last record
        # (offset, length) of the records in sequence order: one piece, or two when the ring wrapped
        pieces = ([(base + lo * RECORD_SIZE, (hi + 1 - lo) * RECORD_SIZE)] if lo <= hi else
                  [(base + lo * RECORD_SIZE, (cap - lo) * RECORD_SIZE), (base, (hi + 1) * RECORD_SIZE)])
        raw = self._read(pieces)
        seqs = memoryview(raw).cast("Q")[:: RECORD_SIZE // 8]
        if seqs == array.array("Q", range(first, head + 1)):  # compared in C: no int object per record
            return raw
        return b"".join(raw[i * RECORD_SIZE:(i + 1) * RECORD_SIZE] for i, seq in enumerate(seqs) if seq == first + i)

    def _read(self, pieces: list[tuple[int, int]]) -> bytes:
        """These byte ranges of the file, joined: read with pread (a third of the time of
        touching the same pages through the mapping), from the mapping if the file is gone."""
        try:
            fd = _open_buffer(self.path)
        except (OSError, BufferError):
            fd = -1
        try:
            if fd >= 0 and (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == self._id:
                got = [os.pread(fd, length, off) for off, length in pieces]
                if all(len(g) == length for g, (_off, length) in zip(got, pieces)):
                    return got[0] if len(got) == 1 else b"".join(got)
        except OSError:
            pass
        finally:
            if fd >= 0:
                os.close(fd)
        return b"".join(self._map[off: off + length] for off, length in pieces)

    # -- maps ----------------------------------------------------------------------------------
    def maps_snapshots(self) -> list[tuple[int, str]]:
        """(CLOCK_MONOTONIC ns, /proc/PID/maps text) for each snapshot, oldest first."""
        used = struct.unpack_from("<Q", self._map, 168)[0]
        start = self._layout["maps_offset"]
        text = self._map[start : start + min(used, self._layout["maps_capacity"])].decode("utf-8", "surrogateescape")
        out: list[tuple[int, str]] = []
        for chunk in text.split("#snapshot ")[1:]:
            stamp, _, body = chunk.partition("\n")
            try:
                out.append((int(stamp), body))
            except ValueError:
                continue
        return out


class OpenBuffers:
    """The buffers of a run that is still going, each opened once and kept open between reads
    (the live display, `watch`): one being created, not readable yet, is skipped until the next."""

    def __init__(self) -> None:
        self._open: dict[str, AgentBuffer] = {}

    def each(self, directory: str) -> Iterator[AgentBuffer]:
        for _pid, _gen, path in buffer_files(directory):
            buf = self._open.get(path)
            if buf is None:
                try:
                    buf = self._open[path] = AgentBuffer(path)
                except BufferError:
                    continue
            yield buf

    def close(self) -> None:
        for buf in self._open.values():
            buf.close()
        self._open.clear()


def buffer_files(directory: str) -> list[tuple[int, int, str]]:
    """(pid, gen, path) of every buffer in a run's directory, in pid then image order."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        m = _FILE_NAME.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), os.path.join(directory, name)))
    return sorted(out)


def _data_extents(path: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """The byte ranges of [lo, hi) of the file that hold data, by lseek(SEEK_DATA/SEEK_HOLE);
    all of [lo, hi) when the file or the filesystem cannot tell (a file removed since: the
    mapping is read instead, whole)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return [(lo, hi)]
    out: list[tuple[int, int]] = []
    try:
        pos = lo
        while pos < hi:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data from pos to the end of the file
                    break
                return [(lo, hi)]
            if start >= hi:
                break
            stop = min(hi, os.lseek(fd, start, os.SEEK_HOLE))
            out.append((start, stop))
            pos = stop
    except OSError:
        return [(lo, hi)]
    finally:
        os.close(fd)
    return out
