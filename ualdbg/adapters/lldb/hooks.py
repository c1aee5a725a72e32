"""How lldb feeds the trap engine. lldb has no conditional signal catchpoints and no `catch
syscall`, so: a scripted stop hook sees every SIGBUS stop (`process handle SIGBUS -s true -p false
-n false`) and auto-continues the ones that must not stop; a scripted thread plan single-steps the
faulting instruction with AC clear; breakpoints with Python callbacks that never stop arm at
`main` (or the loader's entry) and stand in for syscall catchpoints at the `syscall` instructions
of clone/fork/vfork/clone3 and rt_sigprocmask. Everything is found through the execution
context lldb passes in, never through the `lldb.process`/`lldb.thread` globals."""
from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...engines.lifecycle import Kind, arm_function
from ...engines.procfs import blocked_signals
from ...engines.recorder import Decision
from ...engines.session import Session
from ...isa.arch import BUS_ADRALN, SIGBUS, SIGTRAP
from ...isa.arch.x86_64 import TRAP_FLAGS
from ...render.console import to_text
from ...symbols.maps import is_loader_path
from .registry import HOOKS
from .stepping import LldbStepControl
from .syscall_sites import SyscallSite, find_sites
from .target import FaultSteppingLldbTarget, LldbTarget

BP_NAME = "ualdbg"  # every breakpoint ualdbg sets carries it; hidden from `breakpoint list`
_THIS = __name__  # callbacks and classes are named to lldb by their dotted path from here
_HOOKS: dict[int, LldbHooks] = HOOKS  # lldb debugger ID -> the hooks of its session


def _debug() -> bool:
    return bool(os.environ.get("UALDBG_DEBUG"))


def _warn(stream: Any, message: str) -> None:
    text = f"ualdbg: {message}\n" + (traceback.format_exc() if _debug() else "")
    if stream is not None:
        stream.Print(text)
    else:
        import sys

        sys.stderr.write(text)


def hooks_of(debugger: lldb.SBDebugger) -> LldbHooks | None:
    return _HOOKS.get(debugger.GetID())


def _hooks_of_thread(thread: lldb.SBThread) -> LldbHooks | None:
    return hooks_of(thread.GetProcess().GetTarget().GetDebugger())


# -- signal settings -----------------------------------------------------------------------------
_HANDLE_ROW = re.compile(r"^SIGBUS\s+(true|false|not set)\s+(true|false|not set)\s+(true|false|not set)\s*$", re.M)


def _bool(text: str) -> bool | None:
    return None if text == "not set" else text == "true"


class SignalSettings:
    """The user's `process handle SIGBUS` (pass, stop, notify): what lldb holds for the target
    (None: not set, lldb's default applies) and, with a live process, what it uses now."""

    def __init__(self, target_mods: tuple[bool | None, ...], live: tuple[bool, bool, bool] | None) -> None:
        self.target_mods = target_mods
        self.live = live

    @classmethod
    def read(cls, debugger: lldb.SBDebugger, process: lldb.SBProcess | None) -> SignalSettings:
        out = _command(debugger, "process handle -t SIGBUS")
        m = _HANDLE_ROW.search(out)
        mods = tuple(_bool(v) for v in m.groups()) if m else (None, None, None)
        live = None
        if process is not None and process.IsValid():
            sigs = process.GetUnixSignals()
            live = (not sigs.GetShouldSuppress(SIGBUS), sigs.GetShouldStop(SIGBUS), sigs.GetShouldNotify(SIGBUS))
        return cls(mods, live)

    def effective(self) -> tuple[bool, bool, bool]:
        """(pass, stop, notify) as lldb would act on them without ualdbg."""
        if self.live is not None:
            return self.live
        default = (True, True, True)  # lldb's Linux defaults for SIGBUS
        return tuple(d if v is None else v for v, d in zip(self.target_mods, default))  # type: ignore[return-value]

    def restore(self, debugger: lldb.SBDebugger, process: lldb.SBProcess | None) -> None:
        _command(debugger, "process handle -c SIGBUS")
        words = [f"{flag} {'true' if v else 'false'}" for flag, v in zip(("-p", "-s", "-n"), self.target_mods) if v is not None]
        if words:
            _command(debugger, f"process handle {' '.join(words)} SIGBUS")
        if process is not None and process.IsValid():
            pas, stop, notify = self.live if self.live is not None else self.effective()
            sigs = process.GetUnixSignals()
            sigs.SetShouldSuppress(SIGBUS, not pas)
            sigs.SetShouldStop(SIGBUS, stop)
            sigs.SetShouldNotify(SIGBUS, notify)


def _command(debugger: lldb.SBDebugger, line: str) -> str:
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(line, result)
    if not result.Succeeded():
        raise RuntimeError(f"`{line}` failed: {(result.GetError() or '').strip()}")
    return result.GetOutput() or ""


# -- where syscalls are made ---------------------------------------------------------------------
_TASK = TRAP_FLAGS.task_creating_syscalls
_MASK = TRAP_FLAGS.sigprocmask_syscall
_WANTED = frozenset(_TASK | {_MASK})
_SIG_BLOCK = 0
_TRAP_BIT = 1 << (SIGTRAP - 1)


