"""ualdbg's presence in one lldb debugger: lldb's stops and breakpoint callbacks translated into
calls of the session's lifecycle and stop decisions (engines/lifecycle.py, engines/stops.py),
over its parts: the breakpoints and the arm point (breakpoints.py, sitemap.py), the stop hook's
rules (stophook.py), SIGBUS's settings (signals.py), the faults lldb steps over (faultstep.py)
and SIGTRAP kept open around glibc's own signal blocking (sigmask.py). lldb has no conditional
signal catchpoints and no `catch syscall`, and no detach or thread-exit event. Everything is
found through the execution context lldb passes in, never through the `lldb.process`/
`lldb.thread` globals."""
from __future__ import annotations

import re
import time
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...engines.lifecycle import Kind
from ...engines.session import Session
from ...engines.step import StepDecision
from .agenthost import LldbAgentHost
from .breakpoints import Breakpoints
from .faultstep import FaultSteps, is_alignment_sigbus
from .interp import command, warn
from .registry import HOOKS
from .sigmask import SigtrapSwaps
from .signals import SigbusHandling
from .sitemap import MASK_SYSCALL, site_nr
from .stepping import LldbStepControl
from .stophook import Stop, StopHook, StopRules
from .target import FaultSteppingLldbTarget, LldbTarget


def hooks_of(debugger: lldb.SBDebugger) -> LldbHooks | None:
    hooks = HOOKS.get(debugger.GetID())
    return hooks if isinstance(hooks, LldbHooks) else None


def _on_destroy(debugger_id: int, *baton: Any) -> None:
    hooks = HOOKS.pop(debugger_id, None)
    if isinstance(hooks, LldbHooks):
        hooks.before_detach()


