"""C++ names as gdb shows them in a frame: the linkage name demangled by libiberty (the demangler
gdb and binutils are built with), then without its parameter list (gdb's find_frame_funname
calls cp_remove_params).

gdb demangles a DWARF function's linkage name with DMGL_PARAMS | DMGL_ANSI | DMGL_RET_DROP (a
template function's return type is dropped: dwarf2_physname) and an ELF symbol's with
DMGL_PARAMS | DMGL_ANSI. libiberty's cplus_demangle is exported by binutils' libbfd; where that
library is missing, libstdc++'s __cxa_demangle (the same demangler, without the options) is used
and a template function's return type is then kept."""

from __future__ import annotations

import ctypes
import glob
from collections.abc import Callable
from functools import lru_cache

DMGL_PARAMS = 1 << 0
DMGL_ANSI = 1 << 1
DMGL_RET_DROP = 1 << 6

_Demangler = Callable[[bytes, int], "bytes | None"]


def _libc_free() -> Callable[[int], None]:
    # By soname (glibc's and libstdc++'s): ctypes.util.find_library runs `ldconfig -p` to say it.
    libc = ctypes.CDLL("libc.so.6")
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    return free  # type: ignore[no-any-return]


def _take(ptr: int | None, free: Callable[[int], None]) -> bytes | None:
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr)
    finally:
        free(ptr)


def _bfd_demangler() -> _Demangler | None:
    for path in sorted(glob.glob("/usr/lib/*/libbfd-*-system.so")) + sorted(glob.glob("/usr/lib*/libbfd*.so*")):
        try:
            lib = ctypes.CDLL(path)
            fn = lib.cplus_demangle
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn.restype = ctypes.c_void_p
        free = _libc_free()
        return lambda name, options: _take(fn(name, options), free)
    return None


def _cxa_demangler() -> _Demangler | None:
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_void_p
    free = _libc_free()

    def demangle(name: bytes, options: int) -> bytes | None:
        status = ctypes.c_int()
        return _take(fn(name, None, None, ctypes.byref(status)), free)

    return demangle


@lru_cache(maxsize=1)
def _demangler() -> _Demangler | None:
    try:
        return _bfd_demangler() or _cxa_demangler()
    except OSError:
        return None


@lru_cache(maxsize=65536)
def demangle(name: str, *, drop_return: bool = True) -> str | None:
    """The demangled name with its parameter list, None when `name` is not a mangled C++ name."""
    if not name.startswith("_Z"):
        return None
    fn = _demangler()
    if fn is None:
        return None
    options = DMGL_PARAMS | DMGL_ANSI | (DMGL_RET_DROP if drop_return else 0)
    try:
        out = fn(name.encode("utf-8", "surrogateescape"), options)
    except (OSError, ValueError):
        return None
    return None if out is None else out.decode("utf-8", "replace")


def remove_params(name: str) -> str:
    """`ns::f<int>(int, char) const` -> `ns::f<int>`: the trailing parameter list (and the
    qualifiers after it) removed, as gdb prints a function in a frame. Names without one are
    returned as they are."""
    end = name.rfind(")")
    if end < 0 or name[end + 1 :].strip(" &") not in ("", "const", "volatile", "const volatile"):
        return name
    start = group_start(name, end, "(", ")")
    return name[:start] if start else name


def group_start(text: str, end: int, opening: str, closing: str) -> int | None:
    """Where the bracketed group that `text[end]` (a `closing` bracket) closes begins."""
    depth = 0
    for i in range(end, -1, -1):
        c = text[i]
        if c == closing:
            depth += 1
        elif c == opening:
            depth -= 1
            if depth == 0:
                return i
    return None


# gdb removes the parameter list only from a name its C++ name parser (cp-name-parser.y) can
# parse; on any other it shows the whole demangled name. Measured against gdb 13's frames on the
# corpus of tests/symbols: these constructs are beyond that parser.
_UNPARSED = ("{lambda", "{unnamed", "unsigned __int128", ")::", "<>", "[abi:", "decltype(", "{parm#")


def gdb_removes_params(full: str) -> bool:
    return not any(token in full for token in _UNPARSED)


def frame_name(linkage: str, *, symbol: bool = False) -> str:
    """What gdb's `frame` shows for a function known by this linkage name: for a DWARF function
    (symbol=False) or an ELF symbol (symbol=True). Not a mangled name: unchanged."""
    full = demangle(linkage, drop_return=not symbol)
    if full is None:
        return linkage
    return remove_params(full) if gdb_removes_params(full) else full
