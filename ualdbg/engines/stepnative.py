"""The step engine of the CLI: runs the program under the native stepper (ualdbg/stepper), after
decoding the scope once with capstone into a table of operand recipes per PC and one bitmap per
operand class of the addresses (mod 4096) the policy rejects, so the C loop never decodes and
never re-implements a policy. The records come back into the same TraceBuffer, TraceResult and
JSON document as the other engines'."""
from __future__ import annotations

import os
import select
import struct
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

from .. import __version__
from ..agent import rundir
from ..ci.gate import EXIT_ERROR, EXIT_TOOL
from ..core.cost import cost_class, split_counts
from ..core.model import Access, AccessKind, Fault
from ..core.result import ProgramInfo, TraceResult, sites_of
from ..core.sections import NativeStep, SteppedScope
from ..core.trace import TraceBuffer
from ..isa.alignment import Policy, policy_by_name
from ..isa.arch.x86_64 import register_slice
from ..isa.costclass import is_locked, is_vector
from ..isa.decode import Insn, MemOperand, decoder_for
from ..lazyclass import dataclass
from ..stepper.build import BuildError, build
from ..symbols.maps import ModuleMap
from ..symbols.resolver import Symbolizer
from .modulescope import Scope
from .scope import ScopeError, StepScope, function_ranges, parse_range, resolve_scope
from .wrapper import SignalGuard, program_environ

NAME = "step"

# The order of struct user_regs_struct (sys/user.h): the C side indexes the saved registers.
_USER_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
              "fs_base gs_base ds es fs gs").split()
REG_INDEX = {name: i for i, name in enumerate(_USER_REGS)}

EVT_EXEC, EVT_ARMED, EVT_DECODE, EVT_DONE, EVT_EXIT_EARLY = 1, 2, 3, 4, 5
CMD_ARM, CMD_TABLE, CMD_RECIPE, CMD_KILL = 1, 2, 3, 4
_FLOW = {"next": 0, "jump": 1, "call": 2, "ret": 3, "cond": 4, "other": 5}
RF_REP, RF_REP_ADDR4, RF_UNMODELLED, RF_RETSITE, RF_DISPLACE, RF_DISPLACE_KNOWN = 1, 2, 4, 8, 16, 32
MAX_OPS = 8
NO_CHECK = 0xFFFF
_KIND = {AccessKind.READ: 0, AccessKind.WRITE: 1, AccessKind.READ_WRITE: 2}
_KIND_BACK = {v: k for k, v in _KIND.items()}
_SEG = {None: 0, "fs": 1, "gs": 2}

_OP = struct.Struct("<qbBBbBBBBBBbBBBHHHI")
_RECIPE_HEAD = struct.Struct("<QBBBBI")
_HEADER = struct.Struct("<16Q256s")
_SITE = struct.Struct("<QQI4HQQ")  # pc, count, kinds, sizes, line splits, page splits
_RECORD = struct.Struct("<QQQQIIHBBI")
_MAGIC = 0x31706574736C6175
assert _OP.size == 32 and _SITE.size == 44 and _RECORD.size == 48


class StepUnavailable(Exception):
    """The step engine cannot run here or for this input: one line for the user."""


class StepBadInput(StepUnavailable):
    """The scope names what the program does not have (the program is killed at its arming
    point, before its own code runs): bad input, status 2."""


class StepNothing(StepUnavailable):
    """The program ran but nothing was stepped: one line, how the program ended, and the status
    when it did not fail (ci/gate.py: 2 for a scope it never entered, 125 when it ended before
    the arming point)."""

    def __init__(self, message: str, exit_status: int | None, exit_signal: int | None, status: int) -> None:
        super().__init__(message)
        self.exit_status, self.exit_signal, self.status = exit_status, exit_signal, status


@dataclass
class StepRun:
    """What to run, where to step and what to check (the CLI's RunRequest, as the stepper sees it)."""

    program: list[str]
    functions: list[str] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)
    everywhere: bool = False
    policy: str = "ac"
    at: str = "main"
    all_modules: bool = False
    modules: list[str] = field(default_factory=list)
    buffer: int = 100_000
    aslr: bool = False
    argv0: str | None = None  # the program's argv[0] as typed; program[0] is its path
    grace: float = 10.0  # engines/wrapper.SignalGuard


