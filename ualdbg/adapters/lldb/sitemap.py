"""Where the program makes the syscalls ualdbg follows under lldb (which has no `catch syscall`):
the `syscall` instructions of clone/fork/vfork/clone3 and rt_sigprocmask in each loaded module,
found by isa/syscall_sites.py in its executable sections once per module, by file address; the site
breakpoints (breakpoints.py) stop there and at the instruction after."""
from __future__ import annotations

import lldb  # type: ignore[import-not-found]

from ...isa.arch.x86_64 import TRAP_FLAGS
from ...isa.syscall_sites import SyscallSite, find_sites

TASK_SYSCALLS = TRAP_FLAGS.task_creating_syscalls
MASK_SYSCALL = TRAP_FLAGS.sigprocmask_syscall
_WANTED = frozenset(TASK_SYSCALLS | {MASK_SYSCALL})


class ModuleSites:
    """The syscall sites of one module, by file address."""

    def __init__(self, sites: list[SyscallSite]) -> None:
        self.sites = sites
        self.nr_at = {site.addr: site.nr for site in sites}
        # rt_sigprocmask(SIG_BLOCK, ...) with the constant made in the code: glibc blocking
        # signals for itself (around clone3 and tgkill, at a thread's end). An entry breakpoint
        # there keeps SIGTRAP open (sigmask.py).
        self.mask_entries = {site.addr for site in sites if site.nr == MASK_SYSCALL and site.zero_arg}
        # Where lldb's step over one of our breakpoints ends (see after_our_breakpoint).
        self.after_ours = ({site.addr + 2 for site in sites if site.nr in TASK_SYSCALLS or site.addr in self.mask_entries}
                           | {site.after_exit for site in sites})
        self.nr_at_exit = {site.exit_addr: site.nr for site in sites}


_SITE_CACHE: dict[str, ModuleSites] = {}  # module UUID (or path) -> its sites


def module_sites(module: lldb.SBModule) -> ModuleSites:
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
            sites.extend(find_sites(bytes(raw), sec.GetFileAddress(), _WANTED, TASK_SYSCALLS,
                                    lambda addr: _function_start(module, addr)))
    found = _SITE_CACHE[key] = ModuleSites(sites)
    return found


def _function_start(module: lldb.SBModule, addr: int) -> int | None:
    """The file address of the code symbol holding `addr`, None when lldb knows none."""
    symbol = module.ResolveFileAddress(addr).GetSymbol()
    if not symbol.IsValid():
        return None
    start = symbol.GetStartAddress()
    return int(start.GetFileAddress()) if start.IsValid() else None


def site_addresses(module: lldb.SBModule, kind: str) -> list[int]:
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
    found = module_sites(module)
    if kind == "entry":
        return [site.addr for site in found.sites if site.nr in TASK_SYSCALLS or site.addr in found.mask_entries]
    return [site.exit_addr for site in found.sites]


def add_site_locations(bkpt: lldb.SBBreakpoint, module: lldb.SBModule, kind: str) -> None:
    for addr in site_addresses(module, kind):
        bkpt.AddLocation(module.ResolveFileAddress(addr))


def site_nr(thread: lldb.SBThread, load_addr: int, entry: bool = False) -> int | None:
    """The syscall number of the site whose exit (or entry) breakpoint is at this load address."""
    addr = lldb.SBAddress(load_addr, thread.GetProcess().GetTarget())
    module = addr.GetModule()
    if not module.IsValid():
        return None
    sites = module_sites(module)
    return (sites.nr_at if entry else sites.nr_at_exit).get(addr.GetFileAddress())


def after_our_breakpoint(thread: lldb.SBThread) -> bool:
    addr = lldb.SBAddress(thread.GetFrameAtIndex(0).GetPC(), thread.GetProcess().GetTarget())
    module = addr.GetModule()
    return bool(module.IsValid() and addr.GetFileAddress() in module_sites(module).after_ours)
