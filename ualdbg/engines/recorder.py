"""The fault sink of the debuggers' engines: settings, scope, the shared trace buffer, and the
path from a stopped thread to a recorded fault (decode -> policy -> scope -> buffer). It knows no
engine: session.py puts the trap and step engines on top of it, and each holds one of these. The
agent and the native stepper, which count in their own C code, use its parts (Scope,
InstructionCache, breaking_access) and make a TraceResult (core/result.py) without one."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum

from .. import __version__
from ..core.model import Access, Fault, Module, SourceLoc
from ..core.result import ProgramInfo
from ..core.settings import Config
from ..core.target import MemoryReader, SigInfo, Target
from ..core.trace import TraceBuffer
from ..isa import arch as archmod
from ..isa.alignment import AcPolicy, Policy
from ..isa.decode import DECODABLE, Insn, InsnDecoder, accesses, decoder_for
from ..symbols.data import DataRef, Frame, safe_describe
from ..symbols.maps import ModuleMap
from ..symbols.resolver import Symbolizer
from .modulescope import Scope
from .procfs import CpuReader


class LazyRegisters(Mapping[str, int]):
    """Registers of one stopped thread, read from the target only when the decoder asks."""

    def __init__(self, target: Target, tid: int | None) -> None:
        self.target, self.tid, self.cache = target, tid, {}  # type: ignore[var-annotated]

    def __getitem__(self, name: str) -> int:
        if name not in self.cache:
            try:
                self.cache[name] = self.target.read_register(name, self.tid)
            except Exception as exc:  # an unknown register name is a decode gap, not a crash
                raise KeyError(name) from exc
        return self.cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cache)

    def __len__(self) -> int:
        return len(self.cache)


class ThreadStacks(Mapping[int, int]):
    """Stack pointers of the target's threads, read only if a VA's mapping needs them."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._sps: dict[int, int] | None = None

    def _all(self) -> dict[int, int]:
        if self._sps is None:
            self._sps = {}
            try:
                for tid in self.target.threads():
                    try:
                        self._sps[tid] = self.target.read_register("rsp", tid)
                    except Exception:  # a thread that cannot be read is not the answer
                        continue
            except Exception:
                pass
        return self._sps

    def __getitem__(self, tid: int) -> int:
        return self._all()[tid]

    def __iter__(self) -> Iterator[int]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class InstructionCache:
    """Instructions decoded once per PC: from a live target, or from the code an engine saved of
    a process that is gone (the agent)."""

    def __init__(self) -> None:
        self.decoder = decoder_for()
        self._insns: dict[int, Insn | None] = {}

    def at(self, code: MemoryReader, pc: int, arch: str | None = None, mode: str = "") -> Insn | None:
        """The instruction at `pc` in `code`, decoded once per PC: in `arch`, else the
        instruction set decoded last; again if its `mode` (32-bit ARM's Thumb or ARM) changed."""
        cached = self._insns.get(pc)
        if pc not in self._insns or (mode and cached is not None and cached.mode != mode):
            name = arch or self.decoder.arch
            if name != self.decoder.arch and name in DECODABLE:
                self.decoder = decoder_for(name)  # the target's instruction set (arm64 for the step engine)
            try:
                raw = code.read_memory(pc, self.decoder.max_insn_len)
            except Exception:
                raw = b""
            self._insns[pc] = self.decoder.decode(raw, pc, mode) if raw else None
        return self._insns[pc]

    def clear(self) -> None:
        self._insns.clear()


def breaking_access(insn: Insn, regs: Mapping[str, int], policy: Policy) -> tuple[Access | None, bool | None]:
    """The access of `insn` (its operands evaluated over `regs`) that breaks `policy`, else its
    first access; and whether one breaks it (None: a register the decoder needs is unknown)."""
    try:
        found = accesses(insn, regs)
    except KeyError:
        return None, None
    for acc in found:
        if policy.violates(acc, insn):
            return acc, True
    return (found[0] if found else None), False


class Decision(Enum):
    """An engine's verdict at a stop, which the adapter carries out."""

    STOP = "stop"  # an unaligned access the user asked to stop at
    RESUME = "resume"  # ours and handled: resume without delivering the signal
    NOT_OURS = "not-ours"  # behave exactly as the debugger would without ualdbg
    # Performed, but the thread must take one single step (through a `nop`) before it resumes
    # at the PC the engine keeps: a fault in SH's delay slot under qemu (engines/fixup.py).
    STEP_THEN_RESUME = "step-then-resume"


