"""Address intervals looked up by bisection: the one structure behind the module, symbol,
compile-unit, line-sequence and scope tables of the symbols package."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class IntervalTable(Generic[T]):
    """Half-open `[start, end)` intervals, each carrying a value; built once, then read-only.

    Intervals may overlap: `find` returns the containing interval with the greatest start, and
    among equal starts the shortest one, which is the innermost one when intervals nest.
    """

    __slots__ = ("_ends", "_reach", "_starts", "_values")

    def __init__(self, items: Iterable[tuple[int, int, T]]) -> None:
        rows = sorted(
            ((start, end, value) for start, end, value in items if start < end),
            key=lambda row: (row[0], -row[1]),
        )
        self._starts = [row[0] for row in rows]
        self._ends = [row[1] for row in rows]
        self._values = [row[2] for row in rows]
        # _reach[i] = max(end[0..i]): lets `find` stop walking left as soon as no earlier
        # interval can still cover the address, so disjoint tables cost one bisection.
        self._reach: list[int] = []
        reach = 0
        for end in self._ends:
            reach = max(reach, end)
            self._reach.append(reach)

    def __len__(self) -> int:
        return len(self._starts)

    def find(self, addr: int) -> T | None:
        hit = self.find_interval(addr)
        return None if hit is None else hit[2]

    def find_interval(self, addr: int) -> tuple[int, int, T] | None:
        i = bisect_right(self._starts, addr) - 1
        while i >= 0 and self._reach[i] > addr:
            if self._ends[i] > addr:
                return self._starts[i], self._ends[i], self._values[i]
            i -= 1
        return None
