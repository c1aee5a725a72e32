"""VA -> what it is: a global, static or COMMON variable (DWARF, else the symbol table) with the
element and byte offset inside it, a local or parameter of the faulting frame (its DWARF
location evaluated with the thread's registers), the stack of a thread, the heap, an anonymous
mapping or a mapped file; and the pointer in scope the access went through (`app->seq`).
Unknown stays unknown."""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import replace
from functools import cached_property, lru_cache
from typing import Any

from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry, LocationExpr, LocationParser

from ualdbg.core.dataref import DataRef, Via
from ualdbg.symbols.cfi import FrameRules
from ualdbg.symbols.dietree import DieTree
from ualdbg.symbols.dwarfindex import DWARF_ERRORS, DwarfIndex, Unit
from ualdbg.symbols.dwarfindex import children as die_children
from ualdbg.symbols.elfindex import ElfIndex, elf_index, symbol_entries
from ualdbg.symbols.globalvars import FixedAddressIndex, GlobalsNear, SectionFloor
from ualdbg.symbols.intervals import IntervalTable
from ualdbg.symbols.layout import (
    AGGREGATES,
    POINTERS,
    Evaluator,
    Layouts,
    Location,
    ParsedExprs,
    Unreadable,
    decl_pos,
    name_of,
    origin,
    ref,
    strip,
)
from ualdbg.symbols.loclists import parse_location
from ualdbg.symbols.maps import ModuleMap

from ..lazyclass import dataclass

_SCOPES = frozenset({"DW_TAG_lexical_block", "DW_TAG_inlined_subroutine", "DW_TAG_try_block", "DW_TAG_catch_block"})
_VARS = frozenset({"DW_TAG_variable", "DW_TAG_formal_parameter"})
_INNER_TAGS = _SCOPES | _VARS | {"DW_TAG_subprogram"}  # what ModuleData._inner keeps of a scope's children
_NEAR = 1 << 16
_STT_OBJECT, _STT_COMMON, _STB_GLOBAL, _STB_WEAK = 1, 5, 1, 2
_SHN_UNDEF, _SHN_ABS = 0, 0xFFF1
_MAX_FRAMES = 32  # a scalar pointer names `p[i]` only within this many bytes past it


@dataclass(frozen=True)
class GlobalVar:
    name: str
    start: int  # link-time
    size: int
    kind: str  # global | static | common
    container: str | None
    die_offset: int | None  # None: from the symbol table only
    file: str | None
    line: int | None
    type: str | None


# --------------------------------------------------------------------------------------------
# One ELF's data


