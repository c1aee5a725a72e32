"""ualdbg's breakpoints in lldb, each named `ualdbg` (hidden from `breakpoint list`, kept from
`breakpoint delete`) and by its callback: the arm point at `main` (or the loader's entry, found
by `EntryResolver`), and the syscall site breakpoints that stand in for `catch syscall` (their
locations from sitemap.py, given by `SyscallSiteResolver` once the sites are active). The
callbacks run while lldb decides whether to stop, find their hooks through the registry, and
never stop (but for the step engine's break at a new thread)."""
from __future__ import annotations

import sys
from typing import Any

import lldb  # type: ignore[import-not-found]

from ...engines.lifecycle import arm_function
from ...symbols.maps import is_loader_path
from .interp import command, warn
from .registry import hooks_of, hooks_of_thread
from .sitemap import add_site_locations

BP_NAME = "ualdbg"  # every breakpoint ualdbg sets carries it; hidden from `breakpoint list`
_THIS = __name__  # callbacks and resolvers are named to lldb by their dotted path from here
SITE_KINDS = ("entry", "exit", "exit_call")


class Breakpoints:
    """The breakpoints of one debugger's session."""

    def __init__(self, debugger: lldb.SBDebugger) -> None:
        self.debugger = debugger
        self.sites_active = False  # the site breakpoints have their locations

    def own(self, bp: lldb.SBBreakpoint, callback: str, args: lldb.SBStructuredData | None = None) -> None:
        """Name `bp` as ualdbg's, with `callback` (a function of this module) as its callback."""
        if not bp.IsValid():
            raise RuntimeError("lldb refused a breakpoint")
        for name in (BP_NAME, f"{BP_NAME}_{callback}"):
            if not bp.AddName(name):  # lldb refuses names with '.', '-' or spaces
                raise RuntimeError(f"lldb refused the breakpoint name {name!r}")
        err = bp.SetScriptCallbackFunction(f"{_THIS}.{callback}", args if args is not None else lldb.SBStructuredData())
        if err is not None and hasattr(err, "Success") and not err.Success():
            raise RuntimeError(f"cannot set a breakpoint callback: {err.GetCString()}")
        bp.SetAutoContinue(False)

    def ours(self, target: lldb.SBTarget, tag: str | None = None) -> list[lldb.SBBreakpoint]:
        """ualdbg's breakpoints in `target` (those of one callback or tag)."""
        found = lldb.SBBreakpointList(target)
        target.FindBreakpointsByName(BP_NAME if tag is None else f"{BP_NAME}_{tag}", found)
        return [found.GetBreakpointAtIndex(i) for i in range(found.GetSize())]

    def is_ours(self, target: lldb.SBTarget, thread: lldb.SBThread) -> bool:
        """Whether the breakpoint this thread stopped at is one of ualdbg's."""
        bp = target.FindBreakpointByID(thread.GetStopReasonDataAtIndex(0))
        return bool(bp.IsValid() and bp.MatchesName(BP_NAME))

    @staticmethod
    def _kind_of(bp: lldb.SBBreakpoint) -> str:
        names = lldb.SBStringList()
        bp.GetNames(names)
        for i in range(names.GetSize()):
            name = names.GetStringAtIndex(i)
            if name.startswith(f"{BP_NAME}_kind_"):
                return name[len(f"{BP_NAME}_kind_"):]
        return ""

    def _name_permissions(self) -> None:
        # Not in `breakpoint list`, not removed by `breakpoint delete` (ualdbg off does that).
        # The command, not SBBreakpointName: lldb 19 does not apply the latter's permissions.
        command(self.debugger, f"breakpoint name configure --allow-list false --allow-delete false "
                               f"--allow-disable false {BP_NAME}")

    def create_sites(self, target: lldb.SBTarget) -> None:
        """The site breakpoints, without locations until `ensure_sites`."""
        self.sites_active = False
        for kind in SITE_KINDS:
            args = lldb.SBStructuredData()
            args.SetFromJSON(f'{{"kind": "{kind}"}}')
            bp = target.BreakpointCreateFromScript(f"{_THIS}.SyscallSiteResolver", args, lldb.SBFileSpecList(),
                                                   lldb.SBFileSpecList(), False)
            bp.AddName(f"{BP_NAME}_kind_{kind}")  # no '-': lldb refuses it in names
            self.own(bp, "exit_hit" if kind == "exit_call" else "site_hit", args)

    def ensure_sites(self, target: lldb.SBTarget) -> None:
        """Give the site breakpoints their locations in every loaded module: at the arm point
        (libc is loaded by then), after an attach, or at install when stopped. Never creates a
        breakpoint: lldb's generated callback wrappers break when one is made inside another."""
        if self.sites_active:
            return
        self.sites_active = True
        for bp in self.ours(target, "site_hit") + self.ours(target, "exit_hit"):
            kind = self._kind_of(bp)
            for module in target.module_iter():
                add_site_locations(bp, module, kind)

    def place_arm_point(self, target: lldb.SBTarget, at: str) -> str | None:
        """The arm point for `--at main|start` (the old one goes); returns the line for the user
        when `main` is missing (lifecycle.arm_function)."""
        for bp in self.ours(target, "arm_point_hit"):
            target.BreakpointDelete(bp.GetID())
        said = None
        if at == "main":
            exe = target.GetModuleAtIndex(0) if target.GetNumModules() else None
            has_main = exe is None or not exe.IsValid() or bool(exe.FindSymbols("main", lldb.eSymbolTypeCode).GetSize())
            name, said = arm_function(has_main)
            bp = target.BreakpointCreateByName(name)
        else:
            bp = target.BreakpointCreateFromScript(f"{_THIS}.EntryResolver", lldb.SBStructuredData(),
                                                   lldb.SBFileSpecList(), lldb.SBFileSpecList(), False)
        self.own(bp, "arm_point_hit")
        # After the breakpoints carry the name: lldb applies a name's permissions to the
        # breakpoints that have it when they change.
        self._name_permissions()
        return said

    def remove_all(self, targets: list[lldb.SBTarget]) -> None:
        """Every breakpoint and breakpoint name of ualdbg's in these targets (`off`)."""
        for target in targets:
            for bp in self.ours(target):
                target.BreakpointDelete(bp.GetID())
            names = lldb.SBStringList()
            target.GetBreakpointNames(names)
            for i in range(names.GetSize()):
                if names.GetStringAtIndex(i).startswith(BP_NAME):
                    target.DeleteBreakpointName(names.GetStringAtIndex(i))


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
    hooks = hooks_of_thread(frame.GetThread())
    if hooks is not None:
        try:
            hooks.on_arm_point(frame.GetThread())
        except Exception as exc:  # never let a hook error stop the user's program
            warn(None, f"arming failed: {exc}")
    return False


def site_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    thread = frame.GetThread()
    hooks = hooks_of_thread(thread)
    if hooks is not None:
        try:
            return hooks.on_site(thread, extra_args.GetValueForKey("kind").GetStringValue(16))
        except Exception as exc:
            warn(None, f"while following a syscall: {exc}")
    return False


def exit_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    hooks = hooks_of_thread(frame.GetThread())
    if hooks is not None:
        hooks.on_exit_call(int(frame.FindRegister("rdi").GetValueAsUnsigned()) & 0xFF)
    return False


def watch_hit(frame: lldb.SBFrame, bp_loc: lldb.SBBreakpointLocation, extra_args: Any, internal_dict: Any) -> bool:
    """A thread the agent arms once out of pthread_create or born (engines/threadbirth.py)."""
    thread = frame.GetThread()
    hooks = hooks_of_thread(thread)
    if hooks is not None:
        try:
            hooks.agent_host.hit(thread, int(bp_loc.GetLoadAddress()))
        except Exception as exc:  # never let a hook error stop the user's program
            warn(None, f"arming a new thread failed: {exc}")
    return False