def _attached(pid: int) -> bool:
    """Whether lldb attached to `pid` rather than launched it: a launched program is a child of
    the lldb-server that traces it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return fields.get("PPid", "").strip() != fields.get("TracerPid", "").strip()
    except OSError:
        return False


class LldbHooks:
    """All of ualdbg's presence in one lldb debugger: installed by `break`/`trace start`,
    removed by `off`. What the engines do at each event of the process is the session's
    lifecycle and stop decisions; this translates lldb's stops and breakpoint callbacks into
    their calls and carries out their verdicts with lldb's means (signal settings, thread
    plans, breakpoints)."""

    def __init__(self, debugger: lldb.SBDebugger, session: Session) -> None:
        self.debugger = debugger
        self.session = session
        self.installed = False
        self.installed_in: lldb.SBTarget | None = None
        self.stop_hook_id: int | None = None
        self.seen_pid: int | None = None
        self.arm_on_attach = True  # the batch driver attaches before exec and arms at main
        self.exit_time: float | None = None
        self.exit_code: int | None = None  # the status the program passed to libc's _exit
        self.notices: list[str] = []  # lines for the user from install, shown by the command
        self.breakpoints = Breakpoints(debugger)
        self.sigbus = SigbusHandling(debugger)
        self.faultsteps = FaultSteps()
        self.swaps = SigtrapSwaps()
        self.step_control = LldbStepControl(session, self.sbtarget, self.breakpoints)  # the step engine's primitives
        self.agent_host = LldbAgentHost(debugger, self.sigbus, lambda: self.sbtarget().GetProcess(), lambda: self.installed,
                                        self.breakpoints, lambda thread: LldbTarget(thread.GetProcess(), thread))
        self.rules = StopRules(session, debugger, self.breakpoints, self.sigbus, self.faultsteps, self.step_control,
                               self.fault_target)
        session.events.subscribe(Kind.STEP_ARMED, self.step_control.warn_split)
        session.events.subscribe(Kind.NEW_PROCESS, lambda pid: self._forget_steps())
        session.events.subscribe(Kind.EXITED, lambda _: self._forget_steps())
        HOOKS[debugger.GetID()] = self
        if hasattr(debugger, "AddDestroyCallback"):
            # lldb detaches from an attached process when it quits: nothing may stay armed
            # (with no tracer, the next unaligned access would kill the program).
            debugger.AddDestroyCallback(_on_destroy)
        # `process detach` (and its alias `detach`): lldb has no detach event, but runs an
        # override callback first; returning False lets the command go on.
        self._detach_callback = self.on_detach_command  # lldb keeps no reference of its own
        debugger.GetCommandInterpreter().SetCommandOverrideCallback("process detach", self._detach_callback)

    @property
    def sites_active(self) -> bool:
        return self.breakpoints.sites_active

    # -- the Host side -----------------------------------------------------------------------
    def sbtarget(self) -> lldb.SBTarget:
        target = self.debugger.GetSelectedTarget()
        return target if target.IsValid() else self.debugger.GetDummyTarget()

    def fault_target(self, process: lldb.SBProcess, thread: lldb.SBThread | None) -> LldbTarget:
        """The Target the engines get: lldb steps the trap engine's faults over (faultstep.py)."""
        return FaultSteppingLldbTarget(process, thread, self.faultsteps.queue)

    def target(self, process: lldb.SBProcess | None = None, thread: lldb.SBThread | None = None) -> LldbTarget | None:
        """The stopped process, or None (no process, running, exited)."""
        process = process if process is not None else self.sbtarget().GetProcess()
        if not process.IsValid():
            return None
        state = process.GetState()
        if state in (lldb.eStateExited, lldb.eStateDetached):
            self.note_exit(process)
            return None
        if state not in (lldb.eStateStopped, lldb.eStateCrashed, lldb.eStateSuspended):
            return None
        self.see_process(process)
        return self.fault_target(process, thread)

    def sync(self) -> None:
        """Catch up with what happened while no ualdbg code ran: lldb tells nobody of an exit;
        the agent's thread-birth breakpoints, over inside a callback, can go now."""
        self.agent_host.sweep()
        process = self.sbtarget().GetProcess()
        if process.IsValid() and process.GetState() in (lldb.eStateExited, lldb.eStateDetached):
            self.note_exit(process)

    def install(self) -> None:
        target = self.sbtarget()
        process = target.GetProcess()
        self.note_program(target)
        if self.installed and self.installed_in is not None and self.installed_in.IsValid() and self.installed_in == target:
            self._place_arm_point(target)
            return
        if self.installed:
            self.uninstall()
        self.sigbus.take_over(process)
        out = command(self.debugger, f"target stop-hook add -P {StopHook.__module__}.StopHook")
        m = re.search(r"#(\d+)", out)
        self.stop_hook_id = int(m.group(1)) if m else None
        self.breakpoints.create_sites(target)
        self._place_arm_point(target)
        self.installed = True
        self.installed_in = target
        if process.IsValid() and process.GetState() == lldb.eStateStopped:
            self.ensure_sites(target)

    def ensure_sites(self, target: lldb.SBTarget) -> None:
        """The site breakpoints' locations, once installed (Breakpoints.ensure_sites)."""
        if self.installed:
            self.breakpoints.ensure_sites(target)

    def _place_arm_point(self, target: lldb.SBTarget) -> None:
        said = self.breakpoints.place_arm_point(target, self.session.mode.at)
        if said:
            self.notices.append(said)

    def uninstall(self) -> None:
        if not self.installed:
            return
        targets: list[lldb.SBTarget] = []
        for t in (self.installed_in, self.sbtarget()):
            if t is not None and t.IsValid() and not any(t == u for u in targets):
                targets.append(t)
        self.breakpoints.remove_all(targets)
        if self.stop_hook_id is not None:
            try:
                command(self.debugger, f"target stop-hook delete {self.stop_hook_id}")
            except RuntimeError:
                pass
        self.stop_hook_id = None
        process = self.sbtarget().GetProcess()
        # A thread stopped at one of our faults still has its SIGBUS to deliver when it
        # resumes; with the user's `-p true` back, the program would die of it. Such threads
        # step over the instruction (AC is clear now) with SIGBUS still dropped, and the user's
        # setting comes back for the process when they have.
        leaving = [t for t in process if is_alignment_sigbus(t)] if process.IsValid() else []
        queued = set(self.faultsteps.stepping)  # their plan, queued at the stop, takes them past
        self.swaps.settle_safely(process)
        self.sigbus.give_back(process, owed=bool(leaving))
        self.faultsteps.forget()
        self.installed = False
        self.installed_in = None
        self.session.stops.owe(int(thread.GetThreadID()) for thread in leaving)
        for thread in leaving:
            self.faultsteps.leave(thread, queued=int(thread.GetThreadID()) in queued)

    def turned_leave(self, tid: int) -> bool:
        """A plan the trap engine queued ended for a thread `off` then owed its step past the fault."""
        return self.faultsteps.turned_leave(tid)

    def left(self, thread: lldb.SBThread) -> None:
        """A thread stopped at a fault when ualdbg was turned off has stepped over it: armed now
        if ualdbg was armed again meanwhile (Host.settle_faults)."""
        tid = int(thread.GetThreadID())
        if self.session.stops.paid(tid):
            self.sigbus.owed_paid(thread.GetProcess())
        self.session.arm_late(LldbTarget(thread.GetProcess(), thread), tid)

    def on_detach_command(self, *argv: Any) -> bool:
        self.before_detach()
        return False  # not handled here: lldb runs `process detach` itself

    def before_detach(self) -> None:
        """Clear AC everywhere before lldb lets go of the process (quit)."""
        try:
            self.session.lifecycle.before_detach(self.target())
        except Exception as exc:
            warn(None, f"disarming before detach: {exc}")
        try:
            said = self.session.agent.release(self.agent_host, self.target())
            if said:
                warn(None, said.removeprefix("ualdbg: "))
        except Exception as exc:
            warn(None, f"releasing the agent before detach: {exc}")
        self.swaps.settle_safely(self.sbtarget().GetProcess())

    def note_program(self, target: lldb.SBTarget) -> None:
        """Remember the program and its arguments for the JSON document."""
        exe = target.GetExecutable()
        if exe.IsValid() and exe.GetFilename():
            self.session.program.path = exe.fullpath
            info = target.GetLaunchInfo()
            self.session.program.args = [info.GetArgumentAtIndex(i) for i in range(info.GetNumArguments())]

    # -- processes ---------------------------------------------------------------------------
    def see_process(self, process: lldb.SBProcess) -> str | None:
        """A process ualdbg has not seen yet: a run or an attach (an exec is seen at its stop).
        Returns a line for the user when it armed an attached process."""
        pid = int(process.GetProcessID())
        if pid == self.seen_pid:
            return None
        self.seen_pid = pid
        self.session.lifecycle.new_process(pid)
        self.sigbus.new_process()
        self.exit_time = self.exit_code = None
        p = self.session.program
        p.exit_status, p.exit_signal = None, None
        if self.arm_on_attach and self.session.mode.trap_armed and _attached(pid):
            # Armed before `process attach`: main is long past; the site breakpoints get their
            # locations, and the lifecycle arms where the process is.
            self.ensure_sites(process.GetTarget())
            return self.session.lifecycle.attached(self.fault_target(process, None), self.step_control)
        return None

    def _forget_steps(self) -> None:
        """A new process, an exec or an exit: the per-thread state of lldb's own steps ends."""
        self.swaps.set_swaps.clear()
        self.faultsteps.forget()
        self.faultsteps.leavers.clear()  # (kept by forget at `off`: a new process has no such plan)

    def note_exit(self, process: lldb.SBProcess) -> None:
        p = self.session.program
        if p.pid != process.GetProcessID() or p.exit_status is not None or p.exit_signal is not None:
            return
        # lldb reports a death by signal N as "exited with status = N": libc's `_exit` tells
        # an exit from a signal (a program that makes the exit_group syscall itself is taken
        # for a signal when its status is a signal number).
        status = int(process.GetExitStatus())
        if self.exit_code is None and 0 < status < 65:
            p.exit_signal = status
        else:
            p.exit_status = status
        # The clock ends at libc's `_exit` when the program called it; a `trace stop` before
        # keeps its end.
        said = self.session.lifecycle.exited(self.exit_time, keep_end=True)
        if said:
            self.notices.append(said)

    # -- lldb's callbacks (breakpoints.py, faultstep.py, stophook.py) ------------------------------
    def on_arm_point(self, thread: lldb.SBThread) -> None:
        process = thread.GetProcess()
        self.see_process(process)
        self.ensure_sites(process.GetTarget())
        self.session.lifecycle.arm_point(self.fault_target(process, thread), self.step_control)

    def on_site(self, thread: lldb.SBThread, kind: str) -> bool:
        """A syscall site breakpoint's callback: True stops there (the step engine's break)."""
        entry = kind == "entry"
        # Which syscall is known by the site (at an exit, rax holds the result).
        nr = site_nr(thread, thread.GetFrameAtIndex(0).GetPC(), entry=entry)
        if entry and nr == MASK_SYSCALL:
            self.swaps.opened(thread)
            return False
        if not entry:
            self.swaps.closed(thread)
        if nr is None:
            return False
        # The trap engine's new tasks and mask changes; the step engine's new threads, whose
        # first stop is the exit of the clone that made them (Lifecycle.syscall).
        with self.step_control.deciding():
            decision = self.session.stops.step_syscall(self.fault_target(thread.GetProcess(), thread),
                                                       int(thread.GetThreadID()), nr, entry)
        return decision is StepDecision.STOP

    def on_exit_call(self, status: int) -> None:
        self.exit_time = time.monotonic()
        self.exit_code = status

    def fault_stepped(self, thread: lldb.SBThread) -> None:
        """A FaultStep plan ran the faulting instruction: the trap engine arms the thread again."""
        if self.faultsteps.done(thread):
            said = self.session.stops.fault_stepped(LldbTarget(thread.GetProcess(), thread), int(thread.GetThreadID()))
            if said:  # (once per instruction)
                warn(None, said)

    def on_stop(self, thread: lldb.SBThread, stream: lldb.SBStream) -> bool:
        """The stop hook, once per thread with a stop reason: True keeps the stop, False
        auto-continues (lldb stops if any call says stop); StopRules decides."""
        process = thread.GetProcess()
        said = self.see_process(process)
        if said:
            stream.Print(said + "\n")
        stop = self.rules.decide(Stop(process, thread, stream))
        if stop:
            self._settle(self.fault_target(process, thread))
        return stop

    def _settle(self, target: LldbTarget) -> None:
        """At a stop the user sees: forget threads that are gone (lldb tells no thread's end),
        re-arm a thread whose single-step plan was lost; then the stop's own decisions."""
        if self.swaps.set_swaps:
            self.swaps.settle(target.process, leaving=False)
        live = set(target.threads())
        self.session.lifecycle.threads_gone(live)
        for tid in self.faultsteps.lost(live, lambda tid: target.read_register("rip", tid)):
            self.session.stops.fault_stepped(target, tid)
        self.session.stopped(target)

