"""The traced process as the symbols see it: its module map (read from /proc/PID/maps, again on
a miss after a dlopen), each PC's module and whether it is a system one (what the scope decides
on), and the symbolizer that names each PC's function and source line, all cached per PC."""
from __future__ import annotations

from ..core.model import Module, SourceLoc
from ..core.target import Target
from ..symbols.maps import ModuleMap
from ..symbols.resolver import Symbolizer


class ProcessImage:
    """The modules and source locations of the process a debugger session traces."""

    def __init__(self) -> None:
        self._modmap: ModuleMap | None = None
        self._modmap_pid: int | None = None
        self._pc_scope: dict[int, tuple[Module | None, bool]] = {}
        self.symbolizer: Symbolizer | None = None
        self.locs: dict[int, SourceLoc] = {}

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
        """The source location of a PC, named once (with the module map of its first fault)."""
        loc = self.locs.get(pc)
        if loc is None:
            loc = self.symbolizer.resolve(pc) if self.symbolizer else SourceLoc(pc=pc)
            self.locs[pc] = loc
        return loc

    def source_line(self, loc: SourceLoc) -> str | None:
        """The text of a location's source line, when its file can be read."""
        if not (loc.file and loc.line) or self.symbolizer is None:
            return None
        return self.symbolizer.source_line(loc.file, loc.line)

    def new_process(self) -> None:
        """A run, an attach or an exec: addresses mean something new (the source locations
        already named stay: they are the trace's)."""
        self._pc_scope.clear()
        self._modmap = None
