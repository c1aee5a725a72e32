"""Where the step engine steps: a function (every instance of it), an address range, the current
function until it returns, or the whole program. Turns what the user typed into runtime address
ranges from the loaded modules' symbol tables (DWARF where a symbol table lacks the function)."""
from __future__ import annotations

import os
import re
import weakref
from collections.abc import Iterable, Iterator

from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE

from ..core.errors import UaldbgError
from ..core.model import Module
from ..lazyclass import dataclass
from ..symbols.cxxnames import NameQuery, base_name, demangle, function_name, normalize, split_components, strip_template_args
from ..symbols.dwarfindex import DWARF_ERRORS, dwarf_info, qualified_die_name
from ..symbols.elfindex import ElfIndex, elf_index
from ..symbols.maps import PSEUDO_MODULES, ModuleMap, is_system_path

__all__ = [
    "KINDS",
    "ScopeError",
    "StepScope",
    "function_ranges",
    "parse_range",
    "resolve_scope",
]

KINDS = ("function", "range", "until-return", "everywhere")

# gcc's names for copies of one function: `f.constprop.0`, `f.isra.0`, `f.part.0`, `f.cold`
# (and chains such as `f.isra.0.cold`, `f.constprop.0.isra.0`); `lto_priv` under LTO.
_CLONE_SUFFIX = r"(?:\.(?:constprop|isra|part|cold|lto_priv|localalias)(?:\.\d+)?)*"


class ScopeError(UaldbgError):
    """One-line user-facing message."""


@dataclass(frozen=True)
class StepScope:
    """The code to single-step. `ranges` are half-open runtime address ranges, sorted and
    disjoint; empty for until-return (the engine bounds it by the frame) and everywhere.
    `entries` are where a thread running at full speed comes into the ranges: the start of each
    function instance in them and the start of each range (a breakpoint engine plants these)."""

    kind: str  # "function" | "range" | "until-return" | "everywhere"
    label: str  # what the user typed, for reports ("parse_header", "0x401000-0x401200")
    ranges: tuple[tuple[int, int], ...] = ()
    entries: tuple[int, ...] = ()

    def contains(self, pc: int) -> bool:
        if self.kind in ("everywhere", "until-return"):
            return True
        return any(lo <= pc < hi for lo, hi in self.ranges)

    def describe(self) -> str:
        if self.kind == "everywhere":
            return "everywhere (every instruction of the program)"
        if self.kind == "until-return":
            return f"{self.label} until it returns"
        spans = ", ".join(f"{lo:#x}-{hi:#x}" for lo, hi in self.ranges)
        return f"{self.label} ({spans})" if self.kind == "function" else spans


def _merge(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, overlaps joined; ranges that only touch stay apart (each start is an entry)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] < r[1]):
        if out and lo < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _number(text: str, what: str, whole: str) -> int:
    try:
        value = int(text.strip(), 0)
    except ValueError:
        raise ScopeError(f"--range {whole}: {what} {text.strip()!r} is not a number "
                         "(write 0x401000,0x401200)") from None
    if value < 0 or value >= 1 << 64:
        raise ScopeError(f"--range {whole}: {what} {text.strip()} is not a 64-bit address")
    return value


def parse_range(text: str) -> tuple[int, int]:
    """`LO,HI` or `LO-HI` (hex with 0x, or decimal) as a half-open [LO, HI) pair."""
    raw = text.strip()
    sep = "," if "," in raw else "-"
    parts = raw.split(sep)
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise ScopeError(f"--range {text}: write two addresses, LO,HI (e.g. 0x401000,0x401200)")
    lo = _number(parts[0], "LO", text)
    hi = _number(parts[1], "HI", text)
    if hi <= lo:
        raise ScopeError(f"--range {text}: empty range (HI must be above LO)")
    return lo, hi


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + _CLONE_SUFFIX)


