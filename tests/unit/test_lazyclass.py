"""ualdbg.lazyclass: a dataclass made on first use behaves as the standard library's, made at once."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from dataclasses import field

import pytest

from ualdbg.lazyclass import _pending, dataclass


def _pair(**options: object) -> tuple[type, type]:
    """The same class, lazy and eager."""

    def body() -> type:
        class Point:
            x: int
            y: int = 2
            tags: list[str] = field(default_factory=list)

            def norm(self) -> int:
                return abs(self.x) + abs(self.y)

        return Point

    return dataclass(**options)(body()), dataclasses.dataclass(**options)(body())  # type: ignore[call-overload]


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"order": True}, {"frozen": True, "eq": False}])
def test_the_same_class_as_the_standard_librarys(options: dict[str, object]) -> None:
    lazy, eager = _pair(**options)
    assert lazy in _pending  # nothing made at declaration
    a, b = lazy(1, tags=["t"]), eager(1, tags=["t"])
    assert lazy not in _pending
    assert repr(a).replace("lazy", "") == repr(b) and a.norm() == b.norm() == 3
    assert [f.name for f in dataclasses.fields(a)] == [f.name for f in dataclasses.fields(b)] == ["x", "y", "tags"]
    assert dataclasses.asdict(a) == dataclasses.asdict(b) == {"x": 1, "y": 2, "tags": ["t"]}
    assert (a == lazy(1, tags=["t"])) == (b == eager(1, tags=["t"]))
    assert (lazy.__hash__ is None) == (eager.__hash__ is None)
    if options.get("frozen"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.x = 5
    assert dataclasses.replace(a, x=7).x == 7
    with pytest.raises(TypeError):
        lazy()  # x is required, as in the standard library's


def test_fields_asked_before_any_instance() -> None:
    lazy, _ = _pair()
    assert dataclasses.is_dataclass(lazy) and [f.name for f in dataclasses.fields(lazy)] == ["x", "y", "tags"]
    assert lazy(3).y == 2


def test_subclasses_lazy_eager_and_plain() -> None:
    @dataclass(frozen=True)
    class Base:
        a: int
        b: str = "b"

    @dataclass(frozen=True)
    class Lazy(Base):
        c: float = 1.0

    class Plain(Base):
        pass

    assert Base in _pending and Lazy in _pending

    @dataclasses.dataclass(frozen=True)  # a subclass made at once reads its base's fields: the base is made
    class Eager(Base):
        d: int = 4

    assert Base not in _pending and Lazy in _pending
    assert Lazy(1, "x", 2.0) == Lazy(a=1, b="x", c=2.0) and repr(Lazy(1)).endswith("Lazy(a=1, b='b', c=1.0)")
    assert Eager(5).d == 4 and Plain(6).a == 6 and Plain(6) == Plain(6) and hash(Plain(6)) == hash(Plain(6))


def test_an_own_init_or_slots_is_made_at_once() -> None:
    @dataclass
    class Own:
        x: int

        def __init__(self, v: int) -> None:
            self.x = v * 2

    @dataclass(slots=True)
    class Slotted:
        x: int

    assert Own not in _pending and Slotted not in _pending
    assert Own(2).x == 4 and repr(Own(2)).endswith("Own(x=4)") and Slotted(1).__slots__ == ("x",)


def test_made_once_by_racing_threads() -> None:
    lazy, _ = _pair()
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(lazy(1))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g == lazy(1) for g in got)


def test_the_cli_imports_its_classes_unmade() -> None:
    """The point (issue 34): importing the shell's commands makes none of the classes they
    declare; `trace` makes only those it instantiates."""
    code = ("import ualdbg.lazyclass as L, ualdbg.cli.shell, ualdbg.engines.agent; "
            "from ualdbg.core.result import TraceResult; print(len(L._pending), TraceResult in L._pending)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) >= 40 and out[1] == "True", out
