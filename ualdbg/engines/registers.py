"""A stopped thread's registers, and the stack pointers of every thread, read from the debugger
only when a decoder or a data description asks for them (most faults need two or three)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..core.target import Target


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