class ModuleData:
    """The data objects and frame variables one ELF describes, built on first use."""

    def __init__(self, index: ElfIndex) -> None:
        self.index = index
        self.layouts = Layouts(8 if index.elf.elfclass == 64 else 4)
        self.units: dict[int, Unit] = {}
        self._dies: dict[int, DIE] = {}
        self.common_decl: dict[str, tuple[str | None, int | None]] = {}  # "COMMON /data/" -> file, line
        self._locations: dict[int, Any] = {}
        self._scopes: dict[int, list[tuple[str, DIE, list[DIE]]]] = {}
        self._inner_of: dict[int, tuple[list[tuple[DIE, list[tuple[int, int]]]], list[DIE]]] = {}

    @property
    def dwarf(self) -> DwarfIndex | None:
        return self.index.dwarf

    def _iter_dies(self) -> Iterator[tuple[CompileUnit, DIE, list[DIE]]]:
        """Every DIE outside types, with its ancestors (outermost first)."""
        dwarf = self.dwarf
        if dwarf is None:
            return
        for cu in dwarf.dwarfinfo.iter_CUs():
            try:
                top = cu.get_top_DIE()
            except DWARF_ERRORS:
                continue
            stack: list[tuple[DIE, list[DIE]]] = [(top, [])]
            while stack:
                die, parents = stack.pop()
                try:
                    children = list(die_children(die))
                except DWARF_ERRORS:
                    continue
                for child in children:
                    yield cu, child, parents
                    if child.has_children and child.tag not in AGGREGATES and child.tag != "DW_TAG_enumeration_type":
                        stack.append((child, [*parents, child]))

    @cached_property
    def globals(self) -> IntervalTable[GlobalVar]:
        """Variables at fixed addresses: DWARF first (named, typed, with declaration lines),
        then data symbols of .symtab/.dynsym the DWARF does not cover. It walks every DIE of the
        module: a site is named by `global_at`, which answers alike from the DIEs near it."""
        items: dict[int, tuple[int, int, GlobalVar]] = {}
        for var in self.dwarf_vars:
            # A COMMON block is described again in every routine that declares it: keep the first.
            items.setdefault(var.start, (var.start, var.start + max(var.size, 1), var))
        dwarf_table = IntervalTable(items.values())
        extra = [(s.start, s.start + max(s.size, 1), s) for s in self.symbols if dwarf_table.find(s.start) is None]
        return IntervalTable([*items.values(), *extra])

    @cached_property
    def dwarf_vars(self) -> list[GlobalVar]:
        """DWARF variables at fixed addresses, once each (a COMMON block is described again
        in every routine that declares it)."""
        seen: dict[tuple[str, int, str | None], GlobalVar] = {}
        for var in self._dwarf_globals():
            seen.setdefault((var.name, var.start, var.container), var)
        return list(seen.values())

    def _dwarf_globals(self) -> Iterator[GlobalVar]:
        if self.dwarf is None:
            return
        try:
            for _cu, die, parents in self._iter_dies():
                var = self._global_var(die, parents)
                if var is not None:
                    yield var
        except DWARF_ERRORS:
            return

    def _global_var(self, die: DIE, parents: list[DIE]) -> GlobalVar | None:
        """The variable a DIE describes at a fixed address (a location that is DW_OP_addr alone),
        given its ancestors below the unit's top DIE, outermost first; None for any other DIE."""
        dwarf = self.dwarf
        if dwarf is None or die.tag != "DW_TAG_variable" or "DW_AT_location" not in die.attributes:
            return None
        loc = die.attributes["DW_AT_location"]
        if loc.form not in ("DW_FORM_exprloc", "DW_FORM_block1") or not loc.value or loc.value[0] != 0x03:
            return None
        expr = bytes(loc.value)
        if len(expr) != 9:  # DW_OP_addr alone (TLS and computed locations are not fixed)
            return None
        start = struct.unpack_from("<Q", expr, 1)[0]
        src = origin(die)
        name = name_of(src) or name_of(die)
        if name is None or start == 0:
            return None
        tdie = ref(src, "DW_AT_type") or ref(die, "DW_AT_type")
        tinfo = self.layouts.info(tdie, named=True)  # its name and size: a struct's alignment is not read
        parent = parents[-1] if parents else None
        container: str | None
        if parent is not None and parent.tag == "DW_TAG_common_block":
            kind, container = "common", f"COMMON /{name_of(parent) or ''}/"
            self.common_decl.setdefault(container, decl_pos(dwarf, parent, self.units))
        else:
            func = next((p for p in reversed(parents) if p.tag == "DW_TAG_subprogram"), None)
            if func is not None:
                kind, container = "static", name_of(origin(func))
            else:
                external = "DW_AT_external" in src.attributes or "DW_AT_external" in die.attributes
                kind, container = ("global" if external else "static"), None
        file, line = decl_pos(dwarf, die, self.units)
        self._dies[die.offset] = die
        return GlobalVar(name, start, tinfo.size or 0, kind, container, die.offset, file, line, tinfo.name)

    def global_at(self, addr: int) -> GlobalVar | None:
        """`globals.find(addr)` without the walk of the whole DWARF: the DWARF variables near
        `addr` only (globalvars.py), then the data symbols around it that no variable covers."""
        return self._globals_near.find(addr)  # type: ignore[no-any-return]

    @cached_property
    def _globals_near(self) -> GlobalsNear:
        floor = SectionFloor(self.index.elf)
        fixed = FixedAddressIndex(self._tree, self._global_var, floor) if self.dwarf is not None else None
        return GlobalsNear(fixed, self.symbols, floor)

    @cached_property
    def symbol_table(self) -> IntervalTable[GlobalVar]:
        return IntervalTable((v.start, v.start + max(v.size, 1), v) for v in self.symbols)

    @cached_property
    def symbols(self) -> list[GlobalVar]:
        """Data objects of the symbol tables (functions are ElfIndex's business), by address;
        at an address with several, the first the tables list."""
        out: dict[int, GlobalVar] = {}
        with suppress(*DWARF_ERRORS):  # section headers pyelftools cannot read: the symbols before
            for elf in self.index.symbol_sources():
                for raw, value, size, info, shndx in symbol_entries(elf):
                    if info & 0xF not in (_STT_OBJECT, _STT_COMMON) or shndx in (_SHN_UNDEF, _SHN_ABS):
                        continue
                    if value == 0 or value in out:
                        continue
                    kind = "global" if info >> 4 in (_STB_GLOBAL, _STB_WEAK) else "static"
                    name = raw.decode("utf-8", "replace")  # as pyelftools decodes symbol names
                    out[value] = GlobalVar(name, value, size, kind, None, None, None, None, None)
        return sorted(out.values(), key=lambda g: g.start)

    @cached_property
    def expr_parser(self) -> ParsedExprs:
        assert self.dwarf is not None
        return ParsedExprs(self.dwarf.dwarfinfo.structs)

    def die(self, offset: int) -> DIE | None:
        return self._dies.get(offset)

    def section_of(self, addr: int) -> str | None:
        for section in self.index.elf.iter_sections():
            h = section.header
            if h["sh_addr"] and h["sh_addr"] <= addr < h["sh_addr"] + h["sh_size"]:
                return section.name
        return None

    # -- frames --------------------------------------------------------------------------------

    def scopes_at(self, pc: int) -> list[tuple[str, DIE, list[DIE]]]:
        """(function name, scope DIE, its variables) from the function containing the link-time
        PC inward: the function, then its blocks and inlined helpers covering the PC."""
        if pc not in self._scopes:
            self._scopes[pc] = self._scopes_at(pc)
        return self._scopes[pc]

    def _scopes_at(self, pc: int) -> list[tuple[str, DIE, list[DIE]]]:
        dwarf = self.dwarf
        # (the resolver's unit lookup: .debug_aranges, not every unit's top DIE)
        offset = dwarf.unit_offset_at(pc) if dwarf is not None else None
        if dwarf is None or offset is None:
            return []
        out: list[tuple[str, DIE, list[DIE]]] = []
        try:
            cu = dwarf.dwarfinfo.get_CU_at(offset)

            def covers(die: DIE) -> bool:
                return any(lo <= pc < hi for lo, hi in dwarf.die_ranges(die, cu))

            level: DIE | None = cu.get_top_DIE()
            func_name: str = "?"
            while level is not None:
                nxt = None
                # Outside functions, only the children that can hold the PC are read (the unit's
                # top level is most of a big unit); inside, the function's own DIEs.
                if out:
                    # inside a function (CPython's eval loop: 100 sites): ranges read once
                    for child, ranges in self._inner(level, cu)[0]:
                        if any(lo <= pc < hi for lo, hi in ranges):
                            nxt = child
                            break
                else:
                    for child in self._outer_children(cu, level, pc):
                        if child.tag in ("DW_TAG_namespace", "DW_TAG_module"):
                            if any(covers(c) for c in die_children(child) if c.tag == "DW_TAG_subprogram"):
                                nxt = child
                                break
                        if child.tag == "DW_TAG_subprogram" and covers(child):
                            nxt = child
                            break
                if nxt is None:
                    break
                if nxt.tag == "DW_TAG_subprogram":
                    # The name the site's PC is shown with, as dwarfindex (and gdb) names it.
                    ranges = dwarf.die_ranges(nxt, cu)
                    func_name = dwarf.shown_name(nxt, cu, ranges, inlined=False) or name_of(origin(nxt)) or func_name
                elif nxt.tag == "DW_TAG_inlined_subroutine":
                    func_name = dwarf.shown_name(nxt, cu, [], inlined=True) or name_of(origin(nxt)) or func_name
                if nxt.tag not in ("DW_TAG_namespace", "DW_TAG_module"):
                    out.append((func_name, nxt, self._inner(nxt, cu)[1]))
                level = nxt
        except DWARF_ERRORS:
            return out
        return out

    def _inner(self, scope: DIE, cu: CompileUnit) -> tuple[list[tuple[DIE, list[tuple[int, int]]]], list[DIE]]:
        """A scope's child scopes with their address ranges, and its variables: once per DIE."""
        known = self._inner_of.get(scope.offset)
        if known is None:
            dwarf = self.dwarf
            assert dwarf is not None
            scopes: list[tuple[DIE, list[tuple[int, int]]]] = []
            variables: list[DIE] = []
            for child in _scope_children(self.index, cu, scope):
                if child.tag == "DW_TAG_subprogram" or child.tag in _SCOPES:
                    try:
                        ranges = dwarf.die_ranges(child, cu)
                    except DWARF_ERRORS:
                        ranges = []  # an unreadable scope holds no PC; its siblings still count
                    scopes.append((child, ranges))
                elif child.tag in _VARS:
                    variables.append(child)
            known = self._inner_of[scope.offset] = (scopes, variables)
        return known

    def _outer_children(self, cu: CompileUnit, level: DIE, pc: int) -> Iterator[DIE]:
        """The children of the unit's top DIE (or of a namespace or module in it) that may be or
        hold the function containing `pc`, in order: the functions with code there and the
        namespaces and modules with such a function among their own children (dietree.py),
        not the whole top level of the unit."""
        holders = self.index.code_holders
        found = holders.children_holding(cu, level, pc, nested=False) if holders is not None else None
        yield from die_children(level) if found is None else found

    @cached_property
    def _tree(self) -> DieTree:
        holders = self.index.code_holders
        if holders is not None:
            return holders.tree  # the shapes the resolver read already
        assert self.dwarf is not None
        return DieTree(self.dwarf.dwarfinfo)

    @cached_property
    def _locparser(self) -> LocationParser | None:
        dwarf = self.dwarf
        if dwarf is None:
            return None
        try:
            return LocationParser(dwarf.dwarfinfo.location_lists())
        except DWARF_ERRORS:
            return None

    def location_expr(self, die: DIE, pc: int) -> list[int] | None:
        """The location expression of a variable valid at a link-time PC."""
        attr = die.attributes.get("DW_AT_location")
        parser = self._locparser
        if attr is None or parser is None:
            return None
        # Parsed once per variable: a site's frame is read several times (the pointer it went
        # through, the local it is, its callers).
        if die.offset not in self._locations:
            try:
                self._locations[die.offset] = parse_location(parser, attr, die.cu["version"], die)
            except DWARF_ERRORS:
                self._locations[die.offset] = None
        loc = self._locations[die.offset]
        if loc is None:
            return None
        if isinstance(loc, LocationExpr):
            return list(loc.loc_expr)
        top = die.cu.get_top_DIE().attributes
        base = top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0
        for entry in loc:
            if isinstance(entry, BaseAddressEntry):
                base = entry.base_address
            elif isinstance(entry, LocationEntry):
                lo = entry.begin_offset if entry.is_absolute else entry.begin_offset + base
                hi = entry.end_offset if entry.is_absolute else entry.end_offset + base
                if lo <= pc < hi:
                    return list(entry.loc_expr)
        return None

    @cached_property
    def frame_rules(self) -> FrameRules:
        """The module's CFA rules: what unwinds a frame to its caller's (symbols/cfi.py)."""
        return FrameRules(self.index.elf)

    def unwind(self, pc: int, regs: Mapping[str, int], read_memory: Callable[[int, int], bytes]) -> dict[str, int] | None:
        return self.frame_rules.unwind(pc, regs, read_memory)

    def cfa(self, pc: int, regs: Mapping[str, int], bias: int) -> int | None:
        return self.frame_rules.cfa(pc, regs)


