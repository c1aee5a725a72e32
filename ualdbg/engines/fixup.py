"""Signal mode on CPUs that cannot be told to tolerate a misaligned access (SPARC traps in
hardware; Alpha, PA-RISC and SH trap once prctl asks for SIGBUS): decode the faulting load or
store, record it, then perform the access as an operating system's fix-up handler would — read
or write the bytes through the debugger in the target's byte order, set the destination
register(s), advance the PC (and SPARC's nPC) — and resume with the signal suppressed.

The address comes from the decoded instruction and the registers, never from si_addr (qemu
7.2's gdb stub has no `$_siginfo`; qemu 9+'s does, with the target's own signal numbers). All threads are stopped while the engine
runs (all-stop), so emulating swap/cas here is as atomic for the program as the instruction."""
from __future__ import annotations

from ..core.model import Access
from ..core.target import SigInfo, Target
from ..isa import arch as archmod
from ..isa.arch import strict
from ..isa.cpu import CallConvention
from ..isa.insn import Insn, MemOperand, transfer
from .faultpath import Decision, FaultPath
from .perform import NotEmulated, Performer
from .prctl import PrctlArming


def has_signal_engine(arch: archmod.ArchInfo) -> bool:
    """Whether ualdbg can decode and perform this architecture's faulting loads and stores."""
    return strict(arch.name) is not None