class ModuleSites:
    """The syscall sites of one module, by file address."""

    def __init__(self, sites: list[SyscallSite]) -> None:
        self.sites = sites
        self.nr_at = {site.addr: site.nr for site in sites}
        # rt_sigprocmask(SIG_BLOCK, ...) with the constant made in the code: glibc blocking
        # signals for itself (around clone3 and tgkill, at a thread's end). An entry breakpoint
        # there keeps SIGTRAP open (open_sigtrap).
        self.mask_entries = {site.addr for site in sites if site.nr == _MASK and site.zero_arg}
        # Where lldb's step over one of our breakpoints ends (see _after_our_breakpoint).
        self.after_ours = ({site.addr + 2 for site in sites if site.nr in _TASK or site.addr in self.mask_entries}
                           | {site.after_exit for site in sites})
        self.nr_at_exit = {site.exit_addr: site.nr for site in sites}


_SITE_CACHE: dict[str, ModuleSites] = {}  # module UUID (or path) -> its sites


def _module_sites(module: lldb.SBModule) -> ModuleSites:
    key = module.GetUUIDString() or str(module.GetFileSpec())
    cached = _SITE_CACHE.get(key)
    if cached is not None:
        return cached
    sites: list[SyscallSite] = []
    stack = [module.GetSectionAtIndex(i) for i in range(module.GetNumSections())]
    while stack:
        sec = stack.pop()
        if sec.GetNumSubSections():
            stack.extend(sec.GetSubSectionAtIndex(i) for i in range(sec.GetNumSubSections()))
            continue
        if not sec.GetPermissions() & lldb.ePermissionsExecutable or sec.GetFileByteSize() == 0:
            continue
        data = sec.GetSectionData()
        err = lldb.SBError()
        raw = data.ReadRawData(err, 0, data.GetByteSize()) if data.GetByteSize() else b""
        if err.Success() and raw:
            sites.extend(find_sites(bytes(raw), sec.GetFileAddress(), _WANTED, _TASK))
    found = _SITE_CACHE[key] = ModuleSites(sites)
    return found


def _site_addresses(module: lldb.SBModule, kind: str) -> list[int]:
    """File addresses in `module` for one kind of site breakpoint: "entry" (the `syscall` of a
    task-creating syscall, or of glibc's own rt_sigprocmask(SIG_BLOCK, ...)), "exit" (the
    instruction after a followed syscall), "exit_call" (libc's `_exit`, whose call ends the
    trace's clock)."""
    if kind == "exit_call":
        out = []
        for ctx in module.FindSymbols("_exit", lldb.eSymbolTypeCode):
            start = ctx.GetSymbol().GetStartAddress()
            if start.IsValid():
                out.append(start.GetFileAddress())
        return out
    found = _module_sites(module)
    if kind == "entry":
        return [site.addr for site in found.sites if site.nr in _TASK or site.addr in found.mask_entries]
    return [site.exit_addr for site in found.sites]


def add_site_locations(bkpt: lldb.SBBreakpoint, module: lldb.SBModule, kind: str) -> None:
    for addr in _site_addresses(module, kind):
        bkpt.AddLocation(module.ResolveFileAddress(addr))


class SyscallSiteResolver:
    """Scripted breakpoint resolver for the site breakpoints. It adds nothing until the hooks
    activate the sites (at the arm point): lldb prints "N locations added to breakpoint M" for
    every location a resolver adds after creation, but not for `AddLocation` from a callback.
    Once active it follows modules as they load (dlopen, exec) by itself."""

    def __init__(self, bkpt: lldb.SBBreakpoint, extra_args: lldb.SBStructuredData, internal_dict: Any) -> None:
        self.bkpt = bkpt
        self.kind = extra_args.GetValueForKey("kind").GetStringValue(16)

    def __callback__(self, sym_ctx: lldb.SBSymbolContext) -> None:
        module = sym_ctx.GetModule()
        target = self.bkpt.GetTarget()
        hooks = hooks_of(target.GetDebugger())
        if hooks is None or not module.IsValid():
            return
        if not hooks.sites_active and self.kind == "entry":
            # lldb runs no stop hook at the stop that ends `process attach`; modules load
            # during it, so this is where ualdbg first sees an attached process.
            process = target.GetProcess()
            if process.IsValid() and process.GetState() == lldb.eStateStopped and process.GetNumThreads():
                said = hooks.see_process(process)
                if said:
                    import sys

                    sys.stdout.write(said + "\n")
        if hooks.sites_active:
            add_site_locations(self.bkpt, module, self.kind)

    def __get_depth__(self) -> int:
        return lldb.eSearchDepthModule

    def get_short_help(self) -> str:
        return f"ualdbg: syscall {self.kind} sites"


class EntryResolver:
    """Scripted breakpoint resolver for `--at start`: the second instruction of the dynamic
    loader (or of a static program), since lldb steps over a breakpoint at the PC it launched
    at without reporting it."""

    def __init__(self, bkpt: lldb.SBBreakpoint, extra_args: lldb.SBStructuredData, internal_dict: Any) -> None:
        self.bkpt = bkpt

    def __callback__(self, sym_ctx: lldb.SBSymbolContext) -> None:
        module = sym_ctx.GetModule()
        target = self.bkpt.GetTarget()
        if not module.IsValid() or not (is_loader_path(module.GetFileSpec().GetFilename() or "")
                                        or module == target.GetModuleAtIndex(0)):
            return
        entry = module.GetObjectFileEntryPointAddress()
        if not entry.IsValid():
            return
        insns = target.ReadInstructions(entry, 1)
        size = insns.GetInstructionAtIndex(0).GetByteSize() if insns.GetSize() else 0
        if size:
            self.bkpt.AddLocation(module.ResolveFileAddress(entry.GetFileAddress() + size))

    def __get_depth__(self) -> int:
        return lldb.eSearchDepthModule