@dataclass
class StepResult:
    result: TraceResult
    exit_status: int | None
    exit_signal: int | None
    stats: dict[str, int]


def validate(run: StepRun) -> None:
    """Bad input that needs no running program: one line, before anything starts."""
    if run.everywhere and (run.functions or run.ranges):
        raise StepUnavailable("--everywhere steps every instruction: do not combine it with --in or --range")
    if not (run.everywhere or run.functions or run.ranges):
        raise StepUnavailable("--engine step needs a scope: --in FUNCTION, --range LO,HI or --everywhere")
    try:
        for text in run.ranges:
            parse_range(text)
        policy_by_name(run.policy)
    except (ScopeError, ValueError) as exc:
        raise StepUnavailable(str(exc)) from None
    if any(not f.strip() for f in run.functions):
        raise StepUnavailable("--in: empty function name")


# --------------------------------------------------------------------------------------------
# The table the C loop reads


class Encoder:
    """Insn -> wire recipe, with the policy's verdict per operand class as a 4096-bit map.
    Every policy's verdict depends only on the address modulo 4096 (alignments up to 64,
    cache lines of 64, pages of 4096), so the bitmap is exact."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.classes: dict[tuple[int, bool, bool, int], int] = {}
        self.bitmaps: list[bytes] = []
        self.sent = 0  # bitmaps the stepper has: each message carries the ones it lacks

    def unsent(self) -> bytes:
        """`u32 count` + the bitmaps made since the last call, for the next message."""
        fresh = self.bitmaps[self.sent:]
        self.sent = len(self.bitmaps)
        return struct.pack("<I", len(fresh)) + b"".join(fresh)

    def check_class(self, insn: Insn, op: MemOperand) -> int:
        key = (op.size, insn.vsib, insn.masked, insn.gp_align)
        found = self.classes.get(key)
        if found is None:
            bits = bytearray(512)
            for low in range(4096):
                if self.policy.violates(Access(va=low, size=op.size, kind=op.kind), insn):
                    bits[low >> 3] |= 1 << (low & 7)
            found = NO_CHECK if not any(bits) else len(self.bitmaps)
            if found != NO_CHECK:
                self.bitmaps.append(bytes(bits))
            self.classes[key] = found
        return found

    def recipe(self, pc: int, insn: Insn | None, retsite: bool = False, breakpoint: bool = False) -> bytes:
        """`retsite`: a call in the scope returns here (the stepper trusts [rsp] to be a return
        address only when it names one of these). `breakpoint`: the stepper may put an int3 here
        (an entry, a return site), so it learns whether the instruction can be displaced."""
        if insn is None:
            return _RECIPE_HEAD.pack(pc, 0, _FLOW["other"], 0, RF_UNMODELLED, 0)
        flags = 0 if insn.exact and not insn.vsib else RF_UNMODELLED
        if retsite:
            flags |= RF_RETSITE
        if insn.rep:
            flags |= RF_REP
            if insn.operands and insn.operands[0].addr_size == 4:
                flags |= RF_REP_ADDR4
        ops = []
        for op in insn.operands:
            packed = self._op(insn, op)
            if packed is None:
                flags |= RF_UNMODELLED
            else:
                ops.append(packed)
        if len(ops) > MAX_OPS:
            ops, flags = ops[:MAX_OPS], flags | RF_UNMODELLED
        # worked out where the stepper will likely put an int3; elsewhere it asks (EVT_DECODE)
        # if it needs to (a signal handler's return point without debug registers)
        disp_off = None
        if breakpoint or retsite:
            flags |= RF_DISPLACE_KNOWN
            disp_off = displacement(insn)
        if disp_off is not None:
            flags |= RF_DISPLACE
        return (_RECIPE_HEAD.pack(pc, insn.size, _FLOW.get(insn.flow, 5), len(ops), flags, disp_off or 0)
                + b"".join(ops))

    def _op(self, insn: Insn, op: MemOperand) -> bytes | None:
        if op.vsib is not None:
            return None  # one access per lane from vector registers: not in the native loop
        disp = op.disp
        base, base_shift, base_bits = -1, 0, 64
        if op.base in ("rip", "eip"):
            disp += insn.next_pc
        elif op.base is not None:
            full, base_shift, base_bits = register_slice(op.base)
            base = REG_INDEX[full]
            if full == "rsp":
                disp += op.rsp_adjust
        index, index_shift, index_bits = -1, 0, 64
        if op.index is not None:
            full, index_shift, index_bits = register_slice(op.index)
            index = REG_INDEX[full]
        bit_reg, bit_bits, bit_shift = -1, 64, 0
        if op.bit_offset is not None:
            full, _, bit_bits = register_slice(op.bit_offset)
            bit_reg = REG_INDEX[full]
            bit_shift = (op.size * 8).bit_length() - 1
        disp = (disp + (1 << 63)) % (1 << 64) - (1 << 63)  # as the signed 64-bit C value
        return _OP.pack(disp, base, base_shift, base_bits, index, index_shift, index_bits, op.scale,
                        _SEG.get(op.segment, 0), int(op.addr_size == 4), _KIND[op.kind], bit_reg, bit_bits,
                        bit_shift, 0, min(op.size, 0xFFFF), self.check_class(insn, op), 0, 0)


_X86_64: Any = None


SHORT_BRANCH = 0x80  # with the offset of a jmp/jcc's rel8: the stepper widens it to rel32


def displacement(insn: Insn) -> int | None:
    """Whether the instruction runs the same from another address (the stepper's displaced step
    over its own int3, which also puts right the return address a call pushes): None when it
    cannot (a system call, an interrupt), else the offset of its 32-bit RIP-relative field (a
    memory operand's displacement or a branch's), for the stepper to re-aim, or 0 when it has
    none; a branch with an 8-bit displacement gives SHORT_BRANCH | its offset (the stepper
    copies a `jmp`/`jcc` rel8 as rel32 and lets `loop`/`jrcxz` fall back)."""
    global _X86_64
    if insn.arch != "x86_64" or insn.flow == "other" or not insn.raw:
        return None
    if _X86_64 is None:
        import capstone

        _X86_64 = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        _X86_64.detail = True
    from capstone import x86

    ci = next(_X86_64.disasm(insn.raw, insn.pc), None)
    if ci is None or ci.size != insn.size:
        return None
    if insn.target is not None:  # jmp/jcc/call/xbegin/loop/jrcxz rel32 or rel8
        if ci.imm_size == 1 and 0 < ci.imm_offset == insn.size - 1:
            return SHORT_BRANCH | int(ci.imm_offset)
        if ci.imm_size != 4 or not 0 < ci.imm_offset <= insn.size - 4:
            return None
        return int(ci.imm_offset)
    if insn.flow == "cond":  # loop, jrcxz: an 8-bit displacement without a decoded target
        return None
    if not any(op.type == x86.X86_OP_MEM and op.mem.base == x86.X86_REG_RIP for op in ci.operands):
        return 0
    if ci.disp_size != 4 or not 0 < ci.disp_offset <= insn.size - 4:
        return None
    return int(ci.disp_offset)


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", kind, len(payload)) + payload


# --------------------------------------------------------------------------------------------
# Running


def stepper_path() -> str:
    try:
        return str(build())
    except BuildError as exc:
        raise StepUnavailable(str(exc)) from None


def _read_exact(fd: int, n: int, guard: SignalGuard | None = None) -> bytes | None:
    """`n` bytes from the stepper, looking at the guard's deadline while none come (a signal
    handler does not end a blocking read: PEP 475 restarts it)."""
    out = b""
    while len(out) < n:
        if guard is not None:
            guard.expired()
            ready, _, _ = select.select([fd], [], [], guard.slice())
            if not ready:
                continue
        try:
            chunk = os.read(fd, n - len(out))
        except InterruptedError:
            continue
        if not chunk:
            return None
        out += chunk
    return out


class _Driver:
    """Answers the stepper's events: where to arm, the scope's table, decodes of PCs it lacks."""

    def __init__(self, run: StepRun, program: str) -> None:
        self.run = run
        self.program = program
        self.policy = policy_by_name(run.policy)
        self.encoder = Encoder(self.policy)
        self.decoder = decoder_for()
        self.insns: dict[int, Insn | None] = {}
        self.retsites: set[int] = set()
        self.modmap: ModuleMap | None = None
        self.scope: StepScope | None = None
        self.pid = 0
        self.error: str | None = None

    def arm_address(self, pid: int) -> int:
        """main, or the program's entry point (`--at start`, or no `main` symbol)."""
        self.pid = pid
        mm = ModuleMap.for_pid(pid)
        exe = mm.main
        if exe is None:
            return 0
        if self.run.at == "main":
            try:
                return min(lo for lo, _ in function_ranges(exe.path, "main", exe.base))
            except ScopeError:
                pass
        try:
            with open(exe.path, "rb") as f:
                (entry,) = struct.unpack_from("<Q", f.read(32), 24)  # ELF64 e_entry
        except (OSError, struct.error):
            return 0
        return int(entry) + exe.base

    def table(self) -> bytes:
        mm = self.modmap = ModuleMap.for_pid(self.pid)
        scope = self.scope = resolve_scope(mm, functions=self.run.functions, range_text=self.run.ranges,
                                           everywhere=self.run.everywhere)
        recipes: list[bytes] = []
        try:
            with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
                for lo, hi in scope.ranges:
                    recipes.extend(self._sweep(mem, lo, hi, set(scope.entries)))
        except OSError:
            pass  # each PC is then decoded when first stepped
        ranges = b"".join(struct.pack("<QQ", lo, hi) for lo, hi in scope.ranges)
        entries = b"".join(struct.pack("<Q", e) for e in scope.entries)
        # the recipes are encoded by now, so the bitmaps of their check classes all exist
        head = struct.pack("<4I", int(scope.kind == "everywhere"), len(scope.ranges), len(scope.entries),
                           len(recipes))
        return head + ranges + entries + self.encoder.unsent() + b"".join(recipes)

    def _sweep(self, mem: Any, lo: int, hi: int, entries: set[int]) -> Iterable[bytes]:
        """Linear sweep of [lo, hi): compilers put no data between a function's instructions."""
        try:
            mem.seek(lo)
            code = mem.read(hi - lo + self.decoder.max_insn_len)
        except (OSError, OverflowError, ValueError):
            return
        pc = lo
        found: list[tuple[int, Insn | None]] = []
        while pc < hi:
            insn = self.decoder.decode(code[pc - lo:], pc)
            self.insns[pc] = insn
            found.append((pc, insn))
            pc += insn.size if insn is not None else 1
        self.retsites.update(i.next_pc for _, i in found if i is not None and i.flow == "call")
        for pc, insn in found:
            yield self.encoder.recipe(pc, insn, pc in self.retsites, pc in entries)

    def decode(self, payload: bytes) -> bytes:
        (pc,) = struct.unpack_from("<Q", payload)
        code = payload[8:24]
        insn = self.decoder.decode(code, pc)
        self.insns[pc] = insn
        recipe = self.encoder.recipe(pc, insn, pc in self.retsites, breakpoint=True)
        return self.encoder.unsent() + recipe


