"""The target's address space as modules: parse /proc/PID/maps text, group the mappings of each
ELF into a `Module` with its load bias, find the module of an address, and tell the user's
modules from the system's (loader, libc and friends, vdso)."""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ualdbg.core.model import Module

from ..lazyclass import dataclass

if TYPE_CHECKING:
    from ualdbg.symbols.elfindex import ElfIndex


def elf_index(path: str) -> ElfIndex | None:
    """The module's ELF index (symbols/elfindex.py), imported when an ELF is first read: a map
    that only decides scope never reads one (issue 34: pyelftools costs more than a short run)."""
    from ualdbg.symbols.elfindex import elf_index as index

    return index(path)

SYSTEM_DIRS: tuple[str, ...] = (
    "/lib/",
    "/lib32/",
    "/lib64/",
    "/libx32/",
    "/usr/lib/",
    "/usr/lib32/",
    "/usr/lib64/",
    "/usr/libx32/",
    "/usr/libexec/",
)
# Code the kernel maps without a file: symbolizable only from memory, never the user's.
PSEUDO_MODULES: frozenset[str] = frozenset({"[vdso]", "[vsyscall]"})
_LOADER_NAME = re.compile(
    r"^(ld-linux[^/]*\.so[.\d]*|ld\.so[.\d]*|ld64\.so[.\d]*|ld-musl-[^/]*\.so[.\d]*)$"
)
_DELETED = " (deleted)"


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str  # "r-xp"
    offset: int  # file offset of `start`
    dev: str
    inode: int
    path: str  # "" for anonymous memory, "[heap]"-style for pseudo-mappings

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def is_file(self) -> bool:
        return self.path.startswith("/")


def parse_maps(text: str) -> tuple[Mapping, ...]:
    """Parse /proc/PID/maps text; malformed lines are skipped (a debugger may prepend headers)."""
    out: list[Mapping] = []
    for line in text.splitlines():
        # The path is everything after the fifth field, spaces included.
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        try:
            lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
            offset = int(parts[2], 16)
            inode = int(parts[4])
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) == 6 else ""
        out.append(Mapping(lo, hi, parts[1], offset, parts[3], inode, path))
    return tuple(out)


def read_maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def is_loader_path(path: str) -> bool:
    return bool(_LOADER_NAME.match(os.path.basename(path)))


# Debian's cross sysroots (/usr/sparc64-linux-gnu/lib/libc.so.6): a qemu-user program's system.
_CROSS_SYSROOT = re.compile(r"/usr/[a-z0-9_]+-linux-gnu[a-z0-9_]*/lib(32|64)?/")


def mappings_from_gdb_table(text: str) -> str | None:
    """/proc/PID/maps text from gdb's `info proc mappings` table (Start, End, Size, Offset,
    Perms, objfile), which qemu 9+'s stub serves from the guest's own mappings; None when the
    table has no rows."""
    lines = []
    for row in text.splitlines():
        parts = row.split(None, 5)
        if len(parts) < 5 or not parts[0].startswith("0x") or not parts[1].startswith("0x"):
            continue
        try:
            lo, hi, offset = int(parts[0], 16), int(parts[1], 16), int(parts[3], 16)
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) > 5 else ""
        lines.append(f"{lo:x}-{hi:x} {parts[4]} {offset:08x} 00:00 0 {path}".rstrip())
    return "\n".join(lines) + "\n" if lines else None


def is_system_path(path: str) -> bool:
    """Whether a module path belongs to the system: the dynamic loader, anything under the
    library directories, or a kernel pseudo-mapping."""
    if path in PSEUDO_MODULES or path.startswith("["):
        return True
    path = os.path.normpath(path.removesuffix(_DELETED))
    return is_loader_path(path) or path.startswith(SYSTEM_DIRS) or bool(_CROSS_SYSROOT.match(path))


def group_modules(
    mappings: Iterable[Mapping],
    index_for: Callable[[str], ElfIndex | None] = elf_index,
) -> tuple[Module, ...]:
    """One Module per mapped image with code (ELF files, vdso, vsyscall), sorted by start.
    Files mapped without execute permission (locale archives, data) are not modules."""
    groups: list[list[Mapping]] = []
    open_group: dict[str, list[Mapping]] = {}
    for m in mappings:
        if not (m.is_file or m.path in PSEUDO_MODULES):
            continue
        group = open_group.get(m.path)
        # The first segment of a file mapped again from offset 0 with the same permissions is
        # a second image (dlmopen). Offset 0 alone is not enough: in a file smaller than a
        # page the data segment maps offset 0 too, but writable.
        if group is None or (
            m.offset == 0 and any(g.offset == 0 and g.perms == m.perms for g in group)
        ):
            group = []
            groups.append(group)
            open_group[m.path] = group
        group.append(m)
    modules = [_module(g, index_for) for g in groups if any(m.executable for m in g)]
    return tuple(sorted(modules, key=lambda mod: mod.start))