def _scope_children(index: ElfIndex, cu: CompileUnit, scope: DIE) -> Iterable[DIE]:
    """The children of a scope that ModuleData._inner keeps (scopes, functions, variables), in
    order, from the unit's shape (symbols/dietree.py): pyelftools reads those only, not the
    call sites, their parameters, the labels and the list's terminator, which were a fifth of
    the DIEs read to name CPython's sites and a third of sqlite3's. All of them, read by
    pyelftools, when the shape has not met the scope."""
    holders = index.code_holders
    found = holders.children_tagged(cu, scope, _INNER_TAGS) if holders is not None else None
    return die_children(scope) if found is None else found


_MODULES: dict[int, ModuleData] = {}


def module_data(index: ElfIndex) -> ModuleData:
    data = _MODULES.get(id(index))
    if data is None or data.index is not index:
        data = _MODULES[id(index)] = ModuleData(index)
    return data


# --------------------------------------------------------------------------------------------
# The classifier


@dataclass
class Frame:
    """What is known of the faulting thread: its registers (None when the engine saved none),
    a memory reader (None when the process is gone), and the stack pointers of other threads."""

    pc: int | None = None
    tid: int | None = None
    pid: int | None = None
    regs: Mapping[str, int] | None = None
    read_memory: Callable[[int, int], bytes] | None = None
    thread_sps: Mapping[int, int] | None = None