def run_step(run: StepRun, on_progress: Callable[[int, int, float], None] | None = None) -> StepResult:
    """Run the program under the native stepper. Raises StepUnavailable (one line) for bad input:
    the stepper cannot be built, an unknown function (the program is killed at `main` before it
    runs its own code), a scope the program never entered."""
    validate(run)
    path = run.program[0]
    exe = stepper_path()
    driver = _Driver(run, path)
    cmd_r, cmd_w = os.pipe()
    evt_r, evt_w = os.pipe()
    with rundir.make() as run_dir:  # locked: a killed run's directory is reaped by the next (agent/rundir.py)
        tmp = run_dir.top
        out = os.path.join(tmp, "step.out")
        started = time.monotonic()
        # The stepper forks and execs the program with argv[0] as typed and the environment of a
        # direct run; it dies with ualdbg, the program with it (stepper.c).
        guard = SignalGuard(None, run.grace)  # before the program exists (engines/wrapper.py)
        try:
            proc = subprocess.Popen([exe, str(cmd_r), str(evt_w), out, str(run.buffer), str(int(not run.aslr)),
                                     str(os.getpid()), path, run.argv0 or path, *run.program[1:]],
                                    pass_fds=(cmd_r, evt_w), close_fds=True, env=program_environ())
        except OSError as exc:
            guard.restore()
            raise StepUnavailable(f"cannot start the stepper: {exc.strerror}") from None
        except BaseException:
            guard.restore()
            raise
        finally:
            os.close(cmd_r)
            os.close(evt_w)
        # Signals go to the program (once the stepper said which process it is), else the stepper.
        guard.start(proc, lambda: [driver.pid] if driver.pid else [proc.pid])
        try:
            _serve(driver, evt_r, cmd_w, guard)
        finally:
            os.close(evt_r)
            os.close(cmd_w)
            try:
                returncode = guard.wait()
            finally:
                guard.restore()
        ended = time.monotonic()
        if driver.error is not None:
            raise StepBadInput(driver.error)
        if returncode != 0 or not os.path.exists(out):
            raise StepUnavailable(f"the stepper failed (exit status {returncode})")
        with open(out, "rb") as f:
            data = f.read()
    result = _result(run, driver, data, started, ended, on_progress)
    if guard.received:
        result.result.interrupt(guard.received[0])
        result.result.note(f"interrupted by {guard.received[0]}: the trace is partial")
    return result