# -- breakpoint callbacks: they run while lldb decides whether to stop, and never stop -----------
def arm_point_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    hooks = _hooks_of_thread(frame.GetThread())
    if hooks is not None:
        try:
            hooks.on_arm_point(frame.GetThread())
        except Exception as exc:  # never let a hook error stop the user's program
            _warn(None, f"arming failed: {exc}")
    return False


def site_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    thread = frame.GetThread()
    hooks = _hooks_of_thread(thread)
    if hooks is not None:
        try:
            return hooks.on_site(thread, extra_args.GetValueForKey("kind").GetStringValue(16))
        except Exception as exc:
            _warn(None, f"while following a syscall: {exc}")
    return False


def exit_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    hooks = _hooks_of_thread(frame.GetThread())
    if hooks is not None:
        hooks.on_exit_call(int(frame.FindRegister("rdi").GetValueAsUnsigned()) & 0xFF)
    return False


class FaultStep:
    """Scripted thread plan: single-step the thread once (AC is clear), then arm it again and
    let the plans below (the user's `next`, `finish`... or the base plan) carry on. The other
    threads wait for that one instruction, so no other stop can come between."""

    def __init__(self, thread_plan: lldb.SBThreadPlan, args_data: Any, internal_dict: Any = None) -> None:
        self.plan = thread_plan
        self.thread = thread_plan.GetThread()
        self.start_pc = self.thread.GetFrameAtIndex(0).GetPC()
        leave = args_data.GetValueForKey("leave") if args_data is not None and args_data.IsValid() else None
        self.leave = bool(leave is not None and leave.IsValid() and leave.GetBooleanValue())
        if hasattr(thread_plan, "SetStopOthers"):
            thread_plan.SetStopOthers(True)

    def _done(self) -> None:
        hooks = _hooks_of_thread(self.thread)
        if hooks is not None:
            if self.leave:
                hooks.left(self.thread)
            else:
                hooks.fault_stepped(self.thread)
        self.plan.SetPlanComplete(True)

    def _stale_fault(self) -> bool:
        """The thread still shows the SIGBUS this plan steps over: it has not run yet (another
        thread's event stopped the process first)."""
        return bool(_is_alignment_sigbus(self.thread) and self.thread.GetFrameAtIndex(0).GetPC() == self.start_pc)

    def explains_stop(self, event: lldb.SBEvent) -> bool:
        return bool(self.thread.GetStopReason() == lldb.eStopReasonTrace or self._stale_fault())

    def should_stop(self, event: lldb.SBEvent) -> bool:
        if self.thread.GetStopReason() == lldb.eStopReasonTrace:
            self._done()
        return False

    def should_step(self) -> bool:
        return True

    def is_stale(self) -> bool:
        # Another plan (a user's step) ran the instruction, or a stop moved the thread: our step
        # is done either way; arm again and get discarded.
        if self.thread.GetFrameAtIndex(0).GetPC() != self.start_pc:
            self._done()
            return True
        return False

    def stop_description(self, stream: lldb.SBStream) -> None:
        stream.Print("ualdbg: stepping over an unaligned access")


def _is_alignment_sigbus(thread: lldb.SBThread) -> bool:
    if thread.GetStopReason() != lldb.eStopReasonSignal or thread.GetStopReasonDataAtIndex(0) != SIGBUS:
        return False
    code = thread.GetSiginfo().GetChildMemberWithName("si_code")
    return bool(code.IsValid() and code.GetValueAsSigned() == BUS_ADRALN)


class StopHook:
    """`target stop-hook add -P ...StopHook`: sees every stop that reaches lldb's command level;
    returning False auto-continues it."""

    def __init__(self, target: lldb.SBTarget, extra_args: Any, internal_dict: Any) -> None:
        self.debugger_id = target.GetDebugger().GetID()

    def handle_stop(self, exe_ctx: lldb.SBExecutionContext, stream: lldb.SBStream) -> bool:
        hooks = _HOOKS.get(self.debugger_id)
        if hooks is None or not hooks.installed:
            return True
        try:
            return hooks.on_stop(exe_ctx.GetThread(), stream)
        except Exception as exc:
            _warn(stream, f"stop handler: {exc}")
            return True


