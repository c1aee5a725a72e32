"""Where the step engine (step.py) works in one process: its scope resolved to address ranges
there (the program's own functions first), the current function for `--until-return`, the
address of each instruction of a range (a CPU without a trap flag gets a breakpoint on each), and
the return addresses of the calls that leave the scope. Computed once, when the engine arms."""
from __future__ import annotations

from collections.abc import Callable

from ..core.model import Module
from ..core.target import Target
from ..isa import arch as archmod
from ..isa.decode import InsnDecoder
from ..lazyclass import dataclass
from ..symbols.demangle import frame_name
from ..symbols.elfindex import elf_index
from ..symbols.maps import ModuleMap
from .image import ProcessImage
from .scope import ScopeError, StepScope, resolve_scope


@dataclass(frozen=True)
class ScopeRequest:
    """What the user typed: resolved to runtime ranges once the process exists."""

    functions: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()
    everywhere: bool = False
    until_return: bool = False

    def describe(self) -> str:
        if self.everywhere:
            return "everywhere"
        return ", ".join(self.functions + self.ranges) or "?"


def scope_in(target: Target, image: ProcessImage, arch: archmod.ArchInfo, request: ScopeRequest,
             tid: int | None) -> StepScope:
    """What `request` names in this process (ScopeError: one line for the user)."""
    if archmod.trap_flags(arch.name) is None and (request.until_return or request.everywhere):
        raise ScopeError(f"on {arch.name} the step engine puts a breakpoint on each instruction of the scope: "
                         "give it --in FUNC or --range LO,HI (not --until-return or --everywhere)")
    if request.until_return:
        return current_function(target, image, arch, tid)
    mm = image.module_map(target)
    if mm is None and (request.functions or request.everywhere):
        raise ScopeError("cannot read the process's memory map (/proc/PID/maps)")
    return resolve_in(mm, request.functions, request.ranges, request.everywhere)


def resolve_in(mm: ModuleMap | None, functions: tuple[str, ...], ranges: tuple[str, ...], everywhere: bool) -> StepScope:
    """The program's own functions first: looking a name up in a library that lacks it walks
    all of that library's DWARF (libc's takes a minute), so libraries only for names the
    program does not define."""
    if mm is None:
        return resolve_scope([], range_text=ranges)
    if functions and mm.main is not None:
        try:
            return resolve_scope([mm.main], functions=functions, range_text=ranges)
        except ScopeError:
            pass
    return resolve_scope(mm, functions=functions, range_text=ranges, everywhere=everywhere)


def check_in_file(program: str | None, functions: tuple[str, ...], ranges: tuple[str, ...]) -> None:
    """Before `run`: the functions must exist in the program file (libraries load later: stop
    first, e.g. at main, to name a library's function). Raises ScopeError."""
    if functions and program:
        resolve_scope([Module(program, 0, 0, 0)], functions=functions, range_text=ranges)
    elif ranges:
        resolve_scope([], range_text=ranges)


def current_function(target: Target, image: ProcessImage, arch: archmod.ArchInfo, tid: int | None) -> StepScope:
    """`--until-return`: the function the thread is in, from the symbol table."""
    t = tid if tid is not None else target.current_tid()
    pc = target.read_register(arch.pc, t)
    module, _ = image.module_of(target, pc)
    index = elf_index(module.path) if module is not None else None
    sym = index.symbol_at(pc - module.base) if (index is not None and module is not None) else None
    if sym is None or module is None:
        raise ScopeError(f"--until-return: no function symbol covers the PC {pc:#x}")
    lo = sym.start + module.base
    return StepScope("until-return", frame_name(sym.name, symbol=True), ((lo, lo + max(sym.size, 1)),))


def every_instruction(target: Target, image: ProcessImage, decoder: InsnDecoder, arch: archmod.ArchInfo,
                      scope: StepScope) -> list[int]:
    """Where the step engine of a CPU without a trap flag puts its breakpoints: the address of
    each instruction of the scope (fixed-size instructions; RISC-V's 2- and 4-byte ones and
    32-bit ARM's two instruction sets decoded linearly)."""
    step = arch.insn_size or 4
    out: list[int] = []
    for lo, hi in scope.ranges:
        if arch.insn_size is None:
            out += instruction_starts(target, image, decoder, arch, lo, hi)
        else:
            out += range(lo - lo % step + (step if lo % step else 0), hi, step)
    return out


def instruction_starts(target: Target, image: ProcessImage, decoder: InsnDecoder, arch: archmod.ArchInfo,
                       lo: int, hi: int) -> list[int]:
    """The instruction addresses of [lo, hi), decoded linearly from lo (a function's entry)."""
    code = target.read_memory(lo, hi - lo)
    mode_at = _arm_modes(target, image, arch, lo)
    out, off = [], 0
    while off < len(code):
        mode = mode_at(lo + off) if mode_at is not None else ""
        if mode == "data":  # an ARM literal pool: no instruction, no breakpoint
            off += 2
            continue
        out.append(lo + off)
        insn = decoder.decode(code[off:off + 4], lo + off, mode)
        off += insn.size if insn is not None and insn.size > 0 else 2
        if insn is not None and mode == "thumb" and insn.name.startswith("it") and len(insn.raw) == 2:
            # No breakpoint inside an IT block (gdb would move it to the IT, a second stop
            # there): the IT's check covers the block (StepEngine._check_it_block).
            for _ in range(4 - ((insn.raw[0] & 0xF) & -(insn.raw[0] & 0xF)).bit_length() + 1):
                nxt = decoder.decode(code[off:off + 4], lo + off, mode)
                off += nxt.size if nxt is not None and nxt.size > 0 else 2
    return out


def _arm_modes(target: Target, image: ProcessImage, arch: archmod.ArchInfo, addr: int) -> Callable[[int], str] | None:
    """32-bit ARM: the instruction set at each address of the module holding `addr`, from
    its mapping symbols or its function symbols' bit 0 (elfindex.arm_modes); where no
    symbol says, what Debian's gcc emits by default (Thumb-2 on armhf, ARM on armel). A
    breakpoint hit decodes by the CPSR's T bit all the same (FaultRules.insn_at)."""
    if not arch.modes:
        return None
    default = arch.default_mode
    module, _ = image.module_of(target, addr)
    index = elf_index(module.path) if module is not None else None
    if index is None or module is None:
        return lambda pc: default
    base = module.base
    return lambda pc: index.arm_mode_at(pc - base) or default


def call_returns(target: Target, decoder: InsnDecoder, scope: StepScope, contains: Callable[[int], bool]) -> set[int]:
    """The return addresses of the calls in the scope's ranges (decoded once, linearly)."""
    out: set[int] = set()
    for lo, hi in scope.ranges:
        code = target.read_memory(lo, hi - lo)
        off = 0
        while off < len(code):
            insn = decoder.decode(code[off:off + decoder.max_insn_len], lo + off)
            if insn is None or insn.size <= 0:
                off += 1
                continue
            if insn.flow == "call" and contains(insn.next_pc):
                out.add(insn.next_pc)
            off += insn.size
    return out
