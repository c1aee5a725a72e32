"""What decides whether a thread stopped at an access has made an unaligned access that counts:
the instruction there (decoded once per PC), the alignment rule it is checked against (the
policy) and the modules that count (the scope: modulescope.py). The debuggers' engines hold
these as one `FaultRules`; the agent and the native stepper, which count in their own C code, use the parts."""
from __future__ import annotations

from collections.abc import Mapping

from ..core.model import Access
from ..core.target import MemoryReader, Target
from ..isa import arch as archmod
from ..isa.alignment import AcPolicy, Policy
from ..isa.decode import DECODABLE, Insn, InsnDecoder, accesses, decoder_for
from .modulescope import Scope
from .registers import LazyRegisters


class InstructionCache:
    """Instructions decoded once per PC: from a live target, or from the code an engine saved of
    a process that is gone (the agent)."""

    def __init__(self) -> None:
        self.decoder: InsnDecoder = decoder_for()
        self._insns: dict[int, Insn | None] = {}

    def at(self, code: MemoryReader, pc: int, arch: str | None = None, mode: str = "") -> Insn | None:
        """The instruction at `pc` in `code`, decoded once per PC: in `arch`, else the
        instruction set decoded last; again if its `mode` (32-bit ARM's Thumb or ARM) changed."""
        cached = self._insns.get(pc)
        if pc not in self._insns or (mode and cached is not None and cached.mode != mode):
            name = arch or self.decoder.arch
            if name != self.decoder.arch and name in DECODABLE:
                self.decoder = decoder_for(name)  # the target's instruction set (arm64 for the step engine)
            try:
                raw = code.read_memory(pc, self.decoder.max_insn_len)
            except Exception:
                raw = b""
            self._insns[pc] = self.decoder.decode(raw, pc, mode) if raw else None
        return self._insns[pc]

    def clear(self) -> None:
        self._insns.clear()


def breaking_access(insn: Insn, regs: Mapping[str, int], policy: Policy) -> tuple[Access | None, bool | None]:
    """The access of `insn` (its operands evaluated over `regs`) that breaks `policy`, else its
    first access; and whether one breaks it (None: a register the decoder needs is unknown)."""
    try:
        found = accesses(insn, regs)
    except KeyError:
        return None, None
    for acc in found:
        if policy.violates(acc, insn):
            return acc, True
    return (found[0] if found else None), False


class FaultRules:
    """The scope, the policy and the decoded instructions of one debugger session. The user's
    commands choose the scope (`use_scope`), the step engine the policy (`use_policy`: its
    `--policy`, or its CPU's default); the trap engine's faults are checked against the same."""

    def __init__(self) -> None:
        self.scope = Scope()
        self.policy: Policy = AcPolicy()
        self.code = InstructionCache()

    def use_scope(self, scope: Scope) -> None:
        self.scope = scope

    def use_policy(self, policy: Policy) -> None:
        self.policy = policy

    def insn_at(self, target: Target, arch: archmod.ArchInfo, pc: int, tid: int | None = None) -> Insn | None:
        """The instruction at `pc`, decoded once. 32-bit ARM: in the instruction set the CPSR's
        T bit says (of `tid`, else the current thread), decoded again if it changed."""
        mode = arch.mode(target.read_register(arch.mode_reg, tid)) if arch.mode_reg is not None else ""
        return self.code.at(target, pc, arch.name, mode)

    def analyse(self, target: Target, arch: archmod.ArchInfo, tid: int | None,
                pc: int) -> tuple[Insn | None, Access | None, bool | None]:
        """Decode the instruction at PC and pick the access that breaks the policy.
        Returns (insn, access, explained): explained is None when the decoder cannot tell."""
        insn = self.insn_at(target, arch, pc, tid)
        if insn is None:
            return None, None, None
        acc, explained = breaking_access(insn, LazyRegisters(target, tid), self.policy)
        return insn, acc, explained

    def new_process(self) -> None:
        """A run, an attach or an exec: the code at an address is another's."""
        self.code.clear()
