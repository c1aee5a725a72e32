"""How gdb feeds the trap engine: `catch signal` and `catch syscall` catchpoints whose condition
is a Python function (the engine decides stop or resume without a round trip through the prompt),
an internal breakpoint at the arm point, and the user's `handle` settings saved and restored."""
from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...core.target import SigInfo
from ...engines.lifecycle import Kind, arm_function
from ...engines.recorder import Decision
from ...engines.session import Session
from ...isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP, SYSCALL_NAMES
from ...render.console import to_text
from .console import warn as _warn
from .stepping import GdbStepControl
from .target import GdbTarget
from .threadhold import SI_TKILL, ThreadHolder

SIGNAL_NAMES = {SIGBUS: "SIGBUS", SIGTRAP: "SIGTRAP"}
SI_KERNEL = 0x80  # x86: the si_code of the SIGTRAP an int3 raises
INT3 = b"\xcc"


def _x86_64() -> bool:
    """Whether the loaded program (or, with none, gdb's current architecture) is x86-64."""
    try:
        name = gdb.selected_inferior().architecture().name()
    except (gdb.error, AttributeError):
        return True
    return name.startswith("i386:x86-64")


def _target_non_stop() -> bool:
    """Whether gdb drives the process non-stop underneath (set non-stop on, or gdb's own
    all-stop-on-non-stop: `maint show target-non-stop`)."""
    if gdb.parameter("non-stop"):
        return True
    text = gdb.execute("maint show target-non-stop", to_string=True)
    m = re.search(r"is (?:auto \(currently (on|off)\)|(on|off))", text)
    return m is not None and "on" in (m.group(1), m.group(2))


def read_handle(sig: str) -> tuple[bool, bool, bool]:
    """(stop, print, pass) as `info signals SIG` shows them."""
    text = gdb.execute(f"info signals {sig}", to_string=True)
    for line in text.splitlines():
        if line.startswith(sig + " ") or line.startswith(sig + "\t"):
            f = line.split()
            return (f[1] == "Yes", f[2] == "Yes", f[3] == "Yes")
    raise gdb.error(f"cannot read gdb's settings for {sig}")


def set_handle(sig: str, stop: bool, prnt: bool, pas: bool) -> None:
    words = ("stop" if stop else "nostop", "print" if prnt else "noprint", "pass" if pas else "nopass")
    gdb.execute(f"handle {sig} {' '.join(words)}", to_string=True)


class ArmPoint(gdb.Breakpoint):
    """Internal breakpoint at `main` (or the entry): arms every thread and never stops."""

    def __init__(self, hooks: GdbHooks, spec: str) -> None:
        # A libc symbol is not known before `run` loads libc: let the breakpoint be pending.
        pending = gdb.parameter("breakpoint pending")
        gdb.execute("set breakpoint pending on", to_string=True)
        try:
            super().__init__(spec, internal=True)
        finally:
            gdb.execute(f"set breakpoint pending {'auto' if pending is None else ('on' if pending else 'off')}", to_string=True)
        self.silent = True
        self.hooks = hooks

    def stop(self) -> bool:
        try:
            self.hooks.on_arm_point()
        except Exception as exc:  # never let a hook error stop the user's program
            _warn(f"arming failed: {exc}")
        return False


