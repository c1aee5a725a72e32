"""The stackcheck measurer inside one lldb batch process: lldb's primitives for the shared loop
(ualdbg.tools.stackcheck.sweep). lldb launches ualdbg's exec helper, which execs the program with the
exact argv and environment (lldb itself would reorder the environment, which it keeps in a hash
map, and put the path in argv[0]); the exec stop is passed over, and breakpoints in the
program's own module stop at main's entry and at each probe."""
from __future__ import annotations

import os
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...tools.stackcheck.sweep import SweepError, sweep
from .breakpoints import BP_NAME

ARM_POINT_NAME = f"{BP_NAME}_arm_point_hit"  # how breakpoints.Breakpoints names its arm point
_DONE = (lldb.eStateExited, lldb.eStateDetached, lldb.eStateInvalid, lldb.eStateCrashed)


class _Stop:
    def __init__(self, process: lldb.SBProcess, thread: lldb.SBThread) -> None:
        self.process = process
        self.frame = thread.GetFrameAtIndex(0)

    def pc(self) -> int:
        return int(self.frame.GetPC())

    def sp(self) -> int:
        return int(self.frame.GetSP())

    def register(self, name: str) -> int:
        reg = self.frame.FindRegister(name)
        if not reg.IsValid():
            raise SweepError(f"no register {name}")
        return int(reg.GetValueAsUnsigned())

    def read_memory(self, addr: int, size: int) -> bytes:
        err = lldb.SBError()
        data = self.process.ReadMemory(addr, size, err)
        if not err.Success() or data is None:
            raise SweepError(f"cannot read {size} bytes at {addr:#x}: {err.GetCString()}")
        return bytes(data)

    def address_of(self, name: str) -> int:
        value = self.frame.FindVariable(name)
        if not value.IsValid():
            value = self.frame.FindValue(name, lldb.eValueTypeVariableStatic)
        if not value.IsValid():
            raise SweepError(f"No symbol \"{name}\" in current context.")
        addr = value.GetLoadAddress()
        if addr == lldb.LLDB_INVALID_ADDRESS:
            raise SweepError(f"{name} is not in memory here (a register, or optimised out)")
        return int(addr)