# Offsets are decimal bytes everywhere in a data description (`r2[3]+2`, `[heap]+673`, file
# offset 4099); addresses are hex.
_MAX_CHUNKS = 1 << 16  # heap chunks walked to find a block: a bounded cost at a fault
_HEAP_READ = 32 << 20  # bytes of heap read at once to walk it (larger: a word at a time)


def _heap_block(va: int, start: int, end: int, read_memory: Callable[[int, int], bytes]) -> tuple[int, int, bool] | None:
    """The glibc malloc block holding `va` in the main arena's [heap] (start, usable size, in
    use), by walking its chunks from the mapping's start: each chunk's size field (flags in the
    low 3 bits) is 8 bytes in, its memory 16 bytes in, and a chunk is in use when the next one's
    PREV_INUSE bit says so. None when the walk does not make sense (another allocator)."""
    # One read of the heap up to the address (a debugger's memory read costs a round trip each)
    span = min(end, va + 4096) - start
    image = read_memory(start, span) if span <= _HEAP_READ else b""

    def word(at: int) -> int:
        off = at - start
        raw = image[off:off + 8] if 0 <= off and off + 8 <= len(image) else read_memory(at, 8)
        return int.from_bytes(raw, "little")

    chunk = start
    for _ in range(_MAX_CHUNKS):
        size = word(chunk + 8) & ~7
        if size < 32 or size % 16 or chunk + size > end:
            return None
        if chunk + 16 <= va < chunk + size + 8:  # a block's usable bytes run into the next chunk's first word
            nxt = chunk + size
            in_use = nxt + 16 > end or bool(word(nxt + 8) & 1)
            return chunk + 16, size - 8, in_use
        chunk += size
    return None


