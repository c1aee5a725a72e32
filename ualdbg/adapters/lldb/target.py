"""ualdbg's Target protocol over lldb's SB API (lldb 15 or newer: `SBThread.GetSiginfo`). Built
from the process and thread of one stop, never from lldb's `lldb.process`/`lldb.thread` globals."""
from __future__ import annotations

from collections.abc import Callable

import lldb  # type: ignore[import-not-found]

from ...core.target import FaultStepper, SigInfo, StringCalls, Target
from ...isa.arch import BUS_ADRALN, SIGBUS
from ...symbols.maps import read_maps

MASK64 = (1 << 64) - 1
# The core's register names where lldb's differ (lldb calls the 64-bit flags register rflags).
_ALIASES = {"eflags": "rflags"}
_LIVE = (lldb.eStateStopped, lldb.eStateCrashed, lldb.eStateSuspended)


class LldbTarget(Target, StringCalls):
    """A stopped process seen through lldb. `thread` is the thread an event is about (the one
    that stopped); without it, the process's selected thread. StringCalls (the agent's
    injection) through lldb's expression evaluator; FaultSteppingLldbTarget adds FaultStepper."""

    debugger = "lldb"

    def __init__(self, process: lldb.SBProcess, thread: lldb.SBThread | None = None) -> None:
        self.process = process
        self.thread = thread if thread is not None and thread.IsValid() else process.GetSelectedThread()

    def pid(self) -> int | None:
        if not self.process.IsValid() or self.process.GetState() not in _LIVE:
            return None
        return int(self.process.GetProcessID()) or None

    def arch(self) -> str:
        triple = self.process.GetTarget().GetTriple() or ""
        return triple.split("-", 1)[0] or "unknown"

    def current_tid(self) -> int:
        return int(self.thread.GetThreadID())

    def threads(self) -> list[int]:
        return sorted(int(t.GetThreadID()) for t in self.process if t.IsValid())

    def _thread(self, tid: int | None) -> lldb.SBThread:
        if tid is None or tid == self.thread.GetThreadID():
            return self.thread
        thread = self.process.GetThreadByID(tid)
        if not thread.IsValid():
            raise LookupError(f"no thread {tid}")
        return thread

    def _register(self, name: str, tid: int | None) -> lldb.SBValue:
        # Frame 0 whatever frame the user selected: `up` must not make a write land elsewhere
        # (lldb writes frame 0's registers for frame 0 only; outer frames hold unwound copies).
        frame = self._thread(tid).GetFrameAtIndex(0)
        reg = frame.FindRegister(_ALIASES.get(name, name))
        if not reg.IsValid():
            raise KeyError(f"lldb has no register {name!r}")
        return reg

    def read_register(self, name: str, tid: int | None = None) -> int:
        reg = self._register(name, tid)
        size = reg.GetByteSize()
        if size > 8:  # vector registers: lldb shows them as byte arrays
            data = reg.GetData()
            err = lldb.SBError()
            raw = data.ReadRawData(err, 0, data.GetByteSize())
            if not err.Success() or raw is None:
                raise KeyError(f"cannot read {name}: {err.GetCString()}")
            return int.from_bytes(bytes(raw), "little")
        return int(reg.GetValueAsUnsigned()) & MASK64

    def write_register(self, name: str, value: int, tid: int | None = None) -> None:
        reg = self._register(name, tid)
        err = lldb.SBError()
        if not reg.SetValueFromCString(f"{value & MASK64:#x}", err) or not err.Success():
            raise RuntimeError(f"cannot write {name}: {err.GetCString() or 'lldb refused'}")

    def read_memory(self, addr: int, size: int) -> bytes:
        while size > 0:
            err = lldb.SBError()
            data = self.process.ReadMemory(addr, size, err)
            if err.Success() and data:
                return bytes(data)
            # An instruction near the end of a mapping: read less, up to the page end.
            size = min(size - 1, ((addr | 0xFFF) + 1) - addr)
        return b""

    def siginfo(self) -> SigInfo | None:
        if (self.thread.GetStopReason() == lldb.eStopReasonSignal and self.thread.GetStopReasonDataAtIndex(0) == SIGBUS
                and self.process.GetNumThreads() == 1
                and (self.thread.GetStopDescription(128) or "").endswith("illegal alignment")):
            # What lldb already knows from the stop (its description of si_code BUS_ADRALN):
            # GetSiginfo costs a round trip to lldb-server, most of a fault's cost. With one
            # thread the stop cannot be an old one (see hooks: a suspended thread's is).
            return SigInfo(SIGBUS, BUS_ADRALN, 0)
        si = self.thread.GetSiginfo()
        if not si.IsValid():
            return None
        signo = si.GetChildMemberWithName("si_signo")
        code = si.GetChildMemberWithName("si_code")
        if not signo.IsValid() or not code.IsValid():
            return None
        addr_v = si.GetValueForExpressionPath("._sifields._sigfault.si_addr")
        addr = int(addr_v.GetValueAsUnsigned()) & MASK64 if addr_v.IsValid() else None
        return SigInfo(int(signo.GetValueAsSigned()), int(code.GetValueAsSigned()), addr)

    def call_with_strings(self, addr: int, args: list[int | bytes], alone: bool = False, tid: int | None = None) -> int:
        """Call the function at `addr` in this thread (lldb's expression evaluator places each
        string literal in the program's memory), breakpoints ignored, unwound on error. lldb
        runs the thread alone first and every thread after its one-thread timeout (250 ms)
        unless `alone`."""
        if tid is not None and tid != int(self.thread.GetThreadID()):
            thread = self.process.GetThreadByID(tid)
            if not thread.IsValid():
                raise RuntimeError(f"no thread {tid}")
            return LldbTarget(self.process, thread).call_with_strings(addr, args, alone)
        texts, protos = [], []
        for a in args:
            if isinstance(a, bytes):
                texts.append('"' + "".join(chr(b) if b < 128 and (chr(b).isalnum() or chr(b) in "/._-") else f"\\{b:03o}"
                                           for b in a) + '"')
                protos.append("const char *")
            else:
                texts.append(f"(long){a:#x}")
                protos.append("long")
        options = lldb.SBExpressionOptions()
        options.SetIgnoreBreakpoints(True)
        options.SetUnwindOnError(True)
        options.SetTryAllThreads(not alone)  # a lock another thread holds (dlopen's) cannot deadlock it
        options.SetStopOthers(True)
        options.SetTimeoutInMicroSeconds(10_000_000)
        frame = self.thread.GetFrameAtIndex(0)
        value = frame.EvaluateExpression(f"(long)((long (*)({', '.join(protos) or 'void'})){addr:#x})({', '.join(texts)})",
                                         options)
        error = value.GetError()
        if not error.Success():
            raise RuntimeError(error.GetCString() or "the call did not complete")
        return int(value.GetValueAsUnsigned()) & MASK64

    def maps_text(self) -> str | None:
        pid = self.pid()
        if pid is None or self.process.GetTarget().GetPlatform().GetName() != "host":
            return None
        try:
            return read_maps(pid)
        except OSError:
            return None


class FaultSteppingLldbTarget(LldbTarget, FaultStepper):
    """The hooks' target: the trap engine resumes a fault by lldb's own single-step, which
    `step_over` queues (faultstep.FaultSteps.queue), instead of setting TF itself (FaultStepper)."""

    def __init__(self, process: lldb.SBProcess, thread: lldb.SBThread | None,
                 step_over: Callable[[lldb.SBThread, int | None], None]) -> None:
        super().__init__(process, thread)
        self._step_over = step_over

    def step_over_fault(self, tid: int, to: int | None = None) -> None:
        self._step_over(self._thread(tid), to)
