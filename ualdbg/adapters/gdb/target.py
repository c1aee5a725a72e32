"""ualdbg's Target protocol over gdb's Python API (gdb 12 or newer)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import gdb  # type: ignore[import-not-found]

from ...core.target import (
    FloatBits,
    FloatMover,
    InferiorCalls,
    LiveThreads,
    MemoryWriter,
    RegisterBatch,
    SigInfo,
    StringCalls,
    SymbolLookup,
    Target,
)
from ...isa import arch as archmod
from ...symbols.maps import read_maps
from .ptrace import RegisterPoker
from .threadhold import ThreadHolder

MASK64 = (1 << 64) - 1


@contextmanager
def scheduler_locked(on: bool = True) -> Iterator[None]:
    """Only the selected thread runs in what the block resumes (a `stepi`, a call): gdb's
    default (`replay`) resumes every thread for both. The user's setting back afterwards."""
    if not on:
        yield
        return
    m = re.search(r'"(\w+)"', str(gdb.execute("show scheduler-locking", to_string=True)))
    gdb.execute("set scheduler-locking on", to_string=True)
    try:
        yield
    finally:
        gdb.execute(f"set scheduler-locking {m.group(1) if m else 'replay'}", to_string=True)


class GdbTarget(Target, MemoryWriter, RegisterBatch, FloatMover, FloatBits, InferiorCalls, StringCalls, SymbolLookup,
                LiveThreads):
    """A stopped process seen through gdb, with every optional capability of core/target.py
    but FaultStepper (named among the bases, so that mypy checks each signature)."""

    debugger = "gdb"

    def __init__(self) -> None:
        self._arch: str | None = None
        # While a catchpoint condition runs, gdb has the stopped thread and its frame 0 selected:
        # cache the thread and the registers read, instead of asking gdb again per register
        # (the profile in docs/PERFORMANCE.md).
        self._event_tid: int | None = None
        self.in_stop_callback = False  # set by the hooks while a breakpoint's stop() runs
        self._regs: dict[str, int] = {}
        self._poker = RegisterPoker()
        # (pid, True when gdb ptraces it natively): a remote stub's process is no tracee of ours
        self._native: tuple[int, bool] | None = None
        # Non-stop mode: threads gdb sees running, held stopped by ualdbg for one command
        # (threadhold.py); their registers go by ptrace.
        self.held: dict[int, ThreadHolder] = {}

    @contextmanager
    def event(self) -> Iterator[None]:
        self._event_tid = int(gdb.selected_thread().ptid[1])
        self._regs = {}
        try:
            yield
        finally:
            self._event_tid = None
            self._regs = {}

    def _in_event(self, tid: int | None) -> bool:
        return self._event_tid is not None and (tid is None or tid == self._event_tid)

    def pid(self) -> int | None:
        inf = gdb.selected_inferior()
        return inf.pid or None

    def arch(self) -> str:
        if self._arch is None:
            try:
                self._arch = gdb.newest_frame().architecture().name()
            except gdb.error:  # non-stop: the selected thread is running
                self._arch = gdb.selected_inferior().architecture().name()
            if self._arch.startswith("mips"):
                # gdb names big- and little-endian MIPS alike: the byte order it uses tells them apart.
                little = "little endian" in gdb.execute("show endian", to_string=True)
                self._arch += "/el" if little else "/eb"
        return self._arch

    def current_tid(self) -> int:
        if self._event_tid is not None:
            return self._event_tid
        return int(gdb.selected_thread().ptid[1])

    def threads(self) -> list[int]:
        """The threads whose registers can be read now: in non-stop mode not those running,
        unless ualdbg holds them (holding.py: Holding.hold_running). The thread whose event a condition or a
        breakpoint's stop() decides counts as stopped: gdb calls it running until the stop is
        final."""
        event = self._event_tid
        if event is None and self.in_stop_callback:
            event = int(gdb.selected_thread().ptid[1])
        return sorted(int(t.ptid[1]) for t in gdb.selected_inferior().threads()
                      if t.is_valid() and (not t.is_running() or int(t.ptid[1]) in self.held
                                           or int(t.ptid[1]) == event))

    def live_threads(self) -> list[int]:
        """Every thread of the process, running or not (non-stop mode)."""
        return sorted(int(t.ptid[1]) for t in gdb.selected_inferior().threads() if t.is_valid())

    def running_threads(self) -> list[int]:
        return sorted(int(t.ptid[1]) for t in gdb.selected_inferior().threads() if t.is_valid() and t.is_running())

    def _holder(self, tid: int | None) -> tuple[ThreadHolder, int] | None:
        if not self.held:
            return None
        t = tid if tid is not None else self.current_tid()
        holder = self.held.get(t)
        return (holder, t) if holder is not None else None

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
                # gdb evaluates a condition with frame 0 of the stopped thread selected, so `$reg`
                # is the live register: ~6 us each, where newest_frame() alone costs ~45 us
                # (it computes the frame's id, running the unwinder sniffers).
                value = self._regs[name] = int(gdb.parse_and_eval(f"${name}")) & MASK64
            return value
        held = self._holder(tid)
        if held is not None:
            return held[0].read(held[1], name)
        with self._on_thread(tid):
            return int(gdb.newest_frame().read_register(name)) & MASK64

    def _poke(self, values: dict[str, int]) -> bool:
        """Within an event on a native x86-64 process: write by ptrace, then have gdb forget its
        register and frame caches (ualdbg/adapters/gdb/ptrace.py says why: ~40 us instead of ~90)."""
        inf = gdb.selected_inferior()
        if self._native is None or self._native[0] != inf.pid:
            conn = getattr(inf, "connection", None)
            self._native = (inf.pid, conn is not None and conn.type == "native" and "x86-64" in self.arch()
                            and self._poker.covers(("rip",)))
        if not self._native[1] or not self._poker.covers(values) or self._event_tid is None:
            return False
        if not self._poker.poke(self._event_tid, values):
            return False
        gdb.execute("maint flush register-cache")
        return True

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        if self._in_event(tid):
            if not self._poke({name: value}):
                gdb.parse_and_eval(f"${name} = {value:#x}")
            self._regs[name] = value
            return
        held = self._holder(tid)
        if held is not None:
            held[0].write(held[1], {name: value})
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
            if not self._poke(values):
                gdb.parse_and_eval(expr)
            self._regs.update(values)
            return
        held = self._holder(tid)
        if held is not None:
            held[0].write(held[1], values)
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
            try:
                signo = archmod.arch_info(self.arch()).host_signo(signo)
            except ValueError:
                pass  # an architecture ualdbg does not know: its numbers as they are
            code = int(si["si_code"])
            addr = None
            if signo in (7, 11, 4, 8, 5):
                addr = int(si["_sifields"]["_sigfault"]["si_addr"]) & MASK64
            return SigInfo(signo, code, addr)
        except gdb.error:
            return None

    def can_call_functions(self) -> bool:
        """gdb runs no inferior call from a breakpoint's stop method or a catchpoint condition."""
        return self._event_tid is None and not self.in_stop_callback

    def symbol_address(self, name: str) -> int | None:
        try:
            return int(gdb.parse_and_eval(f"(long)&{name}")) & MASK64
        except gdb.error:
            return None

    def call_function(self, addr: int, args: list[int]) -> int:
        """Call the program's function at `addr` with integer arguments (prctl on Alpha under
        qemu-user; on native x86-64 gdb 13 cannot make inferior calls on this VM: PLATFORM.md)."""
        text = ", ".join(f"(long){a:#x}" for a in args)
        proto = ", ".join("long" for _ in args)
        return int(gdb.parse_and_eval(f"((long (*)({proto})){addr:#x})({text})")) & MASK64

    def call_with_strings(self, addr: int, args: list[int | bytes], alone: bool = False, tid: int | None = None) -> int:
        """Call the function at `addr`; gdb places each string literal in the program's memory
        (value_coerce_to_target) before the call. gdb runs every thread during a call unless the
        scheduler is locked (`alone`)."""
        texts, protos = [], []
        for a in args:
            if isinstance(a, bytes):
                texts.append('"' + "".join(chr(b) if b < 128 and chr(b).isalnum() or chr(b) in "/._-" else f"\\{b:03o}" for b in a) + '"')
                protos.append("const char *")
            else:
                texts.append(f"(long){a:#x}")
                protos.append("long")
        try:
            with self._on_thread(tid), scheduler_locked(alone):
                value = gdb.parse_and_eval(f"((long (*)({', '.join(protos) or 'void'})){addr:#x})({', '.join(texts)})")
        except gdb.error as exc:
            raise RuntimeError(str(exc)) from None
        return int(value) & MASK64

    def move_float(self, reg: str, addr: int, size: int, store: bool, tid: int | None = None) -> None:
        """Copy a floating-point register to or from memory as one C float/double: gdb moves
        the bits unchanged and in the target's byte order (the fix-up of SPARC's lddf/stdf)."""
        ctype = "float" if size == 4 else "double"
        expr = f"*({ctype} *){addr:#x} = ${reg}" if store else f"${reg} = *({ctype} *){addr:#x}"
        if self._in_event(tid):
            gdb.parse_and_eval(expr)
            return
        with self._on_thread(tid):
            gdb.parse_and_eval(expr)

    def float_bits(self, reg: str, tid: int | None = None) -> int:
        """A floating-point register's bits as an integer (gdb 13's /x of a float is its bytes;
        an ARM d register with NEON is gdb's union neon_d: its u64 member, the raw bits)."""
        def read() -> int:
            value = gdb.parse_and_eval(f"${reg}")
            if _raw_union(value.type):
                return int(value["u64"]) & MASK64
            return int(value.format_string(format="x"), 16)

        if self._in_event(tid):
            return read()
        with self._on_thread(tid):
            return read()

    def set_float_bits(self, reg: str, bits: int, tid: int | None = None) -> None:
        """Set a floating-point register to these bits, unchanged (a value of its own type made
        from the bytes, assigned: no conversion; ARM's union neon_d d registers: their u64)."""
        def write() -> None:
            current = gdb.parse_and_eval(f"${reg}")
            if _raw_union(current.type):
                gdb.parse_and_eval(f"${reg}.u64 = {bits & MASK64:#x}")
                return
            order = "little" if "little endian" in gdb.execute("show endian", to_string=True) else "big"
            size = current.type.sizeof
            gdb.set_convenience_variable("ualdbg_bits", gdb.Value(bits.to_bytes(size, order), current.type))  # type: ignore[arg-type]
            gdb.parse_and_eval(f"${reg} = $ualdbg_bits")

        if self._in_event(tid):
            write()
            return
        with self._on_thread(tid):
            write()

    def remote(self) -> bool:
        """Connected to a gdb stub (qemu-user): the pid is the stub's, /proc is not the program's."""
        conn = getattr(gdb.selected_inferior(), "connection", None)
        return conn is not None and conn.type in ("remote", "extended-remote")

    def maps_text(self) -> str | None:
        pid = self.pid()
        if pid is None:
            return None
        if self.remote():
            return remote_maps_text()
        try:
            return read_maps(pid)
        except OSError:
            return None