_INSTANCE_TAGS = ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine")
_CLONE_TAIL = re.compile(_CLONE_SUFFIX + "$")


@dataclass(frozen=True)
class _Named:
    """One function symbol or DWARF instance with code, by the name gdb knows it by."""

    name: str  # qualified (`ns::Klass::method`); a C function's plain name, clone suffix dropped
    base: str  # the last component without template arguments: the quick test before matching
    raw: str  # as stored: the symbol (mangled for C++) or DWARF's linkage name
    start: int = 0  # a symbol's [start, end); a DWARF instance's ranges come from `die`
    end: int = 0
    die: DIE | None = None
    cu: CompileUnit | None = None

    def named(self, text: str, query: NameQuery) -> bool:
        return self.raw == text or (self.base == query.base and query.matches(self.name))


class _Names:
    """The names of one ELF file's functions, built on first use and kept while its index
    lives (the index is passed in, not kept: it is this table's weak key)."""

    def __init__(self) -> None:
        self._raw: list[tuple[str, int, int]] | None = None
        self._demangled: dict[str, str] = {}
        self._symbols: list[_Named] | None = None
        self._dwarf: list[_Named] | None = None
        self._declared: set[str] | None = None

    def symbols(self, index: ElfIndex, query: NameQuery | None = None) -> list[_Named]:
        """Function symbols; a mangled one by its demangled qualified name (as gdb demangles them), looked up
        only for the symbols that may match `query` (all of them without one)."""
        if self._raw is None:
            self._raw = [(s.name, s.start, s.start + s.size) for s in index.function_symbols()]
        mangled = [raw for raw, _, _ in self._raw if raw.startswith("_Z") and raw not in self._demangled]
        if query is not None:
            mangled = [raw for raw in mangled if _may_be(raw, query.base)]
        if mangled:
            found = demangle(mangled)
            self._demangled.update({raw: function_name(found[raw]) if raw in found else raw for raw in mangled})
            self._symbols = None
        if self._symbols is None:
            self._symbols = []
            for raw, lo, hi in self._raw:
                name = self._demangled.get(raw) or _CLONE_TAIL.sub("", raw) or raw
                self._symbols.append(_Named(name, base_name(name), raw, lo, hi))
        return self._symbols

    def dwarf(self, index: ElfIndex) -> list[_Named]:
        """Every DWARF function instance with code: out-of-line (DW_TAG_subprogram, for files
        whose symbol tables lack them) and inlined (DW_TAG_inlined_subroutine), by qualified
        name. Walks every unit: used for the user's own modules only."""
        if self._dwarf is None:
            self._dwarf = []
            dwarf = index.dwarf
            if dwarf is None:
                return self._dwarf
            try:
                for cu in dwarf.dwarfinfo.iter_CUs():
                    for die in cu.iter_DIEs():
                        attrs = die.attributes
                        if die.tag not in _INSTANCE_TAGS or ("DW_AT_low_pc" not in attrs and "DW_AT_ranges" not in attrs):
                            continue
                        name = dwarf.qualified_name_of(die)
                        raw, _ = dwarf.name_of(die)
                        if name or raw:
                            shown = name or raw or ""
                            self._dwarf.append(_Named(shown, base_name(shown), raw or shown, die=die, cu=cu))
            except DWARF_ERRORS:
                pass
        return self._dwarf

    def declared(self, index: ElfIndex) -> set[str]:
        """The qualified names of functions DWARF only declares (libraries' functions the
        program calls): candidates for "did you mean", as gdb's `break` finds them too."""
        if self._declared is None:
            self._declared = set()
            dwarf = index.dwarf
            try:
                for cu in dwarf.dwarfinfo.iter_CUs() if dwarf is not None else ():
                    for die in cu.iter_DIEs():
                        if die.tag == "DW_TAG_subprogram" and "DW_AT_declaration" in die.attributes:
                            name = qualified_die_name(die)
                            if name:
                                self._declared.add(name)
            except DWARF_ERRORS:
                pass
        return self._declared