class GdbHooks:
    """All of ualdbg's presence in one gdb: installed by `break`/`trace start`, removed by `off`.
    What the engines do at each event of the process is the session's lifecycle
    (engines/lifecycle.py); this translates gdb's events into its calls and carries out its
    verdicts with gdb's means (catchpoints, `handle` settings, held threads)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.target_ = GdbTarget()
        self.installed = False
        self.catchpoints: list[int] = []
        self.draining: set[int] = set()  # threads with an #AC SIGBUS still pending at `off`
        self.arm_point: ArmPoint | None = None
        self.saved_handles: dict[str, tuple[bool, bool, bool]] = {}
        # Current `handle SIG pass` state while installed: gdb decides at resume time whether a
        # thread's stop signal goes to the program, so each condition sets it for its signal.
        self.passing: dict[int, bool] = {SIGBUS: False, SIGTRAP: False}
        self.report_pending: list[str] | None = None
        self.env_fixed = False
        self.restore_pass_on_resume = False
        self.seen_pid: int | None = None
        self.loader_armed = False
        self.step_control = GdbStepControl(self)  # the step engine's primitives (stepping.py)
        # Non-stop mode: SIGTRAPs ualdbg sent to hold running threads (threadhold.py) that gdb
        # has yet to report, per thread: the SIGTRAP catchpoint swallows them, even after `off`.
        self.kicks: dict[int, int] = {}
        self.warned_all_stop = False
        # A fault performed in SH's delay slot (engines/fixup.py): the thread stops silently,
        # takes one `stepi`, and resumes where its branch goes (finish_slot). The batch driver
        # calls finish_slot itself; at the prompt the stop event does, then continues.
        self.slot_pending = False
        self.finishing_slot = False
        self.users_cli_notifications = False
        self.driver = False
        _SignalFunction(self)
        _SyscallFunction(self)
        gdb.events.stop.connect(self.on_stop)
        gdb.events.exited.connect(self.on_exit)
        gdb.events.cont.connect(self.on_resume)
        if hasattr(gdb.events, "gdb_exiting"):
            gdb.events.gdb_exiting.connect(lambda event: self.before_detach())
        self._define_detach_hook()
        gdb.events.new_objfile.connect(self.on_new_objfile)
        gdb.events.thread_exited.connect(self.on_thread_exit) if hasattr(gdb.events, "thread_exited") else None
        gdb.events.new_thread.connect(self.on_new_thread)
        gdb.events.before_prompt.connect(self.on_prompt)
        session.events.subscribe(Kind.STEP_ARMED, lambda target: self.hint_all_stop())

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
        e = self.session.engine
        return set(e.armed) | set(e.pending) | set(e.tf_suspect) | set(self.session.step.threads)

    @contextmanager
    def hold_running(self, only: set[int] | None = None) -> Iterator[None]:
        """Non-stop mode: hold every running thread stopped for the length of one command
        (`off`, `break`, `trace start|stop`, a detach), so the engines reach every thread's
        flags at once, as in all-stop mode; the threads go on when gdb collects the stops
        (threadhold.py). Nothing to do in all-stop mode, where a command runs with every
        thread stopped."""
        inf = gdb.selected_inferior()
        running = [int(t.ptid[1]) for t in inf.threads() if t.is_valid() and t.is_running()] if inf.pid else []
        running = [tid for tid in running if only is None or tid in only]
        holder = ThreadHolder(inf.pid) if running else None
        if holder is not None and (self.target_.remote() or not holder.usable()):
            gdb.write(f"ualdbg: {len(running)} running thread(s) cannot be reached here (not a native x86-64 "
                      "process): `interrupt -a` first\n", gdb.STDERR)
            holder = None
        held = self.target_.held
        try:
            if holder is not None:
                for tid in running:
                    if holder.kick(tid) and holder.wait_stopped(tid):
                        info = holder.stop_info(tid)
                        if (info is not None and info.is_kick()) or holder.trap_pending(tid):
                            self.kicks[tid] = self.kicks.get(tid, 0) + 1
                        held[tid] = holder
                    elif holder.state(tid) is not None:
                        _warn(f"thread {tid} did not stop for ualdbg (uninterruptible?): its flags are unchanged")
            yield
        finally:
            if held:
                held.clear()
                gdb.execute("maint flush register-cache", to_string=True)

    def _is_kick(self) -> bool:
        """The current SIGTRAP is one ualdbg sent to hold the thread (tgkill from gdb)."""
        try:
            si = gdb.parse_and_eval("$_siginfo")
            return (int(si["si_code"]) == SI_TKILL
                    and int(si["_sifields"]["_kill"]["si_pid"]) == os.getpid())
        except gdb.error:
            return False

    def _swallow_kick(self, tid: int) -> int:
        left = self.kicks.get(tid, 1) - 1
        if left > 0:
            self.kicks[tid] = left
        else:
            self.kicks.pop(tid, None)
        self._set_pass(SIGTRAP, False)
        return 0

    def install(self) -> None:
        self.fix_environment()
        if self.catchpoints and not self.installed:
            self.finish_drain()  # armed again: pending faults go through the new catchpoints
        if self.installed:
            self._place_arm_point()
            return
        for sig in ("SIGBUS", "SIGTRAP"):
            self.saved_handles[sig] = read_handle(sig)
        # PLATFORM.md: `noprint` silently means `nostop`; with `nopass` the program would
        # re-fault forever. Our catchpoint explains the signal; `nopass` drops it on resume.
        set_handle("SIGBUS", True, True, False)
        set_handle("SIGTRAP", True, True, False)
        self.passing = {SIGBUS: False, SIGTRAP: False}
        self.catchpoints = []
        catches = [("signal SIGBUS", f"$_ualdbg_signal({SIGBUS})")]
        if _x86_64():
            # SIGTRAP ends an EFLAGS.TF step-over; the syscall numbers are x86-64's (and qemu's
            # gdb stub, where other architectures run, can catch no syscalls).
            catches += [("signal SIGTRAP", f"$_ualdbg_signal({SIGTRAP})"),
                        ("syscall " + " ".join(str(n) for n in SYSCALL_NAMES), "$_ualdbg_syscall()")]
        for spec, fn in catches:
            gdb.execute(f"catch {spec}", to_string=True)
            num = int(gdb.parse_and_eval("$bpnum"))
            gdb.execute(f"condition {num} {fn}", to_string=True)
            self.catchpoints.append(num)
        self._place_arm_point()
        self.installed = True

    def _arm_spec(self) -> str | None:
        """The arm point's breakpoint with `--at main` (lifecycle.arm_function)."""
        if self.session.at != "main":
            return None
        try:
            gdb.execute("info address main", to_string=True)
            has_main = True
        except gdb.error:
            has_main = False
        name, said = arm_function(has_main)
        if said:
            gdb.write(said + "\n")
        return name

    def _place_arm_point(self) -> None:
        spec = self._arm_spec()
        if self.arm_point is not None and self.arm_point.is_valid():
            if self.arm_point.location == spec:
                return
            self.arm_point.delete()
        self.arm_point = None
        if spec is not None:
            self.arm_point = ArmPoint(self, spec)

    def _unreported_alignment_faults(self) -> set[int]:
        """Threads (other than the current one) whose last stop is an #AC SIGBUS gdb has not
        reported yet: in all-stop mode, a thread that faulted while gdb was stopping everything
        for another thread's event keeps its SIGBUS pending, and gdb reports it at the next
        resume, after `off` has cleared that thread's AC."""
        found: set[int] = set()
        cur = gdb.selected_thread()
        if cur is None or self.target() is None:
            return found
        try:
            for t in gdb.selected_inferior().threads():
                if t == cur or not t.is_valid():
                    continue
                held = self.target_.held.get(int(t.ptid[1]))
                if held is not None:  # non-stop: a running thread ualdbg holds stopped
                    stop = held.stop_info(int(t.ptid[1]))
                    if stop is not None and stop.signo == SIGBUS and stop.code == BUS_ADRALN:
                        found.add(int(t.ptid[1]))
                    continue
                t.switch()
                try:
                    si = gdb.parse_and_eval("$_siginfo")
                    if int(si["si_signo"]) == SIGBUS and int(si["si_code"]) == BUS_ADRALN:
                        found.add(int(t.ptid[1]))
                except gdb.error:
                    pass
        finally:
            cur.switch()
        return found

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.draining = self._unreported_alignment_faults()
        # The SIGBUS catchpoint swallows those faults first, the SIGTRAP one the stops of the
        # threads held in non-stop mode (finish_drain); the syscall catchpoint goes.
        keep = self.catchpoints[:2] if self.kicks else self.catchpoints[:1] if self.draining else []
        for num in self.catchpoints:
            if num not in keep:
                gdb.execute(f"delete {num}", to_string=True)
        self.catchpoints = keep
        self.installed = False
        if self.arm_point is not None and self.arm_point.is_valid():
            self.arm_point.delete()
        self.arm_point = None
        if not keep:
            self._restore_handles()

    def drained(self) -> bool:
        """After `off`: every pending fault and every stop of a held thread was collected."""
        if not self.draining and not self.kicks:
            return True
        if self.target() is None and not gdb.selected_inferior().pid:
            return True
        running = {int(t.ptid[1]) for t in gdb.selected_inferior().threads() if t.is_valid() and t.is_running()}
        # A thread still running in non-stop mode may yet report its fault: keep it.
        self.draining &= self._unreported_alignment_faults() | running
        return not self.draining and not self.kicks

    def finish_drain(self) -> None:
        """The pending faults are swallowed (or their threads moved on): now let go of SIGBUS."""
        for num in self.catchpoints:
            try:
                gdb.execute(f"delete {num}", to_string=True)
            except gdb.error:
                pass
        self.catchpoints = []
        self.draining = set()
        self.kicks.clear()
        self._restore_handles()

    def _restore_handles(self) -> None:
        for sig, (stop, prnt, pas) in self.saved_handles.items():
            if sig == "SIGBUS" and pas and self.target() is not None:
                # A thread stopped at an #AC still holds SIGBUS as its stop signal; gdb drops it
                # at the next `continue` only while SIGBUS is nopass (clear_proceed_status), so
                # the user's `pass` comes back once the program has resumed.
                set_handle(sig, stop, prnt, False)
                self.restore_pass_on_resume = True
            else:
                set_handle(sig, stop, prnt, pas)

    def _define_detach_hook(self) -> None:
        """A detached process runs on with no tracer: any AC left set would kill it at its next
        unaligned access. gdb has no Python detach event, so use `hook-detach`, unless the
        user has a hook-detach of their own."""
        try:
            existing = gdb.execute("show user hook-detach", to_string=True)
        except gdb.error:
            existing = ""
        if existing.strip() and "ualdbg" not in existing:
            return
        gdb.execute("define hook-detach\npython from ualdbg.adapters.gdb.install import before_detach; before_detach()\nend",
                    to_string=True)

    def before_detach(self) -> None:
        try:
            with self.hold_running(self.touched_threads()):
                self.session.lifecycle.before_detach(self.target() or (self.target_ if self.target_.held else None))
        except Exception as exc:
            _warn(f"disarming before detach: {exc}")

    def on_resume(self, event: Any) -> None:
        if self.restore_pass_on_resume and not self.installed:
            self.restore_pass_on_resume = False
            stop, prnt, pas = self.saved_handles["SIGBUS"]
            set_handle("SIGBUS", stop, prnt, pas)

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

    # -- engine events -----------------------------------------------------------------------
    def on_arm_point(self) -> None:
        if not self.session.step.enabled:
            # The trap engine's arming may call prctl: the target must know that gdb is inside
            # a breakpoint's stop(), where no inferior call can run.
            self.target_.in_stop_callback = True
            try:
                self.session.lifecycle.arm_point(self.target_, self.step_control)
            finally:
                self.target_.in_stop_callback = False
            return
        with self.target_.event():
            self.session.lifecycle.arm_point(self.target_, self.step_control)

    def on_signal(self, signo: int) -> int:
        s = self.session
        with self.target_.event():
            if signo == SIGTRAP and self.kicks and self.target_.current_tid() in self.kicks and self._is_kick():
                return self._swallow_kick(self.target_.current_tid())
            if not self.installed:
                return self._drain(signo)
            if signo == SIGTRAP and s.step.enabled:
                stepped = self.step_control.on_trap()
                if stepped is not None:
                    return stepped
            if signo == SIGTRAP and self.target_.current_tid() in s.engine.pending:
                # The single-step trap after a fault ran with AC clear: ours, no siginfo needed.
                self._set_pass(SIGTRAP, False)
                return 0 if s.engine.on_signal(self.target_, SigInfo(SIGTRAP, 0, None)) is Decision.RESUME else 1
            info = self.target_.siginfo() or s.engine.siginfo_unavailable(self.target_, signo)
            if info is None:
                return 1
            decision, report = s.lifecycle.fault(self.target_, info)
            if decision is Decision.NOT_OURS:
                return self._as_user_would(info)
            self._set_pass(info.signo, False)
            if decision is Decision.STEP_THEN_RESUME:
                self.slot_pending = True
                self._silence_catchpoints(True)
                return 1
            if decision is Decision.STOP:
                self.report_pending = report
                return 1
            return 0

    def _drain(self, signo: int) -> int:
        """After `off`: a fault that happened before it, reported only now. Its thread's AC is
        clear, so resuming without the signal runs the instruction as if ualdbg never was."""
        info = self.target_.siginfo()
        tid = self.target_.current_tid()
        if info is not None and signo == SIGBUS and info.code == BUS_ADRALN and tid in self.draining:
            self.draining.discard(tid)
            return 0
        return self._as_user_would(info) if info is not None else 1

    def _as_user_would(self, info: Any) -> int:
        """A signal ualdbg has no business with: behave as the user's `handle` says."""
        name = SIGNAL_NAMES.get(info.signo)
        if info.signo == SIGTRAP and info.code == SI_TKILL and self._is_kick():
            return self._swallow_kick(self.target_.current_tid())  # one ualdbg did not count on
        if info.signo == SIGTRAP and info.code > 0:
            if not self._program_breakpoint(info):
                self._set_pass(SIGTRAP, False)
                return 0  # gdb's own breakpoints and steps: let gdb decide, never pass them on
        stop, prnt, pas = self.saved_handles.get(name or "", (True, True, True))
        # A SIGTRAP the program raised (si_code <= 0) or a SIGBUS that is no #AC: the program's.
        self._set_pass(info.signo, pas)
        if prnt and not stop:
            gdb.write(f"\nProgram received signal {name}.\n")
        return 1 if stop else 0

    def _program_breakpoint(self, info: Any) -> bool:
        """The program's own `int3`. gdb has already backed the PC up onto it, taking it for one
        of its breakpoints, and puts it back only for a signal nothing explains; our catchpoint
        explains every SIGTRAP, so without this the int3 would run again forever. Move the PC
        past it, as gdb would, and let the user's `handle SIGTRAP` decide. (gdb reads its own
        breakpoints' shadow bytes, so an int3 read at the PC is never one of gdb's.)"""
        if info.code != SI_KERNEL or "x86-64" not in self.target_.arch():
            return False
        pc = self.target_.read_register("rip")
        if self.target_.read_memory(pc, 1) != INT3:
            return False
        self.target_.write_register("rip", pc + len(INT3))
        return True

    def _set_pass(self, signo: int, pas: bool) -> None:
        if signo in self.passing and pas != self.passing[signo]:
            set_handle(SIGNAL_NAMES[signo], True, True, pas)
            self.passing[signo] = pas

    def on_syscall(self) -> int:
        with self.target_.event():
            self.session.lifecycle.syscall(self.target_)
            if self.session.step.enabled:
                return self.step_control.on_syscall()
        return 0

    def _silence_catchpoints(self, silent: bool) -> None:
        for bp in gdb.breakpoints():
            if bp.number in self.catchpoints:
                bp.silent = silent
        try:  # the stop's location line too (gdb 12+), the user's own setting kept
            if silent:
                self.users_cli_notifications = gdb.parameter("suppress-cli-notifications")
            gdb.execute(f"set suppress-cli-notifications {'on' if silent or self.users_cli_notifications else 'off'}",
                        to_string=True)
        except (gdb.error, RuntimeError):
            pass

    def finish_slot(self) -> bool:
        """The step and the PC a STEP_THEN_RESUME decision asked for; False when none is due."""
        if not self.slot_pending:
            return False
        self.slot_pending = False
        catch = None
        try:
            fixup = self.session.engine.fixup
            to = fixup.slot_catch(self.target_.current_tid()) if fixup is not None else None
            if to is not None:
                # gdb steps MIPS by a breakpoint after the `nop`; a taken branch jumps past it.
                catch = gdb.Breakpoint(f"*{to:#x}", internal=True)
                catch.silent = True
            gdb.execute("stepi", to_string=True)
            if fixup is not None and gdb.selected_inferior().pid:
                with self.target_.event():
                    fixup.finish_slot(self.target_, self.target_.current_tid())
        finally:
            if catch is not None and catch.is_valid():
                catch.delete()
            self._silence_catchpoints(False)
        return True

    def _finish_slot_and_continue(self) -> None:
        """At the prompt (from the stop event: gdb runs the step and the resume from there): a
        loop, not a recursion, over consecutive delay-slot faults."""
        if self.finishing_slot:
            return  # a stop inside the loop below: the loop takes it
        self.finishing_slot = True
        try:
            while self.finish_slot():
                gdb.execute("continue")
        except gdb.error as exc:
            _warn(f"after a fault in a delay slot: {exc}")
        finally:
            self.finishing_slot = False

    # -- gdb events --------------------------------------------------------------------------
    def on_stop(self, event: Any) -> None:
        if self.slot_pending and not self.driver:
            self._finish_slot_and_continue()
            return
        try:
            if not self.installed and self.catchpoints and self.drained():
                self.finish_drain()
            if self.report_pending:
                gdb.write(to_text(self.report_pending, color=sys.stdout.isatty() and "NO_COLOR" not in os.environ))
                self.report_pending = None
            target = self.target()
            if target is not None and (self.session.armed or self.session.engine.pending):
                if gdb.selected_inferior().was_attached:
                    said = self.session.lifecycle.attached(target, self.step_control)
                    if said:
                        gdb.write(said + "\n")
                self.session.lifecycle.stopped(target)
        except Exception as exc:
            _warn(f"stop handler: {exc}")

    def on_prompt(self) -> None:
        try:
            if not self.installed and self.catchpoints and self.drained():
                self.finish_drain()
        except Exception as exc:
            _warn(f"prompt: {exc}")

    def on_exit(self, event: Any) -> None:
        if not self.installed and self.catchpoints:
            self.finish_drain()
        self.session.program.exit_status = int(event.exit_code) if hasattr(event, "exit_code") else None
        said = self.session.lifecycle.exited()
        if said:
            gdb.write(said + "\n")

    def on_new_thread(self, event: Any) -> None:
        try:
            self.hint_all_stop()
        except Exception as exc:
            _warn(f"new thread: {exc}")

    def hint_all_stop(self) -> None:
        """Once: the step engine stepping a program of several threads on a target that is not
        non-stop, where gdb stops every thread at each trap of a stepped thread (measured in
        tests/step_debugger/test_step_nonstop.py). gdb 13 runs native processes non-stop
        underneath all-stop mode (`maint show target-non-stop`: auto, currently on): no line."""
        step = self.session.step
        if self.warned_all_stop or not (step.enabled and step.armed) or not gdb.selected_inferior().pid:
            return
        if len(self.target_.live_threads()) < 2 or _target_non_stop():
            return
        self.warned_all_stop = True
        gdb.write("ualdbg: all-stop mode: threads outside the step scope stop at each step event; "
                  "`set non-stop on` before `run` keeps them running\n")

    def on_thread_exit(self, event: Any) -> None:
        try:
            tid = int(event.inferior_thread.ptid[1])
            self.kicks.pop(tid, None)
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
            _warn(f"new objfile: {exc}")


class _SignalFunction(gdb.Function):
    """$_ualdbg_signal(): the condition of ualdbg's signal catchpoints (1 = stop)."""

    def __init__(self, hooks: GdbHooks) -> None:
        super().__init__("_ualdbg_signal")
        self.hooks = hooks

    def invoke(self, signo: Any) -> int:
        try:
            return self.hooks.on_signal(int(signo))
        except Exception as exc:
            _warn(f"while handling a signal: {exc}")
            return 1


class _SyscallFunction(gdb.Function):
    """$_ualdbg_syscall(): the condition of ualdbg's syscall catchpoint (never stops)."""

    def __init__(self, hooks: GdbHooks) -> None:
        super().__init__("_ualdbg_syscall")
        self.hooks = hooks

    def invoke(self) -> int:
        try:
            return self.hooks.on_syscall()
        except Exception as exc:
            _warn(f"while handling a syscall: {exc}")
            return 0