def _raw_union(t: gdb.Type) -> bool:
    """gdb's type of an ARM d register when the target has NEON (union neon_d: u8, .., u64,
    f32, f64), whose u64 member holds the register's bits as they are."""
    t = t.strip_typedefs()
    return bool(t.code == gdb.TYPE_CODE_UNION and any(f.name == "u64" for f in t.fields()))


def remote_maps_text() -> str | None:
    """The program's mappings under qemu-user: qemu 9+'s stub serves the guest's own (libraries,
    heap, stack); qemu 7.2's does not, and then the main program's come from its ELF and the
    load bias gdb applied (the relocated entry point `info files` shows, less e_entry)."""
    from ...engines.qemu import elf_entry, maps_from_elf
    from ...symbols.maps import mappings_from_gdb_table

    try:
        text = mappings_from_gdb_table(gdb.execute("info proc mappings", to_string=True))
        if text:
            return text
    except gdb.error:
        pass
    path = gdb.current_progspace().filename
    if not path:
        return None
    try:
        entry, pie = elf_entry(path)
        bias = 0
        if pie:
            m = re.search(r"Entry point: (0x[0-9a-f]+)", gdb.execute("info files", to_string=True))
            bias = int(m.group(1), 16) - entry if m else 0
        return maps_from_elf(path, bias)
    except (OSError, gdb.error, ValueError):
        return None