class FixupEngine:
    """The part of the trap engine for architectures without EFLAGS.AC (TrapEngine delegates):
    which faults are ours, recorded once; performed by `Performer` (perform.py), armed on prctl
    CPUs by `PrctlArming` (prctl.py); a fault in a delay slot resumed through a `nop`."""

    def __init__(self, arch: archmod.ArchInfo, faults: FaultPath) -> None:
        self.faults = faults
        self.arch = arch
        self.strict = strict(arch.name)
        self.decode = self.strict.decoder().decode if self.strict is not None else None
        self.performer = Performer(arch)
        self.delay_slots = self.strict.delay_slot if self.strict is not None else None
        self.slot_branch: dict[int, int | None] = {}  # faulting PC -> the delayed branch before it
        self.slot_nop: int | None = None  # SH: a `nop` in the program's code (resuming from a slot)
        self.slot_resume: dict[int, int] = {}  # tid -> where its delayed branch goes (after one step)
        # tid -> PC of the fault the user was stopped at (or the step engine recorded): shared
        # with the step engine through the fault path.
        self.reported = faults.reruns
        self.not_emulated: dict[int, str] = {}  # PC -> why ualdbg let the program have its SIGBUS
        call = self.strict.call if self.strict is not None else CallConvention()
        self.prctl = PrctlArming(arch, call, self.performer) if arch.mechanism == archmod.MECH_PRCTL else None
        if self.prctl is not None:
            self.mechanism = "prctl(PR_SET_UNALIGN, PR_UNALIGN_SIGBUS), accesses performed by ualdbg"
        else:
            self.mechanism = f"{arch.name}'s own alignment trap (SIGBUS), accesses performed by ualdbg"

    # -- decoding ----------------------------------------------------------------------------
    def decode_at(self, target: Target, pc: int, tid: int | None = None) -> tuple[Insn | None, MemOperand | None]:
        """The instruction at `pc` in the one instruction model, and the one access the fix-up
        performs for it (None when it is no access the architecture traps, or the decoder
        cannot say what it moves)."""
        size = self.arch.insn_size or 4
        try:
            raw = target.read_memory(pc, size)
        except Exception:
            return None, None
        if self.decode is None:
            return None, None
        mode = self.arch.mode(target.read_register(self.arch.mode_reg, tid)) if self.arch.mode_reg else ""
        insn = self.decode(raw, pc, mode)
        if insn is None:
            return None, None
        op = transfer(insn)
        return (insn, op) if op is not None else (None, None)

    # -- events --------------------------------------------------------------------------------
    def on_signal(self, target: Target, info: SigInfo) -> Decision:
        if info.signo != archmod.SIGBUS or info.code not in (archmod.BUS_ADRALN, 0):
            return Decision.NOT_OURS  # code 0: no siginfo (qemu's stub): the decode decides
        tid = target.current_tid()
        pc = target.read_register(self.arch.pc, tid)
        insn, op = self.decode_at(target, pc, tid)
        if insn is None or op is None:
            if info.code != archmod.BUS_ADRALN:
                return Decision.NOT_OURS
            # The kernel says alignment, the decoder cannot tell the access: report the PC and
            # si_addr, size unknown; the program gets its SIGBUS (nothing to emulate with).
            self.faults.record(target, self.arch, tid, info, decoded=(None, None, None))
            return Decision.NOT_OURS
        if self.strict is not None and self.strict.refine is not None:
            insn, op = self.strict.refine(insn, op, lambda reg: target.read_register(reg, tid))
        va = self.performer.address(target, tid, op)
        if va % (op.align or op.size) == 0:
            return Decision.NOT_OURS  # an aligned access that raised SIGBUS: not an alignment trap
        if self.reported.take(tid) != pc:
            acc = Access(va=va, size=op.size, kind=op.kind)
            if self.faults.record(target, self.arch, tid, info, decoded=(insn, acc, True)):
                # Stop AT the instruction, not performed yet: the user's resume re-executes it,
                # it traps again, and that trap is performed without being counted twice.
                self.reported.expect(tid, pc)
                return Decision.STOP
        try:
            branch_to = self._slot_continuation(target, tid, pc)  # before the slot's own effect
            self.performer.perform(target, tid, insn, op, va, None if branch_to is None else self._nop(target, pc))
        except NotEmulated as exc:
            self.not_emulated[pc] = str(exc)  # `ualdbg status` says why the program got SIGBUS
            return Decision.NOT_OURS
        if branch_to is not None:
            self.slot_resume[tid] = branch_to
            return Decision.STEP_THEN_RESUME
        return Decision.RESUME

    def _slot_continuation(self, target: Target, tid: int, pc: int) -> int | None:
        """For a fault in a delay slot as qemu-sh4 reports it (the PC at the slot, qemu still
        "in the slot of a branch"): where the branch goes. The PC is then pointed at a `nop`,
        which one single step runs as the slot (ending qemu's slot state; the branch target it
        then takes may be stale, as qemu keeps constant targets in the translated code only),
        and `finish_slot` puts the PC where the branch really goes."""
        if self.delay_slots is None:
            return None
        is_branch, continuation = self.delay_slots
        size = self.arch.insn_size or 4
        if pc not in self.slot_branch:  # the code does not change: read once per faulting PC
            try:
                prev = target.read_memory(pc - size, size)
            except Exception:
                prev = b""
            word = int.from_bytes(prev, self.arch.endian) if len(prev) == size else None  # type: ignore[arg-type]
            self.slot_branch[pc] = word if word is not None and is_branch(word) else None
        word = self.slot_branch[pc]
        if word is None:
            return None
        to = continuation(word, pc - size, lambda reg: target.read_register(reg, tid))
        if to is None:
            raise NotEmulated("a fault in the delay slot of rte is not emulated")
        return to

    def slot_catch(self, tid: int) -> int | None:
        """Before the single step of STEP_THEN_RESUME, where gdb steps in software (MIPS): the
        address a taken branch makes the `nop` go to, which the step must stop at too."""
        if self.strict is None or not self.strict.software_step:
            return None
        return self.slot_resume.get(tid)

    def finish_slot(self, target: Target, tid: int) -> bool:
        """After the single step of STEP_THEN_RESUME: the PC where the branch goes."""
        to = self.slot_resume.pop(tid, None)
        if to is None:
            return False
        self.performer.write_regs(target, {self.arch.pc: to}, tid)
        return True

    def _nop(self, target: Target, pc: int) -> int:
        """The address of a `nop` in the program's code near `pc` (found once per process)."""
        if self.slot_nop is not None:
            return self.slot_nop
        assert self.strict is not None and self.strict.nop is not None
        word, width = self.strict.nop
        chunk = 512
        first = pc & ~(width - 1)
        for start in range(first, first + 64 * 1024, chunk):
            try:
                data = target.read_memory(start, chunk)
            except Exception:
                break
            for k in range(0, len(data) - width + 1, width):
                if int.from_bytes(data[k:k + width], self.arch.endian) == word:  # type: ignore[arg-type]
                    self.slot_nop = start + k
                    return self.slot_nop
        raise NotEmulated("a fault in a branch's delay slot: no `nop` found in the program's code to resume through")

    # -- arming (prctl architectures) -----------------------------------------------------------
    def arm(self, target: Target) -> None:
        """SPARC traps by itself: nothing to arm. Alpha, PA-RISC, SH: prctl (prctl.py)."""
        if self.prctl is None or self.prctl.state == "armed":
            return
        if self.decode is None:
            # riscv64: no decoder here, so a fault could be neither located exactly nor
            # performed (README: architectures).
            raise RuntimeError(f"signal mode on {self.arch.name} is not supported: no decoder for its loads and stores")
        self.prctl.arm(target)

    def arming_deferred(self) -> str | None:
        """Why `arm` left the prctl to the arm point (None when it is armed, or needs none)."""
        return self.prctl.arming_deferred() if self.prctl is not None else None

    def disarm(self, target: Target) -> None:
        self.reported.clear()
        if self.prctl is not None:
            self.prctl.disarm(target)

    def status_lines(self) -> list[str]:
        """For `ualdbg status`: the prctl setting and the faults left to the program."""
        out = [self.prctl.status_line()] if self.prctl is not None else []
        for pc, why in sorted(self.not_emulated.items()):
            out.append(f"  not performed at {pc:#x}: {why}; the program got its SIGBUS")
        return out

    def off_summary(self) -> str:
        if self.prctl is not None:
            return "the program's own PR_SET_UNALIGN setting is back"
        return f"{self.arch.name} traps by itself: its faults go to the program again"

    def forget(self) -> None:
        """A new process (or none): nothing armed in it yet."""
        self.reported.clear()
        if self.prctl is not None:
            self.prctl.forget()
        self.slot_nop = None
        self.slot_branch.clear()
        self.slot_resume.clear()
