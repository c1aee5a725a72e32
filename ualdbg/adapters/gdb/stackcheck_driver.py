"""The stackcheck measurer inside one gdb batch process: gdb's primitives for the shared loop
(ualdbg.tools.stackcheck.sweep). Every variant is one `run` through ualdbg's exec helper (exact argv and
environment), stopped at main's entry and at each probe (`&NAME`); with --trace the trap engine
(the installed adapter, `ualdbg trace start`) counts its unaligned accesses to its end."""
from __future__ import annotations

from typing import Any

import gdb  # type: ignore[import-not-found]

from ...tools.stackcheck.sweep import SweepError, sweep


def _quiet(cmd: str) -> str:
    return str(gdb.execute(cmd, to_string=True))


def _bp(spec: str) -> Any:
    bp = gdb.Breakpoint(spec, internal=True)
    bp.silent = True
    return bp


class _Stop:
    def __init__(self) -> None:
        self.frame = gdb.selected_frame()

    def pc(self) -> int:
        return int(self.frame.pc())

    def sp(self) -> int:
        return int(self.frame.read_register("sp"))

    def register(self, name: str) -> int:
        return int(self.frame.read_register(name))

    def read_memory(self, addr: int, size: int) -> bytes:
        return bytes(gdb.selected_inferior().read_memory(addr, size))

    def address_of(self, name: str) -> int:
        try:
            return int(gdb.parse_and_eval(f"&{name}"))
        except gdb.error as exc:
            raise SweepError(str(exc)) from None


class GdbSweep:
    name = "gdb"

    def __init__(self, plan: dict[str, Any]) -> None:
        for cmd in ("set pagination off", "set confirm off", "set print inferior-events off", "set print thread-events off",
                    "set auto-load off", "set startup-with-shell on", "set breakpoint pending on"):
            _quiet(cmd)
        self.trace = bool(plan.get("trace"))
        if not self.trace:
            # Measuring needs no shared-library symbols; reading them (libc6-dbg's separate
            # debug files above all) costs ~140 ms per run, the rest ~9 ms. The trap engine
            # needs gdb to know the libraries (thread and syscall catchpoints).
            _quiet("set auto-solib-add off")
            _quiet("set libthread-db-search-path /nonexistent")
        self.hit: list[Any] = []
        gdb.events.stop.connect(self._on_stop)
        self.main_bp = _bp("*main")
        self.probes: dict[Any, str] = {}
        self.session: Any = None
        self.host: Any = None
        if self.trace:
            from ...commands.all import COMMANDS
            from .install import install, installed

            self.session = install()
            self.session.recorder.skip_site_data()  # counts and places only: FaultRecorder.skip_site_data
            self.host, _hooks = installed()
            # The program's own signals go to it as they would without a debugger.
            _quiet("handle all nostop noprint pass")
            COMMANDS[("trace", "start")].invoke(self.host, ["--engine", "trap", "--at", "main"])
            self.session.program.path = plan["program"]

    def _on_stop(self, event: Any) -> None:
        self.hit = list(getattr(event, "breakpoints", []) or [])

    def start(self, variant: dict[str, Any]) -> None:
        _quiet(f"set exec-wrapper {variant['wrapper']}")
        _quiet(f"set disable-randomization {'off' if variant['aslr'] else 'on'}")
        self.hit = []
        try:
            _quiet("run")
        except gdb.error as exc:
            raise SweepError(str(exc)) from None

    def cont(self) -> None:
        self.hit = []
        try:
            _quiet("continue")
        except gdb.error as exc:
            raise SweepError(str(exc)) from None

    def alive(self) -> bool:
        return bool(gdb.selected_inferior().pid)

    def pid(self) -> int:
        return int(gdb.selected_inferior().pid)

    def hits(self) -> set[str]:
        out = {"main"} if self.main_bp in self.hit else set()
        out |= {pid for bp, pid in self.probes.items() if bp in self.hit}
        self.hit = []
        return out

    def stopped(self) -> _Stop:
        return _Stop()

    def add_probe(self, probe_id: str, addr: int) -> None:
        self.probes[_bp(f"*{addr:#x}")] = probe_id

    def clear_probes(self) -> None:
        for bp in self.probes:
            if bp.is_valid():
                bp.delete()
        self.probes.clear()

    def kill(self) -> None:
        _quiet("kill")

    def exit_status(self) -> int | None:
        code = gdb.convenience_variable("_exitcode")
        return None if code is None else int(code)

    def trace_begin(self) -> None:
        if self.trace:
            self.session.buffer.clear()

    def trace_end(self, status: int | None) -> dict[str, Any] | None:
        if not self.trace:
            return None
        from ...core.document import build_document

        self.session.program.exit_status = status
        return build_document(self.session.result())


def main(plan_path: str) -> None:
    sweep(plan_path, GdbSweep)