_NAMES: weakref.WeakKeyDictionary[ElfIndex, _Names] = weakref.WeakKeyDictionary()


def _names(index: ElfIndex) -> _Names:
    names = _NAMES.get(index)
    if names is None:
        names = _NAMES[index] = _Names()
    return names


def _may_be(mangled: str, base: str) -> bool:
    """Whether an Itanium-mangled name can name a function whose last component is `base`:
    it spells each identifier as <length><identifier>; operators have codes (all may be)."""
    ident = base[1:] if base.startswith("~") else base
    if not re.fullmatch(r"[A-Za-z_]\w*", ident):
        return True
    return f"{len(ident)}{ident}" in mangled


def _dwarf_ranges(index: ElfIndex, name: str, query: NameQuery) -> Iterator[tuple[int, int]]:
    """Every instance of `name` in DWARF with code, out-of-line and inlined (each inlined
    copy's ranges), as gdb's `break NAME` finds them."""
    dwarf = index.dwarf
    if dwarf is None:
        return
    for item in _names(index).dwarf(index):
        if item.die is not None and item.cu is not None and item.named(name, query):
            try:
                yield from dwarf.die_ranges(item.die, item.cu)
            except DWARF_ERRORS:
                continue


def _cfi_starts(path: str) -> list[int]:
    """Function starts (link-time) from .eh_frame/.debug_frame FDEs, which stripping keeps."""
    from elftools.common.exceptions import ELFError
    from elftools.dwarf.callframe import FDE
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            info = dwarf_info(elf)
            entries = list(info.EH_CFI_entries()) if info.has_EH_CFI() else []
            if info.has_CFI():
                entries += list(info.CFI_entries())
            return [e.header["initial_location"] for e in entries if isinstance(e, FDE)]
    except (ELFError, OSError):
        return []
    except DWARF_ERRORS:
        return []


def function_ranges(path: str, name: str, load_bias: int = 0, *, dwarf: bool = True) -> list[tuple[int, int]]:
    """Runtime [lo, hi) ranges of every instance of function `name` in the ELF at `path`:
    same-named static functions of several units and gcc's clones (name.constprop.N,
    name.isra.N, name.part.N, name.cold); a qualified C++ name matched as gdb's `break` does
    (`Klass::method` finds `ns::Klass::method`, `twice` every `twice<T>`), from demangled
    symbols and DWARF; from DWARF when the symbol tables lack it, inlined instances too (and
    `dwarf`: walking a large library's DWARF takes a minute). ScopeError when there is none."""
    index = elf_index(path)
    if index is None:
        raise ScopeError(f"{path}: not a readable ELF file")
    query = NameQuery.parse(name)
    pattern = _name_pattern(name)
    found = [(s.start, s.end) for s in _names(index).symbols(index, query) if pattern.fullmatch(s.raw) or s.named(name, query)]
    if dwarf:  # out-of-line instances the symbols lack, and every inlined instance
        found += list(_dwarf_ranges(index, name, query))
    if not found:
        raise ScopeError(f"no function named {name} in {os.path.basename(path)}")
    return [(lo + load_bias, hi + load_bias) for lo, hi in _merge(found)]


def _closeness(query: NameQuery, name: str) -> float:
    """How close a function's qualified name is to what matched nothing: the best of the
    whole name and its trailing components as many as the user typed, with and without
    template arguments (`Klass::metod` is close to `ns::Klass::method`)."""
    import difflib

    parts = split_components(normalize(name))
    tail = parts[-len(query.parts):]
    typed = "::".join(query.parts)
    forms = {name, "::".join(tail), "::".join(strip_template_args(p) for p in tail)}
    return max(difflib.SequenceMatcher(None, typed, form).ratio() for form in forms)


