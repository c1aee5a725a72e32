"""The Target protocol: everything an engine needs from a debugger (gdb, lldb) or tracer, and
nothing debugger-specific. Adapters implement it; the core only talks to this."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SigInfo:
    signo: int
    code: int
    addr: int | None  # si_addr; NULL for x86 #AC


class Target(Protocol):
    """A stopped process seen through a debugger. `tid=None` means the thread that stopped."""

    debugger: str  # "gdb" | "lldb"

    def pid(self) -> int | None: ...

    def arch(self) -> str: ...

    def current_tid(self) -> int: ...

    def threads(self) -> list[int]: ...

    def read_register(self, name: str, tid: int | None = None) -> int: ...

    def write_register(self, name: str, value: int, tid: int | None = None) -> None: ...

    def read_memory(self, addr: int, size: int) -> bytes: ...

    def siginfo(self) -> SigInfo | None: ...

    def maps_text(self) -> str | None:
        """The text of /proc/PID/maps, or None when the target has no such file (remote)."""
        ...


class FaultStepper(Protocol):
    """Optional capability of a Target whose debugger cannot be handed an unrequested TF trap
    (lldb: a user's `thread step-over`/`finish` plan claims every trace stop and would single-step
    the rest of the line with AC clear). The adapter then runs the faulting instruction once under
    the debugger's own single-step and calls `TrapEngine.fault_stepped` after it."""

    def step_over_fault(self, tid: int) -> None:
        """Queue one single-step of `tid` for when the process resumes; never resumes itself."""
        ...



@runtime_checkable
class OutOfLineTarget(Protocol):
    """A target that can write code and several registers at once: the trap engine then runs
    a resumed fault out of line (engines/outofline.py), one stop per fault instead of two."""

    def write_memory(self, addr: int, data: bytes) -> None: ...

    def write_registers(self, values: dict[str, int], tid: int | None = None) -> None: ...
