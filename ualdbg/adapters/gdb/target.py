"""ualdbg's Target protocol over gdb's Python API (gdb 12 or newer)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...symbols.maps import read_maps
from ...target import SigInfo

MASK64 = (1 << 64) - 1


class GdbTarget:
    debugger = "gdb"

    def __init__(self) -> None:
        self._arch: str | None = None
        # While a catchpoint condition runs, gdb has the stopped thread and its frame 0 selected:
        # cache them and the registers read, instead of asking gdb again per register (the
        # profile in docs/PERFORMANCE.md: selected_frame() nine times per fault).
        self._event_tid: int | None = None
        self._frame: Any = None
        self._regs: dict[str, int] = {}

    @contextmanager
    def event(self) -> Iterator[None]:
        self._event_tid = int(gdb.selected_thread().ptid[1])
        self._frame = None
        self._regs = {}
        try:
            yield
        finally:
            self._event_tid = None
            self._frame = None
            self._regs = {}

    def _in_event(self, tid: int | None) -> bool:
        return self._event_tid is not None and (tid is None or tid == self._event_tid)

    def pid(self) -> int | None:
        inf = gdb.selected_inferior()
        return inf.pid or None

    def arch(self) -> str:
        if self._arch is None:
            self._arch = gdb.newest_frame().architecture().name()
        return self._arch

    def current_tid(self) -> int:
        if self._event_tid is not None:
            return self._event_tid
        return int(gdb.selected_thread().ptid[1])

    def threads(self) -> list[int]:
        return sorted(int(t.ptid[1]) for t in gdb.selected_inferior().threads() if t.is_valid())

    @contextmanager
    def _on_thread(self, tid: int | None) -> Iterator[None]:
        """Run with `tid` selected and its innermost frame selected, then put things back: a
        user who typed `up` must not have `set $eflags` land in an outer frame."""
        cur = gdb.selected_thread()
        try:
            frame = gdb.selected_frame()
        except gdb.error:
            frame = None
        switched = False
        if tid is not None and cur is not None and cur.ptid[1] != tid:
            for t in gdb.selected_inferior().threads():
                if t.ptid[1] == tid:
                    t.switch()
                    switched = True
                    break
            else:
                raise gdb.error(f"no thread {tid}")
        try:
            yield
        finally:
            if switched and cur is not None and cur.is_valid():
                cur.switch()
            if frame is not None and frame.is_valid():
                try:
                    frame.select()
                except gdb.error:
                    pass

    def read_register(self, name: str, tid: int | None = None) -> int:
        if self._in_event(tid):
            value = self._regs.get(name)
            if value is None:
                if self._frame is None:
                    self._frame = gdb.newest_frame()
                value = self._regs[name] = int(self._frame.read_register(name)) & MASK64
            return value
        with self._on_thread(tid):
            return int(gdb.newest_frame().read_register(name)) & MASK64

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        if self._in_event(tid):
            gdb.parse_and_eval(f"${name} = {value:#x}")
            self._regs[name] = value
            self._frame = None  # a register write invalidates gdb's frame objects
            return
        with self._on_thread(tid):
            newest = gdb.newest_frame()
            if gdb.selected_frame() != newest:
                newest.select()
            gdb.parse_and_eval(f"${name} = {value:#x}")

    def write_memory(self, addr: int, data: bytes) -> None:
        gdb.selected_inferior().write_memory(addr, data)

    def write_registers(self, values: dict[str, int], tid: int | None = None) -> None:
        """All in one expression: each register write costs gdb a full register store."""
        expr = ", ".join(f"${name} = {value:#x}" for name, value in values.items())
        if self._in_event(tid):
            gdb.parse_and_eval(expr)
            self._regs.update(values)
            self._frame = None
            return
        with self._on_thread(tid):
            newest = gdb.newest_frame()
            if gdb.selected_frame() != newest:
                newest.select()
            gdb.parse_and_eval(expr)

    def read_memory(self, addr: int, size: int) -> bytes:
        inf = gdb.selected_inferior()
        while size > 0:
            try:
                return bytes(inf.read_memory(addr, size))
            except gdb.MemoryError:
                # An instruction near the end of a mapping: read less, up to the page end.
                size = min(size - 1, ((addr | 0xFFF) + 1) - addr)
        return b""

    def siginfo(self) -> SigInfo | None:
        try:
            si = gdb.parse_and_eval("$_siginfo")
            signo = int(si["si_signo"])
            code = int(si["si_code"])
            addr = None
            if signo in (7, 11, 4, 8, 5):
                addr = int(si["_sifields"]["_sigfault"]["si_addr"]) & MASK64
            return SigInfo(signo, code, addr)
        except gdb.error:
            return None

    def maps_text(self) -> str | None:
        pid = self.pid()
        if pid is None:
            return None
        try:
            return read_maps(pid)
        except OSError:
            return None