def _serve(driver: _Driver, evt_r: int, cmd_w: int, guard: SignalGuard | None = None) -> None:
    def send(kind: int, payload: bytes) -> None:
        try:
            os.write(cmd_w, _frame(kind, payload))
        except BrokenPipeError:
            pass  # the stepper is gone (killed after a signal): its exit status says how

    while True:
        head = _read_exact(evt_r, 8, guard)
        if head is None:
            return  # the stepper is gone (its exit status says how)
        kind, length = struct.unpack("<II", head)
        payload = _read_exact(evt_r, length, guard) if length else b""
        if payload is None:
            return
        if kind == EVT_EXEC:
            (pid,) = struct.unpack("<I", payload)
            send(CMD_ARM, struct.pack("<Q", driver.arm_address(pid)))
        elif kind == EVT_ARMED:
            try:
                table = driver.table()
            except ScopeError as exc:
                driver.error = str(exc)
                send(CMD_KILL, b"")
                continue
            send(CMD_TABLE, table)
        elif kind == EVT_DECODE:
            send(CMD_RECIPE, driver.decode(payload))
        elif kind in (EVT_DONE, EVT_EXIT_EARLY):
            return


# --------------------------------------------------------------------------------------------
# From the stepper's output to the TraceResult


def _result(run: StepRun, driver: _Driver, data: bytes, started: float, ended: float,
            on_progress: Callable[[int, int, float], None] | None) -> StepResult:
    head = _HEADER.unpack_from(data)
    (magic, total, steps, entries, unmodelled, misses, nsites, nrecs, status, signal_no, cpu, armed, detached, step_ns,
     displaced, stopped_all) = head[:16]
    if magic != _MAGIC:
        raise StepUnavailable("the stepper wrote no result")
    note = head[16].split(b"\0", 1)[0].decode(errors="replace")
    exit_status = None if status >= 1 << 63 else int(status)
    exit_signal = None if signal_no >= 1 << 63 else int(signal_no)
    offset = _HEADER.size
    sites = [_SITE.unpack_from(data, offset + i * _SITE.size) for i in range(nsites)]
    offset += nsites * _SITE.size
    records = [_RECORD.unpack_from(data, offset + i * _RECORD.size) for i in range(nrecs)]
    scope = driver.scope
    if scope is None:
        raise StepNothing(f"{os.path.basename(run.program[0])} ended before reaching {run.at}: nothing was stepped",
                          exit_status, exit_signal, EXIT_TOOL)
    if not entries:
        raise StepNothing(f"the program never entered the scope {scope.label}: nothing was stepped",
                          exit_status, exit_signal, EXIT_ERROR)

    user_scope = Scope(all_modules=run.all_modules, modules=tuple(run.modules))
    buf = TraceBuffer(run.buffer)
    buf.started_at = started
    buf.stopped_at = ended
    mm = driver.modmap
    assert mm is not None

    # An explicit function or range is the user's scope whatever module it is in; --everywhere
    # keeps ualdbg's module scope (the program and its non-system libraries, by default).
    def counted(pc: int) -> tuple[bool, str | None]:
        module = mm.find(pc, refresh=False)
        if scope.kind != "everywhere":
            return True, None
        if module is None:
            return user_scope.includes(None, False), None
        return user_scope.includes(module, mm.is_system(module)), module.name

    inside: dict[int, bool] = {}
    for pc, count, kinds, *sizes, line_splits, page_splits in sites:
        ok, name = counted(pc)
        inside[pc] = ok
        if not ok:
            buf.ignore(name, count)
            continue
        insn = driver.insns.get(pc)
        counter = buf.count_site(pc, count, insn.text if insn is not None else None)
        counter.sizes.update(s for s in sizes if s)
        counter.classes = split_counts(count, line_splits, page_splits, is_locked(insn))
        counter.vector = is_vector(insn)
        for bit, kind in _KIND_BACK.items():
            if kinds >> bit & 1:
                counter.access = kind if counter.access is None else counter.access.merge(kind)
    for seq, time_ns, pc, va, pid, tid, size, kind, rcpu, _ in records:
        if not inside.get(pc, False):
            continue
        insn = driver.insns.get(pc)
        buf.records.append(Fault(seq=seq, time=max(0.0, time_ns / 1e9 - started), pid=pid, tid=tid,
                                 cpu=None if rcpu == 255 else rcpu, pc=pc, va=va, size=size, access=_KIND_BACK[kind],
                                 insn=insn.text if insn is not None else None, policy=driver.policy.name,
                                 cost=cost_class(va, size, is_locked(insn)), vector=is_vector(insn)))
    program = ProgramInfo(path=run.program[0], args=list(run.program[1:]), pid=driver.pid,
                          exit_status=exit_status, exit_signal=exit_signal)
    result = TraceResult.of_buffer(
        buf, engine=NAME, debugger="none", arch=os.uname().machine, version=__version__, program=program,
        scope=f"{scope.describe()}; policy {driver.policy.name}", sites=sites_of(buf, Symbolizer(mm).resolve),
        recording=True)
    stats = {"instructions_stepped": steps, "scope_entries": entries, "unmodelled_executions": unmodelled,
             "decoded_on_demand": misses,
             # steps over the stepper's own int3s (entries past three, returns without debug
             # registers): run from a copy elsewhere, or with every other thread held stopped
             "int3_steps_displaced": displaced, "int3_steps_stopping_others": stopped_all}
    result.step = NativeStep(
        SteppedScope(scope.kind, scope.label, tuple(scope.ranges), len(scope.entries)), policy=driver.policy.name,
        armed_at=run.at, tracer_cpu=None if cpu >= 1 << 63 else int(cpu),
        # summed over threads: two threads stepping for one second are two seconds here
        seconds_in_scope=round(step_ns / 1e9, 6), **stats)
    notes = []
    if note:
        notes.append(note)
    if unmodelled:
        notes.append(f"{unmodelled} executions of instructions whose accesses the decoder does not fully model "
                     "(gathers, far transfers, xsave) were not all checked")
    result.notes = notes
    if on_progress is not None:
        on_progress(buf.total, buf.ignored, ended - started)
    return StepResult(result, exit_status, exit_signal, stats)
