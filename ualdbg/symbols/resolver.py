"""PC -> SourceLoc for a running program: the module map gives module and link-time offset,
the module's ELF index gives function, file:line and inline chain. Also the source text
of a line, for reports. Both are cached."""

from __future__ import annotations

import os
from collections.abc import Callable

from ualdbg.core.model import InlineFrame, SourceLoc
from ualdbg.symbols.dwarfindex import SourcePos
from ualdbg.symbols.elfindex import ElfIndex, elf_index
from ualdbg.symbols.maps import PSEUDO_MODULES, ModuleMap


class Symbolizer:
    """Resolves runtime PCs of one address space. Results are cached per PC and dropped when
    the module map changes (a library unloaded and another loaded in its place)."""

    def __init__(
        self,
        modules: ModuleMap,
        *,
        index_for: Callable[[str], ElfIndex | None] = elf_index,
    ) -> None:
        self.modules = modules
        self._index_for = index_for
        self._indexes: dict[str, ElfIndex | None] = {}
        self._locs: dict[int, SourceLoc] = {}
        self._generation = modules.generation
        # display path -> absolute path, learned from the DWARF the resolved PCs came from
        self._paths: dict[str, str] = {}
        self._sources: dict[str, list[str] | None] = {}

    def _index(self, path: str) -> ElfIndex | None:
        if path not in self._indexes:
            self._indexes[path] = None if path in PSEUDO_MODULES else self._index_for(path)
        return self._indexes[path]

    def resolve(self, pc: int) -> SourceLoc:
        """Module+offset always (when the PC is mapped), function+offset from DWARF or the
        symbol tables, file:line and the inline chain from DWARF.

        When the PC sits in an inlined helper, `function` is the helper and
        `function_offset` counts from the start of the helper's inlined copy (the address
        range holding the PC); `inlined_from` then names the callers outward, each with the
        file:line of the call, the last one being the function the code physically lives in.
        """
        if self._generation != self.modules.generation:
            self._forget()
        loc = self._locs.get(pc)
        if loc is not None:
            return loc
        module = self.modules.find(pc)
        if self._generation != self.modules.generation:  # find() re-read the maps
            self._forget()
        if module is None:
            loc = SourceLoc(pc=pc)
        else:
            loc = self._resolve_in(pc, module.path, pc - module.base)
        self._locs[pc] = loc
        return loc

    def _resolve_in(self, pc: int, path: str, offset: int) -> SourceLoc:
        index = self._index(path)
        if index is None:
            return SourceLoc(pc=pc, module=path, offset=offset)
        info = index.lookup(offset)
        self._learn(info.pos)
        for caller in info.inlined_from:
            self._learn(caller.pos)
        return SourceLoc(
            pc=pc,
            module=path,
            offset=offset,
            function=info.function,
            function_offset=None if info.function_start is None else offset - info.function_start,
            file=None if info.pos is None else info.pos.file,
            line=None if info.pos is None else info.pos.line,
            path=None if info.pos is None else info.pos.path,
            inlined_from=tuple(
                InlineFrame(
                    function=caller.function,
                    file=None if caller.pos is None else caller.pos.file,
                    line=None if caller.pos is None else caller.pos.line,
                    path=None if caller.pos is None else caller.pos.path,
                )
                for caller in info.inlined_from
            ),
        )

    def _learn(self, pos: SourcePos | None) -> None:
        if pos is not None:
            self._paths.setdefault(pos.file, pos.path)

    def _forget(self) -> None:
        self._locs.clear()
        self._indexes.clear()
        self._generation = self.modules.generation

    def source_path(self, file: str) -> str | None:
        """Absolute path of a file named in a resolved SourceLoc (relative names are kept
        relative to their compilation directory, which only the DWARF knows)."""
        path = self._paths.get(file)
        if path is not None:
            return path
        return file if os.path.isabs(file) else None

    def source_line(self, file: str, line: int) -> str | None:
        """The text of `file:line` without its line ending, None when it cannot be read."""
        path = self.source_path(file)
        if path is None or line < 1:
            return None
        if path not in self._sources:
            try:
                # Count lines the way compilers do, by "\n" only: splitlines() would also
                # split on form feeds and lone CRs and shift every line after them.
                with open(path, encoding="utf-8", errors="replace", newline="") as f:
                    self._sources[path] = [text.rstrip("\r") for text in f.read().split("\n")]
            except OSError:
                self._sources[path] = None
        lines = self._sources[path]
        if lines is None or line > len(lines):
            return None
        return lines[line - 1]