def describe(va: int, modules: ModuleMap | None, frame: Frame | None = None, *,
             index_for: Callable[[str], ElfIndex | None] = elf_index) -> DataRef:
    """What the data at `va` is, as far as the maps, the ELF files and the frame tell."""
    frame = frame or Frame()
    if modules is None:
        return DataRef("unknown", "unknown (no address-space map)", va)
    via = _via(va, modules, frame, index_for)
    ref_ = _in_module(va, modules, index_for)
    if ref_ is None:
        ref_ = _in_mapping(va, modules, frame, index_for)
    if via is not None:
        ref_ = replace(ref_, via=via)
    return ref_


def _module_at(va: int, modules: ModuleMap, index_for: Callable[[str], ElfIndex | None]) -> tuple[Any, ElfIndex] | None:
    for m in modules.modules:
        if not m.path.startswith("/"):
            continue
        index = index_for(m.path)
        if index is None:
            continue
        link = va - m.base
        if any(s.vaddr <= link < s.vaddr + s.memsz for s in index.segments):
            return m, index
    return None


def _in_module(va: int, modules: ModuleMap, index_for: Callable[[str], ElfIndex | None]) -> DataRef | None:
    hit = _module_at(va, modules, index_for)
    if hit is None:
        return None
    module, index = hit
    md = module_data(index)
    link = va - module.base
    # A system library's DWARF (glibc's debug file: 27 s of pyelftools) is not read in the fault
    # path: its data is named by the symbol table.
    system = modules.is_system(module)
    var = md.symbol_table.find(link) if system else md.global_at(link)
    if var is None:
        section = md.section_of(link)
        where = f"{module.name}+{link:#x}" + (f" ({section})" if section else "")
        what = ("no data symbol (a system library: its DWARF is not read)" if system
                else "no symbol" if md.dwarf is None else "no variable in DWARF or the symbol table")
        return DataRef("image", f"{where}: {what}", va, module=module.name)
    offset = link - var.start
    if var.die_offset is not None and md.die(var.die_offset) is not None:
        die = md.die(var.die_offset)
        assert die is not None
        place = md.layouts.place(ref(origin(die), "DW_AT_type") or ref(die, "DW_AT_type"), offset)
        path, rest, elem, esize = var.name + place.path, place.offset, place.type, place.size
        struct_, member, packed = place.struct, place.member, place.packed
    else:
        path, rest, elem, esize, struct_, member, packed = var.name, offset, None, None, None, None, False
    where = {"common": f" in {var.container}", "static": f", static in {var.container}" if var.container else ", static",
             "global": ", global"}.get(var.kind, "")
    decl = f", declared at {var.file}:{var.line}" if var.file and var.line else ""
    source = "" if var.die_offset is not None else f" [symbol table: {var.size} bytes, no type]"
    kind = var.kind if var.die_offset is not None else "symbol"
    return DataRef(kind, f"{path}+{rest}{where}{decl}{source}", va, name=var.name, path=path, offset=rest,
                   type=var.type, element_type=elem, element_size=esize, container=var.container, module=module.name, file=var.file,
                   line=var.line, struct=struct_, member=member, packed=packed, start=module.base + var.start,
                   size=var.size or None)


def _in_mapping(va: int, modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None]) -> DataRef:
    m = modules.mapping_at(va)
    if m is None:
        modules.refresh()  # re-reads the mappings even when the modules stay the same (the heap grew)
        m = modules.mapping_at(va)
    if m is None:
        return DataRef("unknown", "unknown (no mapping holds this address)", va)
    off = va - m.start
    sp = _reg(frame.regs, "rsp")
    if m.path == "[heap]":
        block = None
        if frame.read_memory is not None:
            try:
                block = _heap_block(va, m.start, m.end, frame.read_memory)
            except Exception:  # noqa: BLE001 - memory unreadable: the mapping only
                block = None
        if block is not None:
            bstart, usable, in_use = block
            state = "" if in_use else " (a FREED block)"
            return DataRef("heap", f"byte {va - bstart} of the malloc'd block at {bstart:#x} ({usable} bytes usable){state}", va,
                           mapping=m.path, mapping_offset=off, start=bstart, size=usable, offset=va - bstart)
        return DataRef("heap", f"malloc'd memory, [heap]+{off} (its block is not known: no memory read at the fault)", va,
                       mapping=m.path, mapping_offset=off)
    own_stack = sp is not None and m.start <= sp < m.end
    if m.path == "[stack]" and frame.read_memory is not None and frame.pid is not None:
        strings = _argv_environ(va, frame.pid, frame.read_memory)
        if strings is not None:
            return replace(strings, mapping=m.path, mapping_offset=off)
    if m.path.startswith("[stack") or own_stack:
        # [stack] is the main thread's, whose tid is the pid; another stack is the faulting
        # thread's when its stack pointer is in it.
        tid = frame.pid if m.path == "[stack]" else (frame.tid if own_stack else None)
        if not own_stack and frame.thread_sps:
            tid = next((t for t, s in frame.thread_sps.items() if m.start <= s < m.end), tid)
        local = _local(va, modules, frame, index_for) if own_stack else None
        if local is not None:
            return local
        who = f"thread {tid}" if tid is not None else "a thread"
        where = "below the stack pointer" if own_stack and sp is not None and va < sp else ""
        text_ = f"stack of {who}" + (f", {where}" if where else "") + (
            ", no local or parameter of the faulting frame holds it" if own_stack and frame.pc is not None else "")
        return DataRef("stack", text_, va, tid=tid, mapping=m.path, mapping_offset=off)
    if frame.thread_sps:
        tid = next((t for t, s in frame.thread_sps.items() if m.start <= s < m.end), None)
        if tid is not None:
            return DataRef("stack", f"stack of thread {tid}", va, tid=tid, mapping=m.path, mapping_offset=off)
    if m.is_file:
        foff = off + m.offset
        return DataRef("file", f"mapped file {m.path} at file offset {foff}", va, mapping=m.path, mapping_offset=foff)
    if m.path:
        return DataRef("anonymous", f"{m.path}+{off}", va, mapping=m.path, mapping_offset=off)
    return DataRef("anonymous", f"heap or anonymous mapping {m.start:#x}-{m.end:#x}+{off} (mmap'd or a thread's malloc arena)",
                   va, mapping="", mapping_offset=off)


