"""ualdbg's presence in one gdb: gdb's events (a stop, a new objfile, a thread's end, an exit,
a resume, the prompt, a detach) translated into calls of the session's lifecycle and stop
decisions (engines/lifecycle.py, engines/stops.py), over its parts: the catchpoints and the arm
point (catchpoints.py), what their conditions answer (conditions.py), the `handle` settings
(signals.py) and the threads held in non-stop mode (holding.py)."""
from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...engines.lifecycle import Kind
from ...engines.session import Session
from ...isa.arch import BUS_ADRALN, SIGBUS
from ...render.report import break_text
from .agenthost import GdbAgentHost
from .catchpoints import Catchpoints, define_detach_hook, target_non_stop
from .conditions import Conditions
from .console import warn
from .holding import Holding
from .signals import SignalHandles
from .stepping import GdbStepControl
from .target import GdbTarget, scheduler_locked
from .unwinder import install_unwinder


class GdbHooks:
    """All of ualdbg's presence in one gdb: installed by `break`/`trace start`, removed by `off`.
    What the engines do at each event of the process is the session's lifecycle and stop
    decisions; this translates gdb's events into their calls and carries out their verdicts with
    gdb's means (catchpoints, `handle` settings, held threads)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.target_ = GdbTarget()
        self.signals = SignalHandles()
        self.holding = Holding(self.target_, self.signals)
        self.catchpoints = Catchpoints(self.on_arm_point)
        self.conditions = Conditions(session, self.target_, self.catchpoints, self.signals, self.holding)
        self.step_control = GdbStepControl(session.stops, self.target_)  # the step engine's primitives
        self.agent_host = GdbAgentHost(self.signals, lambda: bool(self.catchpoints.numbers), self.drop_drain,
                                       self.target_)
        self.env_fixed = False
        self.seen_pid: int | None = None
        self.loader_armed = False
        self.warned_all_stop = False
        self.driver = False  # a batch driver takes the steps after delay-slot faults (finish_slot)
        gdb.events.stop.connect(self.on_stop)
        gdb.events.exited.connect(self.on_exit)
        gdb.events.cont.connect(self.on_resume)
        if hasattr(gdb.events, "gdb_exiting"):
            gdb.events.gdb_exiting.connect(lambda event: self.before_detach())
        define_detach_hook()
        gdb.events.new_objfile.connect(self.on_new_objfile)
        gdb.events.thread_exited.connect(self.on_thread_exit) if hasattr(gdb.events, "thread_exited") else None
        gdb.events.new_thread.connect(self.on_new_thread)
        install_unwinder(session, self.target_)  # frames under the agent's trampolines (unwinder.py)
        gdb.events.before_prompt.connect(self.on_prompt)
        session.events.subscribe(Kind.STEP_ARMED, lambda target: self.hint_all_stop())

    @property
    def installed(self) -> bool:
        return self.catchpoints.installed

    # -- the Host side ---------------------------------------------------------------------
    def target(self) -> GdbTarget | None:
        inf = gdb.selected_inferior()
        if not inf.pid:
            return None
        thread = gdb.selected_thread()
        if thread is None or thread.is_exited():
            return None
        if thread.is_running() and int(thread.ptid[1]) not in self.target_.held:
            return None
        return self.target_

    def touched_threads(self) -> set[int]:
        """The threads whose flags ualdbg may have set (what `off` and a detach must clear)."""
        return self.session.lifecycle.touched_threads()

    def install(self) -> None:
        self.fix_environment()
        if self.catchpoints.numbers and not self.installed:
            self.finish_drain()  # armed again: pending faults go through the new catchpoints
        if self.installed:
            self.catchpoints.place_arm_point(self.session.mode.at)
            return
        self.signals.take_over()
        self.catchpoints.create()
        self.catchpoints.place_arm_point(self.session.mode.at)
        self.catchpoints.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        stops = self.session.stops
        live = self.target() is not None
        stops.owe(self.holding.unreported_alignment_faults() if live else ())
        # A step over a fault whose trap gdb has not reported: owed only where it is pending.
        stops.owed_steps &= self.holding.unreported_step_traps() if live else set()
        # The SIGBUS catchpoint swallows those faults first, the SIGTRAP one those traps and the
        # stops of the threads held in non-stop mode (finish_drain); the syscall catchpoint goes.
        numbers = self.catchpoints.numbers
        keep = numbers[:2] if self.holding.kicks or stops.owed_steps else numbers[:1] if stops.owed else []
        self.catchpoints.keep_only(keep)
        self.catchpoints.installed = False
        self.catchpoints.remove_arm_point()
        if not keep:
            self.signals.give_back(self.target() is not None)

    def drained(self) -> bool:
        """After `off`: every pending fault and every stop of a held thread was collected."""
        stops = self.session.stops
        if not stops.owes() and not self.holding.kicks:
            return True
        if self.target() is None and not gdb.selected_inferior().pid:
            return True
        running = {int(t.ptid[1]) for t in gdb.selected_inferior().threads() if t.is_valid() and t.is_running()}
        # A thread still running in non-stop mode may yet report its fault: keep it.
        live = self.target() is not None
        pending = self.holding.unreported_alignment_faults() | self.holding.unreported_step_traps() if live else set()
        stops.keep_owed(pending | running)
        return not stops.owes() and not self.holding.kicks

    def drop_drain(self) -> None:
        """The agent takes SIGBUS: faults still pending from before `off` reach its handler
        (counted there), not a catchpoint kept to swallow them."""
        if not self.installed and self.catchpoints.numbers:
            self.finish_drain()

    def finish_drain(self) -> None:
        """The pending faults are swallowed (or their threads moved on): now let go of SIGBUS."""
        self.catchpoints.delete_all()
        self.session.stops.forgive()
        self.holding.kicks.clear()
        self.signals.give_back(self.target() is not None)

    def before_detach(self) -> None:
        try:
            with self.holding.hold_running(self.touched_threads()):
                self.session.lifecycle.before_detach(self.target() or (self.target_ if self.target_.held else None))
        except Exception as exc:
            warn(f"disarming before detach: {exc}")
        try:
            said = self.session.agent.release(self.agent_host, self.target())
            if said:
                gdb.write(said + "\n")
        except Exception as exc:
            warn(f"releasing the agent before detach: {exc}")

    def settle_faults(self) -> frozenset[int]:
        """Host.settle_faults: the selected thread, stopped at a fault ualdbg reported before
        `off` (its AC clear, no step-over of the trap engine pending), runs it now: one `stepi`
        (gdb drops the SIGBUS it stopped with: `off` left SIGBUS nopass until the resume), with
        the scheduler locked: gdb's default (`replay`) resumes every thread for a `stepi`, and the
        others, not yet armed again, ran unchecked meanwhile (a 3-thread program lost 50 of the
        59 faults after `break`, `off`, `trace start`)."""
        target = self.target()
        if target is None:
            return frozenset()
        tid = target.current_tid()
        if tid in self.session.engine.pending:
            return frozenset()
        info = target.siginfo()
        if info is None or info.signo != SIGBUS or info.code != BUS_ADRALN:
            return frozenset()
        if target.read_register("eflags") & 0x40000:
            return frozenset()  # AC still set: not a fault ualdbg stopped at
        with scheduler_locked():
            gdb.execute("stepi", to_string=True)
        return frozenset()

    def on_resume(self, event: Any) -> None:
        self.signals.resumed(self.installed)
        try:
            self.restore_catchpoints()  # a batch run has no prompt between `delete` and `continue`
        except Exception as exc:
            warn(f"resume: {exc}")

    def fix_environment(self) -> None:
        """gdb puts LINES and COLUMNS into the program's environment; take out what the user
        did not have (gdb's own environment at exec time is in /proc/self/environ)."""
        if self.env_fixed:
            return
        try:
            with open("/proc/self/environ", "rb") as f:
                original = {e.split(b"=", 1)[0].decode(errors="replace") for e in f.read().split(b"\0") if e}
        except OSError:
            return
        for name in ("LINES", "COLUMNS"):
            if name not in original:
                gdb.execute(f"unset environment {name}", to_string=True)
        self.env_fixed = True

    def note_program(self) -> None:
        """Remember the program and its arguments for the JSON document."""
        prog = gdb.current_progspace().filename
        if prog:
            self.session.program.path = prog
        text = gdb.execute("show args", to_string=True)
        m = re.search(r'is "(.*)"\.\s*$', text, re.S)
        if m:
            try:
                self.session.program.args = shlex.split(m.group(1))
            except ValueError:
                self.session.program.args = m.group(1).split()

    def finish_slot(self) -> bool:
        """The batch driver's step after a delay-slot fault (Conditions.finish_slot)."""
        return self.conditions.finish_slot()

    # -- gdb events --------------------------------------------------------------------------
    def on_arm_point(self) -> None:
        lifecycle = self.session.lifecycle
        if not self.session.step.enabled:
            # The trap engine's arming may call prctl: the target must know that gdb is inside
            # a breakpoint's stop(), where no inferior call can run.
            self.target_.in_stop_callback = True
            try:
                lifecycle.arm_point(self.target_, self.step_control)
            finally:
                self.target_.in_stop_callback = False
            return
        with self.target_.event():
            lifecycle.arm_point(self.target_, self.step_control)

    def on_stop(self, event: Any) -> None:
        if self.conditions.slot_pending and not self.driver:
            self.conditions.finish_slot_and_continue()
            return
        try:
            s = self.session
            if not self.installed and self.catchpoints.numbers and self.drained():
                self.finish_drain()
            report = break_text(s.stops.take_report(None), color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
            if report:
                gdb.write(report)
            target = self.target()
            if target is not None:
                if gdb.selected_inferior().was_attached:
                    said = s.lifecycle.attached(target, self.step_control)
                    if said:
                        gdb.write(said + "\n")
                s.stopped(target)
        except Exception as exc:
            warn(f"stop handler: {exc}")

    def on_prompt(self) -> None:
        try:
            if not self.installed and self.catchpoints.numbers and self.drained():
                self.finish_drain()
            self.restore_catchpoints()
        except Exception as exc:
            warn(f"prompt: {exc}")

    def restore_catchpoints(self) -> None:
        """A `delete` took ualdbg's catchpoints (or its arm point) with the user's breakpoints:
        ualdbg is still armed, so they are made again, and the user told once per `delete`."""
        gone = self.catchpoints.missing()
        if not gone:
            return
        self.catchpoints.create()
        self.catchpoints.arm_point = None
        self.catchpoints.place_arm_point(self.session.mode.at)
        gdb.write(f"ualdbg: `delete` removed ualdbg's catchpoints ({', '.join(map(str, gone))}); made again as "
                  f"{', '.join(map(str, self.catchpoints.numbers))} (ualdbg stays armed: `ualdbg off` disarms)\n")

    def on_exit(self, event: Any) -> None:
        if not self.installed and self.catchpoints.numbers:
            self.finish_drain()
        self.session.program.exit_status = int(event.exit_code) if hasattr(event, "exit_code") else None
        said = self.session.lifecycle.exited()
        if said:
            gdb.write(said + "\n")

    def on_new_thread(self, event: Any) -> None:
        try:
            self.hint_all_stop()
        except Exception as exc:
            warn(f"new thread: {exc}")

    def hint_all_stop(self) -> None:
        """Once: the step engine stepping a program of several threads on a target that is not
        non-stop, where gdb stops every thread at each trap of a stepped thread (measured in
        tests/step_debugger/test_step_nonstop.py). gdb 13 runs native processes non-stop
        underneath all-stop mode (`maint show target-non-stop`: auto, currently on): no line."""
        step = self.session.step
        if self.warned_all_stop or not (step.enabled and step.armed) or not gdb.selected_inferior().pid:
            return
        if len(self.target_.live_threads()) < 2 or target_non_stop():
            return
        self.warned_all_stop = True
        gdb.write("ualdbg: all-stop mode: threads outside the step scope stop at each step event; "
                  "`set non-stop on` before `run` keeps them running\n")

    def on_thread_exit(self, event: Any) -> None:
        try:
            tid = int(event.inferior_thread.ptid[1])
            self.holding.kicks.pop(tid, None)
            self.session.lifecycle.thread_exited(tid)
        except Exception:
            pass

    def on_new_objfile(self, event: Any) -> None:
        """A new process (run) or a new program image (exec): per-PC caches describe the old
        one, and with `--at start` this is the first moment the new image can be armed. Later
        objfiles of the same image (libc after ld.so) change nothing."""
        try:
            name = event.new_objfile.filename or ""
            pid = gdb.selected_inferior().pid
            if not pid:
                return
            is_exec = name == gdb.current_progspace().filename and self.seen_pid == pid
            if pid != self.seen_pid or is_exec:
                self.seen_pid = pid
                self.session.lifecycle.new_process(pid)
                self.loader_armed = False
            if not self.loader_armed and self.target() is not None:
                self.loader_armed = self.session.lifecycle.arm_at_start(self.target_)
        except Exception as exc:
            warn(f"new objfile: {exc}")
