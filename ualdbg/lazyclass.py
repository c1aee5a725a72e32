"""`dataclass`, made when first used: the standard library's, run the first time the class is
instantiated or its fields are asked for, not when its module is imported (issue 34).

Python 3.11's `dataclasses.dataclass` compiles each generated method (`__init__`, `__repr__`,
`__eq__`, a frozen class's `__setattr__` and `__delattr__`, `__hash__`) from source: about 0.9 ms a
class. ualdbg's data model has some 120 of them, and `ualdbg trace -- /bin/true` imported 55, half
of its imports' time, to instantiate a third. Here the class is left as written, with two stand-ins
that make it a dataclass on first use, then step aside:

- `__init__`, which makes the class (and, through the next stand-in, its dataclass bases) and
  calls the real one;
- `__dataclass_fields__`, read through a descriptor: `dataclasses.fields`, `is_dataclass`,
  `asdict` and the processing of a subclass read it, and get the made class's.

Any instance was made through `__init__` (or copied from one that was), so `__repr__`, `__eq__`,
`__hash__` and a frozen class's guards exist before any instance does. Unpickling makes instances
without `__init__`: ualdbg pickles none. `slots=True` makes a new class: such a class is made at
once, and so is one that writes its own `__init__`. The result is the standard library's
dataclass, the same methods.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T", bound=type)
_FIELDS = "__dataclass_fields__"
_lock = threading.RLock()
_pending: dict[type, dict[str, Any]] = {}  # class -> the options it was declared with


def made(cls: type) -> type:
    """`cls` as a dataclass now (and its pending dataclass bases first, through their fields)."""
    with _lock:
        options = _pending.pop(cls, None)
        if options is None:
            return cls
        for name in ("__init__", _FIELDS):
            if name in cls.__dict__ and isinstance(cls.__dict__[name], (_Init, _Fields)):
                delattr(cls, name)
        return dataclasses.dataclass(cls, **options)


class _Init:
    """The class's `__init__` until it is made: makes it, then runs the real one."""

    def __init__(self, owner: type) -> None:
        self.owner = owner

    def __get__(self, obj: object, objtype: type | None = None) -> Callable[..., None]:
        made(self.owner)
        real = self.owner.__dict__["__init__"]  # (the generated function)
        return real if obj is None else real.__get__(obj, objtype)  # type: ignore[no-any-return]


class _Fields:
    """The class's `__dataclass_fields__` until it is made: asking for them makes it."""

    def __init__(self, owner: type) -> None:
        self.owner = owner

    def __get__(self, obj: object, objtype: type | None = None) -> dict[str, dataclasses.Field[Any]]:
        made(self.owner)
        fields: dict[str, dataclasses.Field[Any]] = getattr(self.owner, _FIELDS)
        return fields


@overload
def dataclass(cls: _T, /) -> _T: ...


@overload
def dataclass(*, init: bool = True, repr: bool = True, eq: bool = True, order: bool = False,
              unsafe_hash: bool = False, frozen: bool = False, match_args: bool = True, kw_only: bool = False,
              slots: bool = False) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(cls: _T | None = None, /, **options: Any) -> Any:
    """As `dataclasses.dataclass`, the class made on first use (module docstring)."""

    def wrap(c: _T) -> _T:
        if options.get("slots") or not options.get("init", True) or "__init__" in c.__dict__:
            return dataclasses.dataclass(c, **options)  # type: ignore[return-value]
        with _lock:
            _pending[c] = options
            setattr(c, "__init__", _Init(c))  # noqa: B010 (mypy forbids assigning a method)
            setattr(c, _FIELDS, _Fields(c))
        return c

    return wrap if cls is None else wrap(cls)
