"""Arming the CPUs whose kernel fixes misaligned accesses up unless asked (Alpha, PA-RISC, SH):
prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS) called in the program, its old setting remembered for
`off`. Called by the debugger where it can call a function in the program; inside a breakpoint's
stop callback, where it cannot, by redirecting the thread into prctl and back."""
from __future__ import annotations

from ..core.target import InferiorCalls, SymbolLookup, Target, offers
from ..isa import arch as archmod
from ..isa.cpu import CallConvention
from .perform import Performer


class PrctlArming:
    """The prctl setting of one process of a prctl architecture (ArchInfo.mechanism MECH_PRCTL):
    "off" -> "armed" (or "failed", "no prctl"), and the program's own setting before it."""

    def __init__(self, arch: archmod.ArchInfo, call: CallConvention, performer: Performer) -> None:
        self.arch = arch
        self.call = call  # how the redirect calls prctl (signal mode's Strict.call, isa/cpu.py)
        self.zero_regs = performer.zero_regs
        self.write_regs = performer.write_regs
        self.state = "off"
        self.saved_unalign: int | None = None
        self.redirect: dict | None = None  # type: ignore[type-arg]  # a prctl call in flight

    def arm(self, target: Target) -> None:
        """Make the kernel (here qemu) send SIGBUS instead of fixing up, remembering the old
        setting for `off`."""
        if self.state == "armed":
            return
        if self.redirect is not None:
            self._redirect_returned(target)
            return
        if offers(target, InferiorCalls) and target.can_call_functions():
            func = self._prctl_address(target)
            if func is None:
                return  # not loaded yet (at the loader's entry): the arm point at main will do it
            scratch = self._scratch(target)
            if target.call_function(func, [archmod.PR_GET_UNALIGN, scratch]) == 0:
                self.saved_unalign = int.from_bytes(target.read_memory(scratch, 4), self.arch.endian)  # type: ignore[arg-type]
            self._check(target.call_function(func, [archmod.PR_SET_UNALIGN, archmod.PR_UNALIGN_SIGBUS]))
            return
        # Inside a breakpoint's stop callback (the arm point at main) the debugger cannot run an
        # inferior call: redirect the thread into prctl with its return address set to this
        # very PC, where the arm point stops again and `arm` is called back to finish.
        self._redirect(target, [archmod.PR_GET_UNALIGN, None], then=[archmod.PR_SET_UNALIGN, archmod.PR_UNALIGN_SIGBUS])

    def arming_deferred(self) -> str | None:
        """Why `arm` left the prctl to the arm point (None when it is armed, or needs none)."""
        if self.state == "off":
            return "libc's prctl is not loaded yet (the dynamic loader is still running)"
        return None

    def disarm(self, target: Target) -> None:
        """Give the program its own setting back."""
        if self.state != "armed":
            return
        func = self._prctl_address(target)
        if not offers(target, InferiorCalls) or func is None or not target.can_call_functions():
            raise RuntimeError("cannot call prctl in the program now to restore its unaligned-access setting")
        old = self.saved_unalign if self.saved_unalign is not None else archmod.PR_UNALIGN_NOPRINT
        target.call_function(func, [archmod.PR_SET_UNALIGN, old])
        self.state = "off"

    def status_line(self) -> str:
        """For `ualdbg status`: the prctl setting and the program's own."""
        old = "unknown" if self.saved_unalign is None else f"{self.saved_unalign:#x}"
        return f"  prctl(PR_SET_UNALIGN): {self.state} (the program's own setting: {old})"

    def forget(self) -> None:
        """A new process (or none): nothing armed in it yet."""
        self.state = "off"
        self.redirect = None

    def _prctl_address(self, target: Target) -> int | None:
        return target.symbol_address("prctl") if offers(target, SymbolLookup) else None

    def _scratch(self, target: Target) -> int:
        """Four bytes of stack below the live frames, for PR_GET_UNALIGN's answer."""
        return self._free_stack(target.read_register(self.arch.sp), 256)

    def _free_stack(self, sp: int, distance: int) -> int:
        """An aligned address `distance` bytes into the unused stack (below sp, or above it
        where the stack grows up)."""
        align = self.call.stack_align
        if self.call.stack_grows_up:
            return (sp + distance + align - 1) & ~(align - 1)
        return (sp - distance) & ~(align - 1)

    def _check(self, result: int) -> None:
        if result != 0:
            self.state = "failed"
            raise RuntimeError(f"prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS) failed in the program ({result:#x})")
        self.state = "armed"

    def _redirect(self, target: Target, args: list[int | None], then: list[int] | None = None) -> None:
        func = self._prctl_address(target)
        if func is None:
            self.state = "no prctl"
            raise RuntimeError("the program has no `prctl` (a static program that does not use it, or gdb "
                               "lacks the target's libraries: set sysroot): cannot ask for SIGBUS")
        a, c = self.arch, self.call
        tid = target.current_tid()
        pc = a.pc_writable
        saved = {r: target.read_register(r, tid) for r in (*a.gprs, pc, *([a.npc] if a.npc else []))
                 if r not in self.zero_regs}
        sp = saved[a.sp]
        scratch = self._free_stack(sp, 256)
        # the PC as written keeps what its register holds beside the address (PA-RISC's privilege)
        entry = func | (saved[pc] - target.read_register(a.pc, tid))
        regs = {a.sp: self._free_stack(sp, 1024), pc: entry, c.return_address: saved[pc]}
        if a.npc:
            regs[a.npc] = entry + (a.insn_size or 4)
        if c.target:
            regs[c.target] = func
        for reg, value in zip(c.args, args):
            regs[reg] = scratch if value is None else value
        self.redirect = {"saved": saved, "scratch": scratch, "then": then, "tid": tid}
        self.write_regs(target, regs, tid)

    def _redirect_returned(self, target: Target) -> None:
        """Back at the arm point from a redirected prctl: take its result, restore the thread."""
        assert self.redirect is not None
        call, self.redirect = self.redirect, None
        a = self.arch
        tid = call["tid"]
        result = target.read_register(self.call.ret, tid)
        if call["then"] is not None:
            if result == 0:
                self.saved_unalign = int.from_bytes(target.read_memory(call["scratch"], 4), a.endian)  # type: ignore[arg-type]
            self._restore(target, call)
            self._redirect(target, call["then"])
            return
        self._restore(target, call)
        self._check(result)

    def _restore(self, target: Target, call: dict) -> None:  # type: ignore[type-arg]
        self.write_regs(target, call["saved"], call["tid"])
