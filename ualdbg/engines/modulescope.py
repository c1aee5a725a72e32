"""Which modules' faults count (the user's scope), apart from the fault path that uses it: the
agent engine decides the scope of a run that faulted only outside it without importing the
decoder or the symbolizer (issue 34)."""
from __future__ import annotations

from ..core.model import Module
from ..lazyclass import dataclass


@dataclass
class Scope:
    """Which modules count: the main executable and non-system libraries by default."""

    all_modules: bool = False
    modules: tuple[str, ...] = ()

    def includes(self, module: Module | None, system: bool) -> bool:
        if self.all_modules or module is None:
            return True
        if module.name in self.modules or module.path in self.modules:
            return True
        return not system

    def describe(self) -> str:
        if self.all_modules:
            return "all modules"
        extra = f" plus {', '.join(self.modules)}" if self.modules else ""
        return f"the program and its non-system libraries{extra}"
