"""A fake Target over a few bytes of code and a fake StepControl that logs its calls: what the
step engine's unit tests (test_step_engine.py, test_step_by_breakpoints.py) drive it with."""
from __future__ import annotations

from ualdbg.core.target import SigInfo, Target


class FakeTarget(Target):
    debugger = "fake"

    def __init__(self, regs: dict[str, int], code: dict[int, bytes], arch: str = "x86_64",
                 writable: bool = True) -> None:
        self.regs = dict(regs)
        self.code = code
        self._arch = arch
        self.writable = writable

    def pid(self) -> int | None:
        return None

    def arch(self) -> str:
        return self._arch

    def current_tid(self) -> int:
        return 7

    def threads(self) -> list[int]:
        return [7]

    def read_register(self, name: str, tid: int | None = None) -> int:
        return self.regs[name]

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        if not self.writable:
            raise AssertionError(f"no register is written on {self._arch} ({name})")
        self.regs[name] = value

    def read_memory(self, addr: int, size: int) -> bytes:
        for base, code in self.code.items():
            if base <= addr < base + len(code):
                return code[addr - base:addr - base + size]
        return b""

    def siginfo(self) -> SigInfo | None:
        return None

    def maps_text(self) -> str | None:
        return None


class FakeControl:
    eager_returns = False  # as gdb's: return breakpoints when a stepped thread leaves the scope
    steps_inherited = True  # as gdb's: a thread made by a stepped thread inherits TF

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def step(self, target: FakeTarget, tid: int) -> None:
        self.calls.append(("step", tid))

    def unstep(self, target: FakeTarget, tid: int) -> None:
        self.calls.append(("unstep", tid))

    def break_at(self, addr: int) -> None:
        self.calls.append(("break", addr))

    def clear_breakpoints(self) -> None:
        self.calls.append(("clear", 0))