def _argv_environ(va: int, pid: int, read_memory: Callable[[int, int], bytes]) -> DataRef | None:
    """The argument or environment strings the kernel copied at the top of the main stack, named
    `argv[1]+3` / `environ[4]+0` (which string: the NULs before `va` counted). From
    /proc/PID/stat's arg_start..env_end (fields 48-51), so only for a live process (the caller
    has its memory): a pid of a process that is gone may be another's."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
    except (OSError, IndexError, ValueError):
        return None
    for kind, name, lo, hi in (("argv", "argv", arg_start, arg_end), ("environ", "environ", env_start, env_end)):
        if lo <= va < hi:
            try:
                before = read_memory(lo, va - lo) if va > lo else b""
            except Exception:  # noqa: BLE001 - unreadable: the block only
                return DataRef(kind, f"the {name} strings, byte {va - lo}", va, start=lo, size=hi - lo, offset=va - lo)
            index, start = before.count(b"\0"), lo + before.rfind(b"\0") + 1
            what = "argument" if kind == "argv" else "environment"
            return DataRef(kind, f"{name}[{index}]+{va - start} ({what} strings: the kernel places them at no alignment)",
                           va, name=name, path=f"{name}[{index}]", offset=va - start, start=lo, size=hi - lo)
    return None


def _reg(regs: Mapping[str, int] | None, name: str) -> int | None:
    if regs is None:
        return None
    try:
        return regs[name]
    except KeyError:
        return None


# A variable in scope at a frame's PC: the module's data, the function (inlined or not) whose
# scope holds it, its DIE, where it is for the frame, and the location expression it came from.
_FrameVar = tuple[ModuleData, str, DIE, Location, list[int]]


def _frame_vars(modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None], *, caller: bool = False
                ) -> Iterator[_FrameVar]:
    """Each variable in scope at the frame's PC with its location (and the expression it came
    from), innermost scope first. For a caller frame the PC is a return address: its scopes are
    those of the call (PC - 1)."""
    if frame.pc is None or frame.regs is None:
        return
    module = modules.find(frame.pc, refresh=False)
    # Not in a system library's frames: indexing glibc's debug DWARF costs tens of seconds.
    if module is None or modules.is_system(module):
        return
    index = index_for(module.path)
    if index is None or index.dwarf is None:
        return
    md = module_data(index)
    link_pc = frame.pc - module.base - (1 if caller else 0)
    if frame.read_memory is None:
        yield from _saved_frame_vars(md, link_pc, module.base, tuple(sorted(frame.regs.items())))
    else:
        yield from _evaluated_vars(md, link_pc, module.base, frame.regs, frame.read_memory)


def _evaluated_vars(md: ModuleData, link_pc: int, bias: int, regs: Mapping[str, int],
                    read_memory: Callable[[int, int], bytes] | None) -> Iterator[_FrameVar]:
    scopes = md.scopes_at(link_pc)
    if not scopes:
        return
    func_die = scopes[0][1]
    fb = func_die.attributes.get("DW_AT_frame_base")
    fb_expr = list(fb.value) if fb is not None and fb.form == "DW_FORM_exprloc" else None
    ev = Evaluator(md.expr_parser, regs, bias=bias, cfa=lambda: md.cfa(link_pc, regs, bias), frame_base=fb_expr,
                   read_memory=read_memory)
    for func, _scope, variables in reversed(scopes):
        for die in variables:
            expr = md.location_expr(die, link_pc)
            if not expr:
                continue
            try:
                loc = ev.evaluate(expr)
            except (Unreadable, *DWARF_ERRORS):  # type: ignore[misc]
                continue
            yield md, func, die, loc, expr


@lru_cache(maxsize=8192)
def _saved_frame_vars(md: ModuleData, link_pc: int, bias: int, regs: tuple[tuple[str, int], ...]
                      ) -> tuple[_FrameVar, ...]:
    """A frame of registers saved at a fault and no memory (the agent's: the process is gone)
    has the same variables at the same places every time it is read: once for the pointer the
    access went through, once for the local it is, and again for the lowest and the highest
    address the site's records touched (engines/agent.py). So they are evaluated once, all of
    them (a reader that stops at its first answer costs the rest of the frame only the first
    time). Up to 8192 frames are kept: a site's are read again after every site is named."""
    return tuple(_evaluated_vars(md, link_pc, bias, dict(regs), None))


# DW_OP_fbreg, DW_OP_breg6 (rbp), DW_OP_breg7 (rsp), DW_OP_call_frame_cfa: a location in the frame
_FRAME_OPS = frozenset({0x91, 0x76, 0x77, 0x9C})


def storage_of(expr: list[int]) -> str:
    """"frame" when a location expression places a variable in its frame, else "elsewhere"."""
    return "frame" if expr and expr[0] in _FRAME_OPS else "elsewhere"


def _callers(modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None]) -> Iterator[Frame]:
    """The faulting thread's caller frames, unwound with the CFI (needs the stack's memory)."""
    if frame.read_memory is None or frame.regs is None or frame.pc is None:
        return
    regs: Mapping[str, int] = frame.regs
    pc, first = frame.pc, True
    for _ in range(_MAX_FRAMES):
        module = modules.find(pc, refresh=False)
        index = index_for(module.path) if module is not None else None
        if module is None or index is None or modules.is_system(module):
            return  # a system library's CFI is not decoded in the fault path (thousands of FDEs)
        caller = module_data(index).unwind(pc - module.base - (0 if first else 1), regs, frame.read_memory)
        if caller is None:
            return
        regs, pc, first = caller, caller["rip"], False
        yield Frame(pc=pc, tid=frame.tid, pid=frame.pid, regs=regs, read_memory=frame.read_memory)