# -- the hooks of one debugger -------------------------------------------------------------------
class LldbHooks:
    """All of ualdbg's presence in one lldb debugger: installed by `break`/`trace start`,
    removed by `off`. What the engines do at each event of the process is the session's
    lifecycle (engines/lifecycle.py); this translates lldb's stops and breakpoint callbacks into
    its calls and carries out its verdicts with lldb's means (signal settings, thread plans,
    breakpoints)."""

    def __init__(self, debugger: lldb.SBDebugger, session: Session) -> None:
        self.debugger = debugger
        self.session = session
        self.installed = False
        self.installed_in: lldb.SBTarget | None = None
        self.stop_hook_id: int | None = None
        self.saved: SignalSettings | None = None
        self.suppressing = True  # current `process handle SIGBUS -p` is false
        self.seen_pid: int | None = None
        self.stepping: dict[int, int] = {}  # tid -> PC of the fault its FaultStep plan runs
        self.stepped: dict[int, int] = {}  # tid -> PC where its last FaultStep ended
        self.arm_on_attach = True  # the batch driver attaches before exec and arms at main
        self.exit_time: float | None = None
        self.exit_code: int | None = None  # the status the program passed to libc's _exit
        self.sites_active = False  # the site breakpoints have their locations
        self.notices: list[str] = []  # lines for the user from install, shown by the command
        self.leaving: set[int] = set()  # threads stepping over a fault after `off`
        # tid -> (its exit breakpoint, what to put back there: ("rsi", value) or (address, bytes))
        # while its rt_sigprocmask blocks a set without SIGTRAP (open_sigtrap)
        self.set_swaps: dict[int, tuple[int, tuple[Any, Any]]] = {}
        self.deferred: SignalSettings | None = None  # the user's settings, for when they have
        self.step_control = LldbStepControl(self)  # the step engine's primitives (stepping.py)
        session.events.subscribe(Kind.STEP_ARMED, self.step_control.warn_split)
        session.events.subscribe(Kind.NEW_PROCESS, lambda pid: self._forget_steps())
        session.events.subscribe(Kind.EXITED, lambda _: self._forget_steps(exited=True))
        _HOOKS[debugger.GetID()] = self
        if hasattr(debugger, "AddDestroyCallback"):
            # lldb detaches from an attached process when it quits: nothing may stay armed
            # (with no tracer, the next unaligned access would kill the program).
            debugger.AddDestroyCallback(_on_destroy)
        # `process detach` (and its alias `detach`): lldb has no detach event, but runs an
        # override callback first; returning False lets the command go on.
        self._detach_callback = self.on_detach_command  # lldb keeps no reference of its own
        debugger.GetCommandInterpreter().SetCommandOverrideCallback("process detach", self._detach_callback)

    # -- the Host side -----------------------------------------------------------------------
    def sbtarget(self) -> lldb.SBTarget:
        target = self.debugger.GetSelectedTarget()
        return target if target.IsValid() else self.debugger.GetDummyTarget()

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
        return FaultSteppingLldbTarget(process, thread, self.queue_fault_step)

    def sync(self) -> None:
        """Catch up with what happened while no ualdbg code ran: lldb tells nobody of an exit."""
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
        self.saved = SignalSettings.read(self.debugger, process)
        # lldb's `-n false` with `-s true` still stops; our stop hook explains the stop or
        # auto-continues it, and `-p false` drops our SIGBUS on resume (a real bus error of the
        # program is passed: on_stop flips -p per stop, as the user's setting says).
        _command(self.debugger, "process handle -s true -p false -n false SIGBUS")
        self.suppressing = True
        out = _command(self.debugger, f"target stop-hook add -P {_THIS}.StopHook")
        m = re.search(r"#(\d+)", out)
        self.stop_hook_id = int(m.group(1)) if m else None
        self.sites_active = False
        for kind in ("entry", "exit", "exit_call"):
            args = lldb.SBStructuredData()
            args.SetFromJSON(f'{{"kind": "{kind}"}}')
            bp = target.BreakpointCreateFromScript(f"{_THIS}.SyscallSiteResolver", args, lldb.SBFileSpecList(),
                                                   lldb.SBFileSpecList(), False)
            bp.AddName(f"{BP_NAME}_kind_{kind}")  # no '-': lldb refuses it in names
            self._own(bp, "exit_hit" if kind == "exit_call" else "site_hit", args)
        self._place_arm_point(target)
        self.installed = True
        self.installed_in = target
        if process.IsValid() and process.GetState() == lldb.eStateStopped:
            self.ensure_sites(target)

    def ensure_sites(self, target: lldb.SBTarget) -> None:
        """Give the site breakpoints their locations in every loaded module: at the arm point
        (libc is loaded by then), after an attach, or at install when stopped. Never creates a
        breakpoint: lldb's generated callback wrappers break when one is made inside another."""
        if not self.installed or self.sites_active:
            return
        self.sites_active = True
        for bp in self._ours(target, "site_hit") + self._ours(target, "exit_hit"):
            kind = self._kind_of(bp)
            for module in target.module_iter():
                add_site_locations(bp, module, kind)

    @staticmethod
    def _kind_of(bp: lldb.SBBreakpoint) -> str:
        names = lldb.SBStringList()
        bp.GetNames(names)
        for i in range(names.GetSize()):
            name = names.GetStringAtIndex(i)
            if name.startswith(f"{BP_NAME}_kind_"):
                return name[len(f"{BP_NAME}_kind_"):]
        return ""

    def _name_permissions(self, target: lldb.SBTarget) -> None:
        # Not in `breakpoint list`, not removed by `breakpoint delete` (ualdbg off does that).
        # The command, not SBBreakpointName: lldb 19 does not apply the latter's permissions.
        _command(self.debugger, f"breakpoint name configure --allow-list false --allow-delete false "
                                f"--allow-disable false {BP_NAME}")

    def _own(self, bp: lldb.SBBreakpoint, callback: str, args: lldb.SBStructuredData | None = None) -> None:
        if not bp.IsValid():
            raise RuntimeError("lldb refused a breakpoint")
        for name in (BP_NAME, f"{BP_NAME}_{callback}"):
            if not bp.AddName(name):  # lldb refuses names with '.', '-' or spaces
                raise RuntimeError(f"lldb refused the breakpoint name {name!r}")
        if args is not None:
            err = bp.SetScriptCallbackFunction(f"{_THIS}.{callback}", args)
        else:
            err = bp.SetScriptCallbackFunction(f"{_THIS}.{callback}", lldb.SBStructuredData())
        if err is not None and hasattr(err, "Success") and not err.Success():
            raise RuntimeError(f"cannot set a breakpoint callback: {err.GetCString()}")
        bp.SetAutoContinue(False)

    def _ours(self, target: lldb.SBTarget, tag: str | None = None) -> list[lldb.SBBreakpoint]:
        found = lldb.SBBreakpointList(target)
        target.FindBreakpointsByName(BP_NAME if tag is None else f"{BP_NAME}_{tag}", found)
        return [found.GetBreakpointAtIndex(i) for i in range(found.GetSize())]

    def _arm_function(self, target: lldb.SBTarget) -> str:
        """The arm point's function with `--at main` (lifecycle.arm_function)."""
        exe = target.GetModuleAtIndex(0) if target.GetNumModules() else None
        has_main = exe is None or not exe.IsValid() or bool(exe.FindSymbols("main", lldb.eSymbolTypeCode).GetSize())
        name, said = arm_function(has_main)
        if said:
            self.notices.append(said)
        return name

    def _place_arm_point(self, target: lldb.SBTarget) -> None:
        for bp in self._ours(target, "arm_point_hit"):
            target.BreakpointDelete(bp.GetID())
        if self.session.at == "main":
            bp = target.BreakpointCreateByName(self._arm_function(target))
        else:
            bp = target.BreakpointCreateFromScript(f"{_THIS}.EntryResolver", lldb.SBStructuredData(),
                                                   lldb.SBFileSpecList(), lldb.SBFileSpecList(), False)
        self._own(bp, "arm_point_hit")
        # After the breakpoints carry the name: lldb applies a name's permissions to the
        # breakpoints that have it when they change.
        self._name_permissions(target)

    def uninstall(self) -> None:
        if not self.installed:
            return
        targets: list[lldb.SBTarget] = []
        for t in (self.installed_in, self.sbtarget()):
            if t is not None and t.IsValid() and not any(t == u for u in targets):
                targets.append(t)
        for target in targets:
            for bp in self._ours(target):
                target.BreakpointDelete(bp.GetID())
            names = lldb.SBStringList()
            target.GetBreakpointNames(names)
            for i in range(names.GetSize()):
                if names.GetStringAtIndex(i).startswith(BP_NAME):
                    target.DeleteBreakpointName(names.GetStringAtIndex(i))
        if self.stop_hook_id is not None:
            try:
                _command(self.debugger, f"target stop-hook delete {self.stop_hook_id}")
            except RuntimeError:
                pass
        self.stop_hook_id = None
        process = self.sbtarget().GetProcess()
        # A thread stopped at one of our faults still has its SIGBUS to deliver when it
        # resumes; with the user's `-p true` back, the program would die of it. Such threads
        # step over the instruction (AC is clear now) with SIGBUS still dropped, and the user's
        # setting comes back for the process when they have.
        leaving = [t for t in process if _is_alignment_sigbus(t)] if process.IsValid() else []
        self._settle_sigtraps_safely(process)
        if self.saved is not None:
            self.saved.restore(self.debugger, process)
            if leaving:
                self.deferred = self.saved
                process.GetUnixSignals().SetShouldSuppress(SIGBUS, True)
        self.saved = None
        self.stepping.clear()
        self.stepped.clear()
        self.installed = False
        self.installed_in = None
        for thread in leaving:
            self.leaving.add(int(thread.GetThreadID()))
            args = lldb.SBStructuredData()
            args.SetFromJSON('{"leave": true}')
            thread.StepUsingScriptedThreadPlan(f"{_THIS}.FaultStep", args, False)

    def left(self, thread: lldb.SBThread) -> None:
        """A thread stopped at a fault when ualdbg was turned off has stepped over it."""
        self.leaving.discard(int(thread.GetThreadID()))
        if not self.leaving and self.deferred is not None:
            if self.saved is None:  # not re-armed meanwhile
                pas = self.deferred.effective()[0]
                thread.GetProcess().GetUnixSignals().SetShouldSuppress(SIGBUS, not pas)
            self.deferred = None

    def on_detach_command(self, *argv: Any) -> bool:
        self.before_detach()
        return False  # not handled here: lldb runs `process detach` itself

    def before_detach(self) -> None:
        """Clear AC everywhere before lldb lets go of the process (quit)."""
        try:
            self.session.lifecycle.before_detach(self.target())
        except Exception as exc:
            _warn(None, f"disarming before detach: {exc}")
        self._settle_sigtraps_safely(self.sbtarget().GetProcess())

    def _settle_sigtraps_safely(self, process: lldb.SBProcess) -> None:
        if not self.set_swaps:
            return
        try:
            if process.IsValid() and process.GetState() == lldb.eStateStopped:
                self.settle_sigtraps(process, leaving=True)
        except Exception as exc:
            _warn(None, f"restoring a register: {exc}")
        self.set_swaps.clear()

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
        self.suppressing = True  # a new process starts with the target's `-p false`
        self.exit_time = self.exit_code = None
        p = self.session.program
        p.exit_status, p.exit_signal = None, None
        if self.arm_on_attach and self.session.armed and _attached(pid):
            # Armed before `process attach`: main is long past; the site breakpoints get their
            # locations, and the lifecycle arms where the process is.
            self.ensure_sites(process.GetTarget())
            return self.session.lifecycle.attached(FaultSteppingLldbTarget(process, None, self.queue_fault_step),
                                                   self.step_control)
        return None

    def _forget_steps(self, exited: bool = False) -> None:
        """A new process, an exec or an exit: the per-thread state of lldb's own steps ends
        (and at an exit, the break reports no stop will show)."""
        self.set_swaps.clear()
        self.stepping.clear()
        self.stepped.clear()
        if exited:
            self.step_control.reports.clear()

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

    # -- engine events -----------------------------------------------------------------------
    def on_arm_point(self, thread: lldb.SBThread) -> None:
        process = thread.GetProcess()
        self.see_process(process)
        self.ensure_sites(process.GetTarget())
        self.session.lifecycle.arm_point(FaultSteppingLldbTarget(process, thread, self.queue_fault_step),
                                         self.step_control)

    def on_site(self, thread: lldb.SBThread, kind: str) -> bool:
        """A syscall site breakpoint's callback: True stops there (the step engine's break)."""
        entry = kind == "entry"
        # Which syscall is known by the site (at an exit, rax holds the result).
        nr = _site_nr(thread, thread.GetFrameAtIndex(0).GetPC(), entry=entry)
        if entry and nr == _MASK:
            self.open_sigtrap(thread)
            return False
        if not entry:
            self.close_sigtrap(thread)
        if self.session.step.enabled:
            # The step engine's new threads: their first stop is the exit of the clone that
            # made them (lldb's thread plans, unlike gdb's TF, are not inherited).
            if not entry and nr in _TASK:
                return self.step_control.on_thread_start(thread)
            return False
        if self.session.engine.active and nr is not None:
            target = FaultSteppingLldbTarget(thread.GetProcess(), thread, self.queue_fault_step)
            self.session.lifecycle.syscall(target, int(thread.GetThreadID()), nr, entry)
        return False

    # -- no trap with SIGTRAP blocked -----------------------------------------------------------
    # A breakpoint or single-step trap taken by a thread that has SIGTRAP blocked makes the
    # kernel (force_sig_info_to_task) reset the program's SIGTRAP handler to SIG_DFL for the
    # whole process and unblock SIGTRAP in that thread. glibc blocks every signal around clone3
    # (pthread_create, posix_spawn) and tgkill (pthread_kill), and at a thread's end; the clone3
    # breakpoints, the exit breakpoints of those rt_sigprocmask calls and lldb's single-step
    # past each would all do it (gdb's `catch syscall` stops without a trap). So glibc's own
    # SIG_BLOCKs (the constant made in its code; never the program's pthread_sigmask) block
    # their set without SIGTRAP: the program's SIGTRAP stays deliverable, as it was, for the
    # few instructions until glibc restores the mask it saved or the thread ends.
    def open_sigtrap(self, thread: lldb.SBThread) -> None:
        """At the entry of glibc's rt_sigprocmask(SIG_BLOCK, set, oldset, 8), when it would
        block SIGTRAP: with an `oldset`, the set minus SIGTRAP goes into that buffer and rsi
        points there (the kernel reads the new set before it writes the old one, so the buffer
        ends as the program expects; rsi, which the compiler may still count on, comes back at
        the exit); without one, the set (glibc's own buffer) loses SIGTRAP until the exit."""
        process = thread.GetProcess()
        target = LldbTarget(process, thread)
        tid = int(thread.GetThreadID())
        how, nset, oset, size = (target.read_register(r, tid) for r in ("rdi", "rsi", "rdx", "r10"))
        if how != _SIG_BLOCK or not nset or size != 8 or blocked_signals(int(process.GetProcessID()), tid) & _TRAP_BIT:
            return
        raw = target.read_memory(nset, 8)
        if len(raw) != 8 or not int.from_bytes(raw, "little") & _TRAP_BIT:
            return
        stripped = (int.from_bytes(raw, "little") & ~_TRAP_BIT).to_bytes(8, "little")
        exit_pc = thread.GetFrameAtIndex(0).GetPC() + 2
        err = lldb.SBError()
        if oset:
            process.WriteMemory(oset, stripped, err)
            if err.Success():
                target.write_register("rsi", oset, tid)
                self.set_swaps[tid] = (exit_pc, ("rsi", nset))
            return
        section = lldb.SBAddress(nset, process.GetTarget()).GetSection()
        if section.IsValid() and not section.GetPermissions() & lldb.ePermissionsWritable:
            return  # a constant other threads may read meanwhile: left alone
        # Another thread in the same syscall on the same set holds its true bytes.
        raw = next((undo[1] for _pc, undo in self.set_swaps.values() if undo[0] == nset), raw)
        process.WriteMemory(nset, stripped, err)
        if err.Success():
            self.set_swaps[tid] = (exit_pc, (nset, raw))

    def _undo_swap(self, process: lldb.SBProcess, thread: lldb.SBThread, exit_pc: int, undo: tuple[Any, Any]) -> None:
        """Put back rsi while the thread is still at the syscall or its exit (elsewhere it is no
        longer the value the code counts on); the set's bytes whenever the thread lives."""
        where, what = undo
        if not thread.IsValid():
            return  # gone: its buffer may be another thread's by now
        if where == "rsi":
            if thread.GetFrameAtIndex(0).GetPC() in (exit_pc, exit_pc - 2):
                LldbTarget(process, thread).write_register("rsi", what, int(thread.GetThreadID()))
        elif not any(other[0] == where for _pc, other in self.set_swaps.values()):  # the last one out
            err = lldb.SBError()
            process.WriteMemory(where, what, err)

    def close_sigtrap(self, thread: lldb.SBThread) -> None:
        """An exit breakpoint: put back what open_sigtrap changed at this syscall's entry."""
        swap = self.set_swaps.pop(int(thread.GetThreadID()), None)
        if swap is not None:
            self._undo_swap(thread.GetProcess(), thread, *swap)

    def settle_sigtraps(self, process: lldb.SBProcess, leaving: bool) -> None:
        """At a stop the user sees, and before ualdbg lets go (`leaving`): finish the swaps of
        threads that are at their exit without its callback having run; when leaving, undo
        those of threads still at the entry (no breakpoint will be there to finish them)."""
        for tid, (exit_pc, undo) in list(self.set_swaps.items()):
            thread = process.GetThreadByID(tid) if process.IsValid() else lldb.SBThread()
            pc = thread.GetFrameAtIndex(0).GetPC() if thread.IsValid() else None
            if pc == exit_pc - 2 and not leaving:
                continue  # it has not made the syscall yet
            del self.set_swaps[tid]
            self._undo_swap(process, thread, exit_pc, undo)

    def on_exit_call(self, status: int) -> None:
        self.exit_time = time.monotonic()
        self.exit_code = status

    def queue_fault_step(self, thread: lldb.SBThread) -> None:
        self.stepping[int(thread.GetThreadID())] = thread.GetFrameAtIndex(0).GetPC()
        err = thread.StepUsingScriptedThreadPlan(f"{_THIS}.FaultStep", False)
        if not err.Success():
            raise RuntimeError(f"cannot queue a single-step: {err.GetCString()}")

    def fault_stepped(self, thread: lldb.SBThread) -> None:
        tid = int(thread.GetThreadID())
        if self.stepping.pop(tid, None) is None:
            return
        self.stepped[tid] = thread.GetFrameAtIndex(0).GetPC()
        self.session.engine.fault_stepped(LldbTarget(thread.GetProcess(), thread), tid)

    def on_stop(self, thread: lldb.SBThread, stream: lldb.SBStream) -> bool:
        """The stop hook, once per thread with a stop reason: True keeps the stop, False
        auto-continues (lldb stops if any call says stop). The step engine's break reports
        come first; then _STOP_RULES, by the thread's stop reason, decide."""
        process = thread.GetProcess()
        said = self.see_process(process)
        if said:
            stream.Print(said + "\n")
        stop = self._decide_stop(_Stop(process, thread, stream))
        if stop:
            self._settle(FaultSteppingLldbTarget(process, thread, self.queue_fault_step))
        return stop

    def _decide_stop(self, st: _Stop) -> bool:
        reason = st.thread.GetStopReason()
        step = self.session.step
        step_report = self.step_control.take_report(st.thread) if step.enabled else None
        if (not step_report and reason == lldb.eStopReasonBreakpoint and step.enabled
                and self.step_control.is_ours(st.thread)):
            # An entry or return breakpoint of the step engine: it decides, like a callback.
            if not self.step_control.on_breakpoint(st.thread):
                return False
            step_report = self.step_control.take_report(st.thread)
        if step_report:  # the step engine stopped before an offending instruction
            self._print_report(st.stream, step_report)
            return True
        for applies, verdict in _STOP_RULES.get(reason, ()):
            if applies(self, st):
                return verdict(self, st)
        return True  # the user's breakpoints, steps, signals: lldb's business

    def _print_report(self, stream: lldb.SBStream, report: list[str]) -> None:
        stream.Print(to_text(report, color=bool(self.debugger.GetUseColor()) and "NO_COLOR" not in os.environ))

    # -- the stop rules' tests and verdicts (_STOP_RULES) -----------------------------------------
    def _scope_stepping(self, st: _Stop) -> bool:
        """A step its ScopeStep plan has decided; another thread made the stop public."""
        return self.step_control.stepping(st.thread)

    def _fault_stepped_trap(self, st: _Stop) -> bool:
        """The trap of a FaultStep, shown again because the thread has not run since."""
        return self.stepped.get(st.tid) == st.pc

    def _past_our_breakpoint(self, st: _Stop) -> bool:
        """lldb single-stepped the instruction under one of our breakpoints to get past it (the
        `syscall` of clone3, say), and another thread stopped meanwhile."""
        return _after_our_breakpoint(st.thread)

    def _fault_being_stepped(self, st: _Stop) -> bool:
        """The SIGBUS its FaultStep plan is about to step over, not a new one."""
        return st.signo == SIGBUS and self.stepping.get(st.tid) == st.pc

    def _our_breakpoint_stop(self, st: _Stop) -> bool:
        """Our callbacks said continue; another thread made this stop public."""
        return self._our_breakpoint(st.process.GetTarget(), st.thread)

    def _our_plan_complete(self, st: _Stop) -> bool:
        """A FaultStep that completed while another thread stopped."""
        return (st.thread.GetStopDescription(64) or "").startswith("ualdbg:")

    def _on_sigbus_stop(self, st: _Stop) -> bool:
        stop, report = self._on_sigbus(st.process, st.thread, st.stream)
        if report:
            self._print_report(st.stream, report)
        return stop

    def _programs_signal(self, st: _Stop) -> bool:
        """The program's other signals: as lldb's `process handle` says (this may be an old stop
        of a thread that was held while another one ran, shown again)."""
        return bool(st.process.GetUnixSignals().GetShouldStop(st.signo))

    def _on_exec(self, st: _Stop) -> bool:
        """AC died with the old image (PLATFORM.md); main re-resolves in the new one. The stop
        stays: lldb stops at exec by default (target.process.stop-on-exec)."""
        lifecycle = self.session.lifecycle
        lifecycle.new_process(int(st.process.GetProcessID()))
        lifecycle.arm_at_start(FaultSteppingLldbTarget(st.process, st.thread, self.queue_fault_step))
        return True

    def _on_sigbus(self, process: lldb.SBProcess, thread: lldb.SBThread, stream: lldb.SBStream) -> tuple[bool, list[str]]:
        target = FaultSteppingLldbTarget(process, thread, self.queue_fault_step)
        info = target.siginfo()
        if info is not None and info.signo != SIGBUS:
            # lldb keeps showing a thread's SIGBUS after the thread has moved on (it was
            # suspended while another thread ran); the kernel's siginfo tells the truth.
            return False, []
        decision, report = self.session.lifecycle.fault(target, info) if info is not None else (Decision.NOT_OURS, None)
        if decision is Decision.NOT_OURS:
            pas, stop, notify = self.saved.effective() if self.saved is not None else (True, True, True)
            self._suppress(process, not pas)
            if notify and not stop:
                stream.Print(f"Process {process.GetProcessID()} received signal SIGBUS (thread {thread.GetThreadID()}): not an alignment check, {'passed' if pas else 'not passed'}\n")
            return stop, []
        self._suppress(process, True)
        return decision is Decision.STOP, report or []

    def _suppress(self, process: lldb.SBProcess, suppress: bool) -> None:
        if suppress != self.suppressing:
            process.GetUnixSignals().SetShouldSuppress(SIGBUS, suppress)
            self.suppressing = suppress

    def _our_breakpoint(self, target: lldb.SBTarget, thread: lldb.SBThread) -> bool:
        bp = target.FindBreakpointByID(thread.GetStopReasonDataAtIndex(0))
        return bool(bp.IsValid() and bp.MatchesName(BP_NAME))

    def _settle(self, target: LldbTarget) -> None:
        """At a stop the user sees: forget threads that are gone (lldb tells no thread's end),
        re-arm a thread whose single-step plan was lost; then the lifecycle's stop."""
        e = self.session.engine
        if self.set_swaps:
            self.settle_sigtraps(target.process, leaving=False)
        live = set(target.threads())
        self.session.lifecycle.threads_gone(live)
        for tid, pc in list(self.stepping.items()):
            if tid not in live:
                self.stepping.pop(tid, None)
            elif target.read_register("rip", tid) != pc:
                self.stepping.pop(tid, None)
                e.fault_stepped(target, tid)
        self.session.lifecycle.stopped(target)