class LldbSweep:
    name = "lldb"

    def __init__(self, debugger: lldb.SBDebugger, plan: dict[str, Any]) -> None:
        self.debugger = debugger
        debugger.SetAsync(False)
        program = plan["program"]
        self.trace = bool(plan.get("trace"))
        self.session: Any = None
        self.probes: dict[int, str] = {}
        self.process: lldb.SBProcess | None = None
        self.last_hits: set[str] = set()
        self.execed = False
        self.target = debugger.CreateTarget(program)
        if not self.target.IsValid():
            raise SweepError(f"lldb cannot load {program}")
        debugger.SetSelectedTarget(self.target)
        if self.trace:
            from ...commands.all import COMMANDS
            from .install import install, installed

            self.session = install(debugger)
            self.session.recorder.skip_site_data()  # counts and places only: FaultRecorder.skip_site_data
            host, hooks = installed(debugger)
            # lldb launches the program from lldb-server: ualdbg would take it for an attached
            # process and arm it at once, long before main (as the batch driver, arm at main).
            hooks.arm_on_attach = False
            COMMANDS[("trace", "start")].invoke(host, ["--engine", "trap", "--at", "main"])
            self.session.program.path = program
        # main's first instruction (the sp before its prologue), in the program's module only:
        # the exec helper has a main too.
        main = next((ctx.GetSymbol() for ctx in self.target.FindSymbols("main")
                     if ctx.GetModule().GetFileSpec().GetFilename() == os.path.basename(program)), None)
        if main is None or not main.IsValid():
            raise SweepError(f"lldb finds no symbol main in {program}")
        self.main_bp = self.target.BreakpointCreateBySBAddress(main.GetStartAddress())

    def _settle(self) -> None:
        """Go past stops that are not ours: any before the exec into the program (lldb takes the
        helper's image for the target's program and may stop there at a breakpoint meant for
        the program), and the exec itself. Notes which of our breakpoints the stop hit."""
        assert self.process is not None
        while self.process.GetState() == lldb.eStateStopped:
            reason = self.process.GetSelectedThread().GetStopReason()
            if reason == lldb.eStopReasonExec and not self.execed:
                self.execed = True
                self._arm_points(True)
            hits: set[str] = set()
            for thread in self.process if self.execed else ():
                if thread.GetStopReason() != lldb.eStopReasonBreakpoint:
                    continue
                for i in range(0, thread.GetStopReasonDataCount(), 2):
                    bp_id = thread.GetStopReasonDataAtIndex(i)
                    if bp_id == self.main_bp.GetID():
                        hits.add("main")
                    elif bp_id in self.probes:
                        hits.add(self.probes[bp_id])
            ours = reason in (lldb.eStopReasonExec, lldb.eStopReasonNone, lldb.eStopReasonBreakpoint)
            if hits or not ours or (self.execed and reason == lldb.eStopReasonBreakpoint):
                self.last_hits = hits
                return
            err = self.process.Continue()
            if not err.Success() and self.process.GetState() not in _DONE:
                raise SweepError(f"cannot continue: {err.GetCString()}")

    def start(self, variant: dict[str, Any]) -> None:
        helper = variant["helper"]
        info = lldb.SBLaunchInfo(helper[1:])
        info.SetExecutableFile(lldb.SBFileSpec(helper[0]), True)
        # ASLR is the exec helper's to set (personality); lldb's own default would force it off.
        info.SetLaunchFlags(lldb.eLaunchFlagDebug)
        info.AddOpenFileAction(0, "/dev/null", True, False)
        err = lldb.SBError()
        self.execed = False
        self._arm_points(False)
        self.process = self.target.Launch(info, err)
        if not err.Success() or self.process is None or not self.process.IsValid():
            raise SweepError(f"lldb cannot launch: {err.GetCString()}")
        self._settle()

    def _arm_points(self, enabled: bool) -> None:
        """--trace: the trap engine's arm point (at `main`, by name) is off until the exec into
        the program. lldb takes the helper's image for the program before the exec and would
        arm the helper, whose libc calls then fault hundreds of times per variant."""
        if not self.trace:
            return
        found = lldb.SBBreakpointList(self.target)
        self.target.FindBreakpointsByName(ARM_POINT_NAME, found)
        for i in range(found.GetSize()):
            found.GetBreakpointAtIndex(i).SetEnabled(enabled)

    def cont(self) -> None:
        assert self.process is not None
        err = self.process.Continue()
        if not err.Success() and self.process.GetState() not in _DONE:
            raise SweepError(f"cannot continue: {err.GetCString()}")
        self._settle()

    def alive(self) -> bool:
        return self.process is not None and self.process.IsValid() and self.process.GetState() not in _DONE

    def pid(self) -> int:
        assert self.process is not None
        return int(self.process.GetProcessID())

    def hits(self) -> set[str]:
        out, self.last_hits = self.last_hits, set()
        return out

    def stopped(self) -> _Stop:
        assert self.process is not None
        return _Stop(self.process, self.process.GetSelectedThread())

    def add_probe(self, probe_id: str, addr: int) -> None:
        bp = self.target.BreakpointCreateByAddress(addr)
        self.probes[bp.GetID()] = probe_id

    def clear_probes(self) -> None:
        for bp_id in self.probes:
            self.target.BreakpointDelete(bp_id)
        self.probes.clear()

    def kill(self) -> None:
        if self.process is not None:
            self.process.Kill()

    def exit_status(self) -> int | None:
        if self.process is None or self.process.GetState() != lldb.eStateExited:
            return None
        return int(self.process.GetExitStatus())

    def trace_begin(self) -> None:
        if self.trace:
            self.session.buffer.clear()
            # The engine stays active after the last variant's main; at the first stop of the
            # next run the lldb hooks would arm the exec helper (hundreds of libc faults):
            # inactive until the arm point at the program's main.
            self.session.engine.disarm(None)

    def trace_end(self, status: int | None) -> dict[str, Any] | None:
        if not self.trace:
            return None
        from ...core.document import build_document

        self.session.program.exit_status = status
        return build_document(self.session.result())


def main(debugger: lldb.SBDebugger, plan_path: str) -> None:
    sweep(plan_path, lambda plan: LldbSweep(debugger, plan))