def _local(va: int, modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None]) -> DataRef | None:
    found = _local_in(va, modules, frame, index_for, 0)
    if found is not None:
        return found
    sp = _reg(frame.regs, "rsp")
    if sp is not None and va < sp:
        return None  # below the stack pointer: no frame's variable
    for depth, caller in enumerate(_callers(modules, frame, index_for), 1):
        found = _local_in(va, modules, caller, index_for, depth)
        if found is not None:
            return found
    return None


def _local_in(va: int, modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None],
              depth: int) -> DataRef | None:
    for md, func, die, loc, expr in _frame_vars(modules, frame, index_for, caller=depth > 0):
        if loc.address is None:
            continue
        src = origin(die)
        tdie = ref(src, "DW_AT_type")
        info = md.layouts.info(tdie, named=True)  # its name and size: a struct's alignment is not read
        if not (loc.address <= va < loc.address + (info.size or 0)):
            continue
        place = md.layouts.place(tdie, va - loc.address)
        name = name_of(src) or "?"
        kind = "parameter" if die.tag == "DW_TAG_formal_parameter" else "local"
        dwarf = md.dwarf
        assert dwarf is not None
        file, line = decl_pos(dwarf, src, md.units)
        decl = f", declared at {file}:{line}" if file and line else ""
        thread = f", stack of thread {frame.tid}" if frame.tid is not None else ""
        where = f"{kind} of {func}" + (f" (frame #{depth})" if depth else "")
        return DataRef(kind, f"{name}{place.path}+{place.offset}, {where}{decl}{thread}", va, frame=depth,
                       name=name, path=name + place.path, offset=place.offset, type=info.name, element_type=place.type,
                       element_size=place.size,
                       container=func, file=file, line=line, tid=frame.tid, struct=place.struct, member=place.member,
                       packed=place.packed, start=loc.address, size=info.size, storage=storage_of(expr))
    return None