def _close_names(files: list[Module], name: str) -> list[str]:
    """The function names of the user's modules closest to a name that matched nothing,
    qualified as gdb shows them."""
    names: dict[str, str] = {}  # one spelling per name: the demangler's (symbols) before gcc's DWARF
    for module in files:
        if is_system_path(module.path):
            continue
        index = elf_index(module.path)
        if index is None:
            continue
        table = _names(index)
        # inlined functions have no symbol: their names are in DWARF
        for shown in [item.name for item in table.symbols(index) + table.dwarf(index)] + sorted(table.declared(index)):
            names.setdefault(normalize(shown), shown)
    query = NameQuery.parse(name)
    scored = sorted((-_closeness(query, n), n) for n in names.values() if n)
    return [n for score, n in scored[:4] if -score >= 0.6]


def _file_modules(modules: ModuleMap | Iterable[Module]) -> tuple[list[Module], Module | None]:
    if isinstance(modules, ModuleMap):
        mods, main = list(modules.modules), modules.main
    else:
        mods = list(modules)
        main = next((m for m in mods if m.path.startswith("/")), None)
    files = [m for m in mods if m.path.startswith("/") and m.path not in PSEUDO_MODULES]
    # the program first: its functions are what users name
    files.sort(key=lambda m: (main is None or m.path != main.path, m.start))
    return files, main


def resolve_scope(
    modules: ModuleMap | Iterable[Module],
    *,
    functions: Iterable[str] = (),
    range_text: str | Iterable[str] | None = None,
    everywhere: bool = False,
) -> StepScope:
    """The scope the user asked for, against the modules loaded now (a ModuleMap or Modules).
    Functions are looked up in every loaded module; ScopeError names the first one that no
    module defines. Functions and ranges combine into one scope; everywhere stands alone."""
    names = [f.strip() for f in functions]
    texts = [range_text] if isinstance(range_text, str) else list(range_text or ())
    if everywhere and (names or texts):
        raise ScopeError("--everywhere steps every instruction: do not combine it with --in or --range")
    if everywhere:
        return StepScope("everywhere", "everywhere")
    if not names and not texts:
        raise ScopeError("say where to step: --in FUNCTION, --range LO,HI or --everywhere")
    ranges: list[tuple[int, int]] = [parse_range(t) for t in texts]
    files, main = _file_modules(modules)
    entries = {lo for lo, _ in ranges}
    for module in files:
        # Code jumps into a range at function starts (calls, callbacks, thread starts).
        if not any(lo < module.end and module.start < hi for lo, hi in ranges):
            continue
        index = elf_index(module.path)
        if index is None:
            continue
        starts = {sym.start + module.base for sym in index.function_symbols()}
        inside = {a for a in starts if any(lo <= a < hi for lo, hi in ranges)}
        if not inside:  # stripped: the unwind tables still say where functions start
            starts = {a + module.base for a in _cfi_starts(module.path)}
            inside = {a for a in starts if any(lo <= a < hi for lo, hi in ranges)}
        entries.update(inside)
    for name in names:
        if not name:
            raise ScopeError("--in: empty function name")
        hits: list[tuple[int, int]] = []
        # Symbol tables everywhere; DWARF (inlined instances too) of the user's own modules only:
        # walking a large system library's DWARF takes a minute.
        for module in files:
            try:
                hits.extend(function_ranges(module.path, name, module.base, dwarf=not is_system_path(module.path)))
            except ScopeError:
                continue
        if not hits:
            where = os.path.basename(main.path) if main is not None else "the program"
            close = _close_names(files, name)
            raise ScopeError(f"no function named {name} in {where} or its libraries"
                             + (f"; did you mean {', '.join(close)}?" if close else ""))
        ranges.extend(hits)
        entries.update(lo for lo, _ in hits)
    labels = names + [t.strip() for t in texts]
    kind = "function" if names else "range"
    return StepScope(kind, ",".join(labels), _merge(ranges), tuple(sorted(entries)))