class _Stop:
    """One thread's stop as the stop rules read it (each SB call made once)."""

    def __init__(self, process: lldb.SBProcess, thread: lldb.SBThread, stream: lldb.SBStream) -> None:
        self.process = process
        self.thread = thread
        self.stream = stream
        self.tid = int(thread.GetThreadID())

    @property
    def pc(self) -> int:
        return int(self.thread.GetFrameAtIndex(0).GetPC())

    @property
    def signo(self) -> int:
        return int(self.thread.GetStopReasonDataAtIndex(0))


def _always(hooks: LldbHooks, st: _Stop) -> bool:
    return True


def _go_on(hooks: LldbHooks, st: _Stop) -> bool:
    """Auto-continue: another thread's stop (or another call of this hook) decides."""
    return False


_Rule = tuple[Callable[[LldbHooks, _Stop], bool], Callable[[LldbHooks, _Stop], bool]]
# The stop hook's decision per stop reason: the first rule whose test applies gives the verdict
# (True keeps the stop); a reason without a rule that applies keeps it.
_STOP_RULES: dict[int, tuple[_Rule, ...]] = {
    lldb.eStopReasonTrace: ((LldbHooks._scope_stepping, _go_on),
                            (LldbHooks._fault_stepped_trap, _go_on),
                            (LldbHooks._past_our_breakpoint, _go_on)),
    lldb.eStopReasonNone: ((_always, _go_on),),  # another thread's stop: that thread's call decides
    lldb.eStopReasonInvalid: ((_always, _go_on),),
    lldb.eStopReasonSignal: ((LldbHooks._fault_being_stepped, _go_on),
                             (lambda hooks, st: st.signo == SIGBUS, LldbHooks._on_sigbus_stop),
                             (_always, LldbHooks._programs_signal)),
    lldb.eStopReasonBreakpoint: ((LldbHooks._our_breakpoint_stop, _go_on),),
    lldb.eStopReasonPlanComplete: ((LldbHooks._our_plan_complete, _go_on),),
    lldb.eStopReasonExec: ((_always, LldbHooks._on_exec),),
}


def _on_destroy(debugger_id: int, *baton: Any) -> None:
    hooks = _HOOKS.pop(debugger_id, None)
    if hooks is not None:
        hooks.before_detach()


def _site_nr(thread: lldb.SBThread, load_addr: int, entry: bool = False) -> int | None:
    """The syscall number of the site whose exit (or entry) breakpoint is at this load address."""
    addr = lldb.SBAddress(load_addr, thread.GetProcess().GetTarget())
    module = addr.GetModule()
    if not module.IsValid():
        return None
    sites = _module_sites(module)
    return (sites.nr_at if entry else sites.nr_at_exit).get(addr.GetFileAddress())


def _after_our_breakpoint(thread: lldb.SBThread) -> bool:
    addr = lldb.SBAddress(thread.GetFrameAtIndex(0).GetPC(), thread.GetProcess().GetTarget())
    module = addr.GetModule()
    return bool(module.IsValid() and addr.GetFileAddress() in _module_sites(module).after_ours)




def _attached(pid: int) -> bool:
    """Whether lldb attached to `pid` rather than launched it: a launched program is a child of
    the lldb-server that traces it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return fields.get("PPid", "").strip() != fields.get("TracerPid", "").strip()
    except OSError:
        return False
