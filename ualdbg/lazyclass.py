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

What the standard library compiles is kept: the source of each generated method of a class of
ualdbg's is compiled once per Python bytecode version and kept, beside the agent's builds, in
its module's file (that no one else can write: agent/private.py), as Python keeps a module's
bytecode in __pycache__. The same source gives the same code, so the class is the same; a start
that makes 26 classes spent a third of its instructions compiling them (issue 34).
"""
from __future__ import annotations

import atexit
import dataclasses
import marshal
import os
import threading
from collections.abc import Callable
from types import CodeType
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
        return _make(cls, options)


def _make(cls: type, options: dict[str, Any]) -> type:
    """The standard library's dataclass, its methods' source compiled through the kept code."""
    with _lock:
        own = "exec" not in vars(dataclasses)  # (a base made on the way is inside this one)
        if own:
            dataclasses.exec = _exec  # type: ignore[attr-defined]
        module = cls.__module__  # (a file name: only ualdbg's own modules' code is kept)
        keep = module.split(".")[0] == "ualdbg" and all(part.isidentifier() for part in module.split("."))
        _making.append(module if keep else "")
        try:
            return dataclasses.dataclass(cls, **options)  # type: ignore[no-any-return]
        finally:
            _making.pop()
            if own:
                del dataclasses.exec  # type: ignore[attr-defined]


# The kept code of ualdbg's modules' classes: one file per module (a start reads only the files of
# the modules whose classes it makes), each method's source text -> its code, read on first use;
# what this process compiled is added to its module's file when the process exits.
_MAX_KEPT = 512  # entries of one module's file (its classes' methods, a few versions of them)
_making: list[str] = []  # the module of the class being made (and of the bases made inside it); "": not kept
_code: dict[str, dict[str, CodeType]] = {}  # module -> its kept code
_added: set[str] = set()  # the modules whose kept code this process added to
_where: list[str | None] = []  # the folder, once found (None: no private folder)


def _code_file(module: str) -> str | None:
    if not _where:
        from importlib._bootstrap_external import MAGIC_NUMBER  # (loaded at Python's start)

        from .agent.private import private_dir, user_cache

        magic = int.from_bytes(MAGIC_NUMBER[:2], "little")
        parent = private_dir(user_cache(), exec_needed=False)
        _where.append(None if parent is None else private_dir(os.path.join(parent, f"dataclass-code.{magic}"),
                                                              exec_needed=False))
    return None if _where[0] is None else os.path.join(_where[0], f"{module}.marshal")


def _load(module: str) -> dict[str, CodeType]:
    from .agent.private import trusted_file

    path = _code_file(module)
    if path is not None and trusted_file(path):
        try:
            with open(path, "rb") as f:
                kept = marshal.load(f)
            if isinstance(kept, dict) and all(isinstance(k, str) and isinstance(v, CodeType) for k, v in kept.items()):
                return kept
        except (OSError, EOFError, ValueError, TypeError):
            pass
    return {}


def _save() -> None:
    """Add what this process compiled to its modules' files (each written whole, then renamed
    over the old one)."""
    for module in sorted(_added):
        path = _code_file(module)
        if path is None:
            return
        kept = {**_load(module), **_code[module]}
        if len(kept) > _MAX_KEPT:
            kept = dict(_code[module])
        temp = f"{path}.{os.getpid()}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as f:
                marshal.dump(kept, f)
            os.replace(temp, path)
        except (OSError, ValueError):
            try:
                os.unlink(temp)
            except OSError:
                pass


def _exec(source: str | CodeType, globals: dict[str, Any] | None = None, locals: dict[str, Any] | None = None) -> None:
    """dataclasses' `exec` while ualdbg makes a class: source compiled as exec would compile it
    there (no future flags of this module's), or its code kept from an earlier run (a class of
    ualdbg's modules)."""
    module = _making[-1] if _making else ""
    if not isinstance(source, str) or not module:
        exec(source, globals, locals)  # noqa: S102
        return
    kept = _code.get(module)
    if kept is None:
        kept = _code[module] = _load(module)
    code = kept.get(source)
    if code is None:
        code = kept[source] = compile(source, "<string>", "exec", dont_inherit=True)
        if not _added:
            atexit.register(_save)
        _added.add(module)
    exec(code, globals, locals)  # noqa: S102


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
            return _make(c, options)  # type: ignore[return-value]
        with _lock:
            _pending[c] = options
            setattr(c, "__init__", _Init(c))  # noqa: B010 (mypy forbids assigning a method)
            setattr(c, _FIELDS, _Fields(c))
        return c

    return wrap if cls is None else wrap(cls)
