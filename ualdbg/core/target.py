"""The debugger interface: everything an engine may ask of a debugger (gdb, lldb) or tracer, and
nothing debugger-specific. Adapters implement it; the layers above core only talk to this.

`Target` is what every adapter offers. Each optional capability is a small runtime-checkable
Protocol below; an engine asks `offers(target, MemoryWriter)` (never getattr on a method
name: tests/unit/test_target_protocol.py fails on that) and mypy then knows the methods. An
adapter declares what it offers by naming the Protocols among its bases, so that mypy checks
each signature (adapters/gdb/target.py, adapters/lldb/target.py).

What each adapter offers:

    capability        gdb   lldb
    Target             x     x
    MemoryWriter       x
    RegisterBatch      x
    OutOfLineTarget    x           (MemoryWriter and RegisterBatch)
    FloatMover         x
    FloatBits          x
    InferiorCalls      x
    StringCalls        x     x     (the agent's injection: dlopen of its path)
    SymbolLookup       x
    LiveThreads        x
    FaultStepper             x     (the hooks' targets, which can queue lldb's own single-step)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from ..lazyclass import dataclass

if TYPE_CHECKING:
    from typing_extensions import TypeIs


@dataclass(frozen=True)
class SigInfo:
    signo: int
    code: int
    addr: int | None  # si_addr; NULL for x86 #AC


class MemoryReader(Protocol):
    """What decoding an instruction reads: a Target, or the code a gone process's agent saved
    (engines/agent.py)."""

    def read_memory(self, addr: int, size: int) -> bytes: ...


class Target(Protocol):
    """A stopped process seen through a debugger. `tid=None` means the thread that stopped."""

    debugger: str  # "gdb" | "lldb"

    def pid(self) -> int | None: ...

    def arch(self) -> str: ...

    def current_tid(self) -> int: ...

    def threads(self) -> list[int]:
        """The threads whose registers can be read now (LiveThreads: all of them)."""
        ...

    def read_register(self, name: str, tid: int | None = None) -> int: ...

    def write_register(self, name: str, value: int, tid: int | None = None) -> None: ...

    def read_memory(self, addr: int, size: int) -> bytes: ...

    def siginfo(self) -> SigInfo | None: ...

    def maps_text(self) -> str | None:
        """The text of /proc/PID/maps, or None when the target has no such file (remote)."""
        ...


# -- optional capabilities ------------------------------------------------------------------------
# Methods of the adapter's class, never attributes set on one instance: `offers` decides once
# per class.

@runtime_checkable
class MemoryWriter(Protocol):
    """Writes the program's memory: the fix-up engine performs a store (and a load's
    write-back) with it, the trap engine writes its out-of-line slots. gdb."""

    def write_memory(self, addr: int, data: bytes) -> None: ...


@runtime_checkable
class RegisterBatch(Protocol):
    """Writes several registers of one thread at once (each write_register costs gdb a full
    register store): the fix-up engine's results and the PC after the instruction. Without it
    they go one write_register each. gdb."""

    def write_registers(self, values: dict[str, int], tid: int | None = None) -> None: ...


@runtime_checkable
class OutOfLineTarget(MemoryWriter, RegisterBatch, Protocol):
    """A target that can write code and several registers at once: the trap engine then runs
    a resumed fault out of line (engines/outofline.py), one stop per fault instead of two. gdb."""


@runtime_checkable
class FloatMover(Protocol):
    """Copies a floating-point register to or from memory as one C float or double, bit-exact
    in the target's byte order: the fix-up of SPARC's lddf/stdf, PA-RISC's fldd, ARM's vldr.
    Without it such a fault is not performed (the program gets its SIGBUS). gdb."""

    def move_float(self, reg: str, addr: int, size: int, store: bool, tid: int | None = None) -> None: ...


@runtime_checkable
class FloatBits(Protocol):
    """A floating-point register's raw bits as an integer, read and written without conversion:
    the fix-up of ARM's NEON vldN/vstN lanes and of MIPS64's lwc1/swc1 with FR=1. gdb."""

    def float_bits(self, reg: str, tid: int | None = None) -> int: ...

    def set_float_bits(self, reg: str, bits: int, tid: int | None = None) -> None: ...


@runtime_checkable
class InferiorCalls(Protocol):
    """Runs a function of the program (prctl(PR_SET_UNALIGN) on Alpha, PA-RISC and SH, to arm
    and to restore). Without it, or while `can_call_functions()` is False (gdb inside a
    breakpoint's stop or a catchpoint condition), the fix-up engine redirects the thread into
    prctl instead. gdb."""

    def can_call_functions(self) -> bool:
        """Whether a call can run now."""
        ...

    def call_function(self, addr: int, args: list[int]) -> int:
        """Call the function at `addr` with integer arguments; its return value."""
        ...


@runtime_checkable
class StringCalls(Protocol):
    """Runs a function of the program with integer and string arguments, each string placed in
    the program's memory by the debugger (as its expression evaluator places a literal): the
    agent's injection, `dlopen(path, RTLD_NOW)` then `ualdbg_agent_inject(config)`
    (engines/agentlink.py). gdb and lldb."""

    def call_with_strings(self, addr: int, args: list[int | bytes], alone: bool = False, tid: int | None = None) -> int:
        """Call the function at `addr`; bytes arguments are passed as pointers to a NUL-terminated
        copy. Its return value (64 bits); RuntimeError when the call did not complete. `alone`:
        the other threads stay stopped during the call (else the debugger may run them). `tid`:
        the thread the call runs in (default: the selected one)."""
        ...


@runtime_checkable
class SymbolLookup(Protocol):
    """The address of a symbol of the program or its libraries (prctl, for the fix-up engine's
    arming). Without it prctl architectures cannot be armed. gdb."""

    def symbol_address(self, name: str) -> int | None: ...


@runtime_checkable
class LiveThreads(Protocol):
    """Every thread of the process, running or not: in gdb's non-stop mode `threads()` leaves
    out the running ones, which are alive all the same (the step engine must not forget them,
    `ualdbg status` lists them). Without it `threads()` is all of them. gdb."""

    def live_threads(self) -> list[int]: ...

    def running_threads(self) -> list[int]:
        """The threads the debugger runs now (non-stop mode), held by ualdbg for a command or not."""
        ...


@runtime_checkable
class FaultStepper(Protocol):
    """A Target whose debugger cannot be handed an unrequested TF trap (lldb: a user's
    `thread step-over`/`finish` plan claims every trace stop and would single-step the rest of
    the line with AC clear). The adapter then runs the faulting instruction once under the
    debugger's own single-step and tells `Stops.fault_stepped` after it. lldb's hooks."""

    def step_over_fault(self, tid: int, to: int | None = None) -> None:
        """Queue one single-step of `tid` for when the process resumes; never resumes itself.
        With `to`: run `tid` to that address instead (a breakpoint there: the instruction's one
        successor), where a single-step of it was seen to land elsewhere."""
        ...


C = TypeVar("C")
_OFFERED: dict[tuple[type, type], bool] = {}


def offers(target: object, capability: type[C]) -> TypeIs[C]:
    """isinstance(target, capability), decided once per class of target: isinstance against a
    runtime-checkable Protocol costs microseconds (75 us per fault measured inside gdb,
    docs/PERFORMANCE.md), and the engines ask at every fault."""
    key = (type(target), capability)
    found = _OFFERED.get(key)
    if found is None:
        found = _OFFERED[key] = isinstance(target, capability)
    return found