def _module(group: Sequence[Mapping], index_for: Callable[[str], ElfIndex | None]) -> Module:
    first = min(group, key=lambda m: (m.offset, m.start))
    path = first.path
    start = min(m.start for m in group)
    end = max(m.end for m in group)
    if path in PSEUDO_MODULES:
        # The vDSO is linked at 0; vsyscall has no ELF at all. Either way offsets count
        # from the mapping.
        return Module(path=path, base=start, start=start, end=end)
    # A deleted file may have been replaced by a rebuild: its symbols would lie, so the
    # module keeps the " (deleted)" path, finds no ELF and gets module+offset only.
    index = None if path.endswith(_DELETED) else index_for(path)
    if index is not None:
        base = index.load_bias(first.offset, first.start)
    else:
        # Without the ELF assume link-time address == file offset, true of PIEs and shared
        # objects but not of non-PIE executables.
        base = first.start - first.offset
    return Module(path=path, base=base, start=start, end=end)


class ModuleMap:
    """The modules of one address space, looked up by bisection. Built from maps text, from
    a pid (re-read on a miss, so libraries dlopen'ed later are found), or from a reader
    callable for debuggers that expose the mappings another way."""

    def __init__(
        self,
        modules: Iterable[Module] = (),
        *,
        mappings: Iterable[Mapping] = (),
        main: str | None = None,
        reader: Callable[[], str] | None = None,
        index_for: Callable[[str], ElfIndex | None] = elf_index,
    ) -> None:
        self._reader = reader
        self._index_for = index_for
        self._main_path = main
        self.generation = 0  # bumped whenever a refresh changes the modules
        self._interp: str | None = None
        self._set(tuple(sorted(modules, key=lambda mod: mod.start)), tuple(mappings))

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        main: str | None = None,
        reader: Callable[[], str] | None = None,
        index_for: Callable[[str], ElfIndex | None] = elf_index,
    ) -> ModuleMap:
        mappings = parse_maps(text)
        modules = group_modules(mappings, index_for)
        return cls(modules, mappings=mappings, main=main, reader=reader, index_for=index_for)

    @classmethod
    def for_pid(
        cls, pid: int, *, index_for: Callable[[str], ElfIndex | None] = elf_index
    ) -> ModuleMap:
        try:
            main: str | None = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            main = None
        return cls.from_text(
            read_maps(pid), main=main, reader=lambda: read_maps(pid), index_for=index_for
        )

    def _set(self, modules: tuple[Module, ...], mappings: tuple[Mapping, ...]) -> None:
        self.modules = modules
        self._starts = [mod.start for mod in modules]
        self.mappings = tuple(sorted(mappings, key=lambda m: m.start))
        self._mapping_starts = [m.start for m in self.mappings]
        self.main = self._find_main()
        self._interp = None
        self._system: dict[Module, bool] = {}
        if self.main is not None:
            index = self._index_for(self.main.path)
            if index is not None and index.interp is not None:
                self._interp = os.path.realpath(index.interp)

    def refresh(self) -> bool:
        """Re-read the mappings; True when the modules changed (dlopen, dlclose)."""
        if self._reader is None:
            return False
        try:
            text = self._reader()
        except OSError:
            return False
        mappings = parse_maps(text)
        modules = group_modules(mappings, self._index_for)
        changed = modules != self.modules
        self._set(modules, mappings)
        if changed:
            self.generation += 1
        return changed

    def _find_main(self) -> Module | None:
        if self._main_path is not None:
            for module in self.modules:
                if module.path == self._main_path:
                    return module
            # Named through a symlink (a debugger's idea of the file vs the kernel's).
            wanted = os.path.realpath(self._main_path)
            for module in self.modules:
                if module.path.startswith("/") and os.path.realpath(module.path) == wanted:
                    return module
        # The executable is mapped first: below the libraries with or without ASLR, PIE or not.
        return next((m for m in self.modules if m.path.startswith("/")), None)

    def find(self, addr: int, *, refresh: bool = True) -> Module | None:
        """The module whose mappings span `addr`. On a miss the maps are re-read once (when
        there is a reader): the address may be in a library loaded since."""
        module = self._find(addr)
        if module is None and refresh and self._may_have_changed(addr) and self.refresh():
            module = self._find(addr)
        return module

    def _may_have_changed(self, addr: int) -> bool:
        # An address in executable memory that no file backs (JIT code, trampolines) stays
        # moduleless; re-reading maps for each such PC would cost a syscall storm for nothing.
        mapping = self.mapping_at(addr)
        return mapping is None or not mapping.executable or mapping.is_file

    def _find(self, addr: int) -> Module | None:
        i = bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.modules[i].end:
            return self.modules[i]
        return None

    def mapping_at(self, addr: int) -> Mapping | None:
        """The mapping holding a data address (heap, stack, a file), from the last maps read."""
        i = bisect_right(self._mapping_starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def by_path(self, path: str) -> Module | None:
        return next((m for m in self.modules if m.path == path), None)

    def is_system(self, module: Module) -> bool:
        known = self._system.get(module)
        if known is None:
            if self.main is not None and module.path == self.main.path:
                known = False
            else:
                known = is_system_path(module.path) or self._is_interp(module)
            self._system[module] = known
        return known

    def _is_interp(self, module: Module) -> bool:
        # The loader named by the executable's PT_INTERP, wherever it lives (a custom glibc).
        return self._interp is not None and os.path.realpath(module.path) == self._interp

    def in_default_scope(self, module: Module) -> bool:
        """ualdbg's default scope: the main executable and the non-system libraries."""
        return not self.is_system(module)