class FaultRecorder:
    """Settings, scope, buffer and caches of one debugger session, and its fault path; the
    engines that feed it are session.py's."""

    def __init__(self, debugger: str) -> None:
        self.debugger = debugger
        self.version = __version__
        self.config = Config()
        self.scope = Scope()
        self.buffer = TraceBuffer(self.config["buffer"])
        self.policy: Policy = AcPolicy()
        self.code = InstructionCache()
        self.breaking = False
        self.tracing = False
        self.at = "main"
        self.program = ProgramInfo()
        self.last_fault: Fault | None = None
        self.last_loc: SourceLoc | None = None
        self._modmap: ModuleMap | None = None
        self._modmap_pid: int | None = None
        self._pc_scope: dict[int, tuple[Module | None, bool]] = {}
        self.symbolizer: Symbolizer | None = None
        self.locs: dict[int, SourceLoc] = {}
        self.cpu_of = CpuReader()
        # What the data at a site's first faulting VA is (symbols/data.py), and at the last fault.
        self.data_at: dict[int, DataRef] = {}
        self.last_data: DataRef | None = None

    @property
    def armed(self) -> bool:
        return self.breaking or self.tracing

    def arch_of(self, target: Target) -> archmod.ArchInfo:
        """The target's architecture (session.py: as the trap engine learnt it)."""
        return archmod.arch_info(target.arch())

    def fixup_reported(self) -> dict[int, int] | None:
        """The fix-up engine's faults already recorded by the step engine (FixupEngine.reported),
        where a signal engine fixes faults up (session.py)."""
        return None

    # -- per-PC caches -------------------------------------------------------------------------
    def insn_at(self, target: Target, pc: int, tid: int | None = None) -> Insn | None:
        """The instruction at `pc`, decoded once. 32-bit ARM: in the instruction set the CPSR's
        T bit says (of `tid`, else the current thread), decoded again if it changed."""
        a = self.arch_of(target)
        mode = a.mode(target.read_register(a.mode_reg, tid)) if a.mode_reg is not None else ""
        return self.code_at(target, pc, a.name, mode)

    def code_at(self, code: MemoryReader, pc: int, arch: str | None = None, mode: str = "") -> Insn | None:
        """The instruction at `pc` in `code` (a Target), decoded once per PC (InstructionCache.at)."""
        return self.code.at(code, pc, arch, mode)

    @property
    def decoder(self) -> InsnDecoder:
        """The decoder of the instruction set decoded last (the step engine's, when it sets one)."""
        return self.code.decoder

    @decoder.setter
    def decoder(self, decoder: InsnDecoder) -> None:
        self.code.decoder = decoder

    def module_map(self, target: Target) -> ModuleMap | None:
        pid = target.pid()
        if self._modmap is None or pid != self._modmap_pid:
            text = target.maps_text()
            if text is None:
                return None

            def reader() -> str:
                fresh = target.maps_text()
                if fresh is None:
                    raise OSError("the process is gone")
                return fresh

            self._modmap = ModuleMap.from_text(text, reader=reader)
            self._modmap_pid = pid
            self.symbolizer = Symbolizer(self._modmap)
        return self._modmap

    def module_of(self, target: Target, pc: int) -> tuple[Module | None, bool]:
        """(module, is_system) for a PC, cached; the map re-reads itself on a miss (dlopen)."""
        hit = self._pc_scope.get(pc)
        if hit is None:
            mm = self.module_map(target)
            module = mm.find(pc) if mm is not None else None
            hit = (module, mm.is_system(module) if (mm is not None and module is not None) else False)
            self._pc_scope[pc] = hit
        return hit

    def resolve(self, pc: int) -> SourceLoc:
        loc = self.locs.get(pc)
        if loc is None:
            loc = self.symbolizer.resolve(pc) if self.symbolizer else SourceLoc(pc=pc)
            self.locs[pc] = loc
        return loc

    def new_process(self) -> None:
        """A run, an attach or an exec: addresses mean something new."""
        self.code.clear()
        self._pc_scope.clear()
        self._modmap = None
        self.cpu_of.close()

    # -- the fault path ------------------------------------------------------------------------
    def analyse(self, target: Target, tid: int | None, pc: int) -> tuple[Insn | None, Access | None, bool | None]:
        """Decode the instruction at PC and pick the access that breaks the policy.
        Returns (insn, access, explained): explained is None when the decoder cannot tell."""
        insn = self.insn_at(target, pc, tid)
        if insn is None:
            return None, None, None
        acc, explained = breaking_access(insn, LazyRegisters(target, tid), self.policy)
        return insn, acc, explained

    def record_fault(self, target: Target, tid: int, info: SigInfo,
                     decoded: tuple[Insn | None, Access | None, bool | None] | None = None,
                     pc: int | None = None) -> bool:
        """Record one trapped access; True when the user asked to stop at it. `decoded`: what
        an engine with its own decoder found (engines/fixup.py: SPARC, Alpha), instead of
        analyse()'s x86 decode. `pc`: the instruction's, when it is not the thread's PC (the
        step engine checks a Thumb IT block at its IT instruction)."""
        if pc is None:
            pc = target.read_register(self.arch_of(target).pc, tid)
        module, system = self.module_of(target, pc)
        if not self.scope.includes(module, system):
            self.buffer.ignore(module.name if module else None)
            return False
        insn, acc, explained = self.analyse(target, tid, pc) if decoded is None else decoded
        pid = target.pid() or 0
        va = acc.va if acc is not None else (info.addr or None)
        fault = Fault(
            seq=self.buffer.next_seq(),
            time=self.buffer.now(),
            pid=pid,
            tid=tid,
            cpu=self.cpu_of(pid, tid) if pid else None,
            pc=pc,
            va=va,
            size=acc.size if acc is not None else None,
            access=acc.kind if acc is not None else None,
            insn=insn.text if insn is not None else None,
            policy=self.policy.name,
            explained=explained,
        )
        self.buffer.add(fault)
        if pc not in self.locs:
            self.resolve(pc)
        self.last_fault = fault
        self.last_data = None
        if va is not None and (self.breaking or pc not in self.data_at):
            data = self.describe_data(target, tid, pc, va)
            self.data_at.setdefault(pc, data)
            self.last_data = data
        return self.breaking

    def describe_data(self, target: Target, tid: int, pc: int, va: int) -> DataRef:
        """What the data at `va` is, with the faulting thread's registers and memory."""
        frame = Frame(pc=pc, tid=tid, pid=target.pid(), regs=LazyRegisters(target, tid),
                      read_memory=target.read_memory, thread_sps=ThreadStacks(target))
        return safe_describe(va, self.module_map(target), frame)
