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


_MAKE = """
__name__ = "ualdbg.kepttest"  # (only the classes of ualdbg's modules have their code kept)
import dataclasses, json, sys
import ualdbg.lazyclass as L
compiled = []
real_compile = compile
def counting(source, *args, **kwargs):
    compiled.append(source)
    return real_compile(source, *args, **kwargs)
L.compile = counting  # the module's name for the builtin: what it compiles, not what it reads
from ualdbg.lazyclass import dataclass

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 2
    tags: tuple[str, ...] = dataclasses.field(default=(), compare=False)

p = Point(1, tags=("t",))
with_hash = hash(p) == hash(Point(1)) and p == Point(1)
frozen = False
try:
    p.x = 3
except dataclasses.FrozenInstanceError:
    frozen = True
print(json.dumps({"compiled": len(compiled), "repr": repr(p), "eq_hash": with_hash, "frozen": frozen,
                  "replace": dataclasses.replace(p, y=5).y, "fields": [f.name for f in dataclasses.fields(Point)]}))
"""


def _make_in_fresh_python(cache: str) -> dict[str, object]:
    import json
    import os

    env = {**os.environ, "XDG_CACHE_HOME": cache}
    done = subprocess.run([sys.executable, "-c", _MAKE], capture_output=True, text=True, check=True, env=env, timeout=60)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_methods_compiled_once_are_kept_and_read_only_from_a_file_of_ours(tmp_path: object) -> None:
    """The generated methods' code is kept between runs (issue 34: a light start): a second run
    compiles nothing and makes the same class; a kept file another user could have written, or
    garbled, is not read (the methods are compiled again and the file replaced)."""
    import os
    from pathlib import Path

    cache = Path(str(tmp_path)) / "cache"
    first = _make_in_fresh_python(str(cache))
    kept = list((cache / "ualdbg").glob("dataclass-code.*/ualdbg.kepttest.marshal"))
    assert first["compiled"] >= 4 and len(kept) == 1  # __init__, __repr__, __eq__, __hash__, the frozen guards
    assert oct(kept[0].stat().st_mode & 0o777) == "0o600" and oct(kept[0].parent.stat().st_mode & 0o777) == "0o700"
    second = _make_in_fresh_python(str(cache))
    assert second["compiled"] == 0 and {**second, "compiled": 0} == {**first, "compiled": 0}
    assert first["repr"].endswith("Point(x=1, y=2, tags=('t',))") and first["eq_hash"] and first["frozen"]
    assert first["replace"] == 5 and first["fields"] == ["x", "y", "tags"]
    os.chmod(kept[0], 0o666)  # anyone could have written it
    assert _make_in_fresh_python(str(cache))["compiled"] == first["compiled"]
    assert oct(kept[0].stat().st_mode & 0o777) == "0o600"
    kept[0].write_bytes(b"\xe3garbled")
    assert _make_in_fresh_python(str(cache)) == first
    assert _make_in_fresh_python(str(cache))["compiled"] == 0
    os.chmod(kept[0].parent, 0o777)  # the folder open to all: closed again, as the agent's build folder is
    assert _make_in_fresh_python(str(cache))["compiled"] == 0
    assert oct(kept[0].parent.stat().st_mode & 0o777) == "0o700"
    outside = _MAKE.replace('__name__ = "ualdbg.kepttest"', '__name__ = "notualdbg"')
    import json as json_
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    for _ in range(2):  # a class of another module's: exec compiles it, as in the standard library; nothing kept
        done = subprocess.run([sys.executable, "-c", outside], capture_output=True, text=True, check=True, env=env)
        assert {**json_.loads(done.stdout), "compiled": 0} == {**first, "compiled": 0}
        assert json_.loads(done.stdout)["compiled"] == 0
    assert sorted(p.name for p in kept[0].parent.iterdir()) == ["ualdbg.kepttest.marshal"]