def _via(va: int, modules: ModuleMap, frame: Frame, index_for: Callable[[str], ElfIndex | None]) -> Via | None:
    """The pointer variable in scope whose target holds `va`: pointers to structs first (they
    name the member), then pointers to scalars (`p[i]`), innermost scope first."""
    best: tuple[int, tuple[Any, ...]] | None = None  # (rank, what its Via is made of)
    for md, func, die, loc, _expr in _frame_vars(modules, frame, index_for):
        src = origin(die)
        ptype = strip(ref(src, "DW_AT_type"))
        if ptype is None:
            continue
        if ptype.tag == "DW_TAG_array_type" and die.tag == "DW_TAG_formal_parameter" and loc.address is not None:
            # An array argument passed by reference (a Fortran dummy array): its location is
            # the caller's array, the access is an element of this view of it.
            value: int | None = loc.address
        elif ptype.tag in POINTERS:
            value = loc.value
            if value is None and loc.address is not None and frame.read_memory is not None:
                try:
                    value = int.from_bytes(frame.read_memory(loc.address, 8), "little")
                except Exception:
                    value = None
        else:
            continue
        if value is None or value > va:
            continue
        target = ref(ptype, "DW_AT_type")
        # Whether `va` is in reach, and the path to it, need the target's size only: its
        # alignment (every member's type read, for a struct) is read for the pointer chosen,
        # not for every pointer in scope below `va` (they read two fifths of the DIEs read to
        # name CPython's sites, most of them members).
        size = md.layouts.info(target, named=True).size
        st = strip(target)
        if st is None or not size:
            continue
        delta = va - value
        aggregate = st.tag in AGGREGATES
        if aggregate and delta >= size:
            continue
        if not aggregate and delta >= _NEAR:
            continue
        name = name_of(src) or "?"
        if aggregate:
            place = md.layouts.place(target, delta, sep="->")
            path = f"{name}{place.path}+{place.offset}"
        else:
            place = md.layouts.place(None, 0)
            idx, rest = divmod(delta, size)
            path = f"{name}[{idx}]+{rest}"
        rank = 0 if aggregate and place.member else 1
        if best is None or rank < best[0]:
            best = (rank, (md, name, ptype, target, value, path, func, place))
        if rank == 0:
            break
    if best is None:
        return None
    md, name, ptype, target, value, path, func, place = best[1]
    tinfo = md.layouts.info(target)
    return Via(pointer=name, type=md.layouts.info(ptype).name, path=path, function=func, struct=place.struct,
               member=place.member, member_offset=place.member_offset, member_align=place.member_align,
               packed=place.packed, target_align=tinfo.align, pointer_misaligned=bool(tinfo.align > 1 and value % tinfo.align))


def describe_any(va: int, snapshots: list[ModuleMap], frame: Frame | None = None) -> DataRef:
    """`describe` for a process that is gone, from its maps snapshots, newest first: the first
    one that maps `va` (the heap and mmap'd memory may postdate older snapshots)."""
    if not snapshots:
        return describe(va, None, frame)
    mm = _snapshot_for(va, snapshots)
    if mm is not None:
        return describe(va, mm, frame)
    ref_ = describe(va, snapshots[0], frame)
    if ref_.kind == "unknown":
        return replace(ref_, text="unknown (no saved memory map holds this address: mapped after the last snapshot)")
    return ref_


def _snapshot_for(va: int, snapshots: list[ModuleMap]) -> ModuleMap | None:
    """The newest snapshot that maps `va` (describe_any names the data with it alone)."""
    return next((mm for mm in snapshots if mm.mapping_at(va) is not None), None)


def naming_view(va: int, pc: int, snapshots: list[ModuleMap]) -> tuple[Any, ...]:
    """All that describe_any's answer takes from the snapshots for data at `va` named at `pc`:
    of the snapshot it names it with, the mapping holding `va`, its modules (_module_at looks for
    `va` among them), the module holding `pc`, and which modules are the system's. A later
    snapshot (at exit) that maps them alike gives the same view, so a name can be kept by it
    (engines/agent.py: a warming thread's naming is the document's)."""
    chosen = _snapshot_for(va, snapshots)
    mm = chosen if chosen is not None else (snapshots[0] if snapshots else None)
    if mm is None:
        return ()
    m = mm.mapping_at(va)
    # (the heap's end is not part of its naming, and it grows between two snapshots)
    where = None if m is None else (m.start, None if m.path == "[heap]" else m.end, m.perms, m.offset, m.inode, m.path)
    return (chosen is not None, where, mm.modules, mm.find(pc, refresh=False), tuple(mm.is_system(x) for x in mm.modules))


def safe_describe(va: int, modules: ModuleMap | None, frame: Frame | None = None) -> DataRef:
    """`describe` that never raises: a fault report must not die on odd DWARF."""
    try:
        return describe(va, modules, frame)
    except Exception as exc:  # noqa: BLE001 - pyelftools raises many types on odd input
        return DataRef("unknown", f"unknown (the symbols could not be read: {type(exc).__name__})", va)


def describe_saved(va: int, snapshots: list[ModuleMap], pc: int, pid: int, regs: Mapping[str, int]) -> DataRef:
    """For the agent: registers saved at the fault, no memory, the process's maps snapshots.
    The thread is not known per site: a stack VA names the main thread only for `[stack]`."""
    try:
        return describe_any(va, snapshots, Frame(pc=pc, tid=None, pid=pid, regs=regs))
    except Exception as exc:  # noqa: BLE001 - as safe_describe
        return DataRef("unknown", f"unknown (the symbols could not be read: {type(exc).__name__})", va)
