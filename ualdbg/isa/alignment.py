"""Alignment policies: whether one decoded access counts as unaligned — x86 #AC semantics as
measured on the CPU this runs on (the acprobe, docs/ALIGNMENT.md), natural alignment for
strict-alignment ports, cache-line and page splits for performance work — and the cross-check
that a trapped #AC is explained by a decode."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import ClassVar, Protocol

from ..core.model import Access
from ..lazyclass import dataclass
from .insn import Insn

__all__ = [
    "AcPolicy",
    "AcRules",
    "ZEN3_RULES",
    "ac_class",
    "ac_rules",
    "cpu_identity",
    "cpu_key",
    "CachelinePolicy",
    "NaturalPolicy",
    "PagePolicy",
    "POLICY_NAMES",
    "Policy",
    "ProbeError",
    "explains_fault",
    "markdown_table",
    "measure_ac_rules",
    "policy_by_name",
    "required_alignment",
    "rules_from_probe",
    "violations",
]


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def violates(self, access: Access, insn: Insn | None) -> bool: ...


# Operand sizes that are not a power of two, with the alignment x86 checks them at (Intel SDM
# vol. 3 "Alignment requirements by data type"): x87 extended real and m16:64 far pointers at 8,
# m16:32 far pointers at 4, FSTENV/FSAVE areas at 4 (32-bit form) or 2 (16-bit form).
_ODD_SIZES = {10: 8, 6: 4, 28: 4, 108: 4, 14: 2, 94: 2}


def required_alignment(size: int) -> int:
    """The alignment an operand of `size` bytes needs: its size up to 8, 16 for anything of 16
    bytes or more (vector operands, measured: 32-byte AVX operands are checked at 16)."""
    if size in _ODD_SIZES:
        return _ODD_SIZES[size]
    if size >= 16:
        return 16
    if size <= 1:
        return 1
    return 1 << (size.bit_length() - 1)  # an odd size no table knows: its largest power of two


def _misaligned(access: Access) -> bool:
    return access.va % required_alignment(access.size) != 0


def _crosses(access: Access, unit: int) -> bool:
    return access.size > 0 and access.va // unit != (access.va + access.size - 1) // unit


# --------------------------------------------------------------------------------------------
# Which instructions raise #AC is CPU-dependent for vector operands (AMD Zen 3 checks 16-byte
# SSE and 32-byte AVX moves at 16; this Intel Xeon checks none of them), so the rule is a table
# measured by a small C probe (ualdbg/agent/src/acprobe/acprobe.c) run once per CPU and cached as JSON.

@dataclass(frozen=True)
class AcRules:
    """The alignment at which each instruction class (see ac_class) raises #AC, 1 = never; where
    the table came from (`source`) and for which CPU. A class the table lacks falls back to
    required_alignment(size)."""

    checks: Mapping[str, int] = field(hash=False)
    source: str
    cpu: str = ""
    path: str = ""  # the cached JSON table it was read from or written to

    def describe(self) -> str:
        return self.source + (f" ({self.cpu})" if self.cpu else "") + (f"; table {self.path}" if self.path else "")

    def alignment(self, size: int, insn: Insn | None) -> int:
        return self.checks.get(ac_class(size, insn)) or required_alignment(size)


ZEN3_RULES = AcRules(
    checks={"gp2": 2, "gp4": 4, "gp8": 8, "sse4": 4, "sse8": 8, "sse16": 16, "vex16": 16, "vex32": 16,
            "vex64": 16, "x87_4": 4, "x87_8": 8, "x87_10": 8},
    source="built-in rule measured on AMD Zen 3 (PLATFORM.md)")


def ac_class(size: int, insn: Insn | None) -> str:
    """The probe's name for the class of an access of `size` bytes by `insn`: gp<N> (integer,
    string, stack), sse<N> (legacy SSE: xmm operand), vex<N> (VEX/EVEX: a v-mnemonic), x87_<N>.
    Without an instruction, 16 is taken as legacy SSE and 32/64 as VEX."""
    if insn is not None:
        name = insn.name or insn.mnemonic
        if name.startswith("f") and not name.startswith("fx"):
            return f"x87_{size}"
        if name.startswith("v") and name not in ("verr", "verw"):
            return f"vex{size}"
        if "xmm" in insn.op_str:
            return f"sse{size}"
        return f"{'sse' if size >= 16 else 'gp'}{size}"
    if size == 10:
        return "x87_10"
    return f"{'vex' if size > 16 else 'sse' if size == 16 else 'gp'}{size}"


@dataclass(frozen=True)
class AcPolicy:
    """What raises #AC on x86 with EFLAGS.AC set: the table measured on this CPU (ac_rules), or
    the one given."""

    name: ClassVar[str] = "ac"
    rules: AcRules | None = None

    def violates(self, access: Access, insn: Insn | None) -> bool:
        if access.size <= 1:  # also rep movsb/stosb, which never fault
            return False
        if insn is not None and (insn.vsib or insn.masked or insn.gp_align):
            # gathers and masked moves never check; movaps & co, cmpxchg16b, fxsave, xsave take
            # #GP (SIGSEGV) instead, which is not an alignment-check fault
            return False
        rules = self.rules if self.rules is not None else ac_rules()
        return access.va % rules.alignment(access.size, insn) != 0


_RULES: AcRules | None = None


def ac_rules() -> AcRules:
    """The #AC table for this CPU: measured once per process (cached per CPU on disk), or the
    Zen 3 rule, with a note saying why, when the probe cannot be built or run."""
    global _RULES
    if _RULES is None:
        try:
            _RULES = measure_ac_rules()
        except ProbeError as exc:
            _RULES = AcRules(ZEN3_RULES.checks, f"{ZEN3_RULES.source}; not measured here: {exc}")
    return _RULES


class ProbeError(Exception):
    """The probe could not say: one line why."""


def cpu_identity(cpuinfo: str | None = None) -> dict[str, str]:
    """vendor, family, model, stepping, microcode and model name of the first CPU in
    /proc/cpuinfo."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError as exc:
            raise ProbeError(f"cannot read /proc/cpuinfo ({exc.strerror})") from None
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    wanted = {"vendor": "vendor_id", "family": "cpu family", "model": "model", "stepping": "stepping",
              "microcode": "microcode", "name": "model name"}
    return {k: fields.get(v, "?") for k, v in wanted.items()}


def cpu_key(cpu: Mapping[str, str]) -> str:
    raw = "-".join(cpu[k] for k in ("vendor", "family", "model", "stepping", "microcode"))
    return re.sub(r"[^A-Za-z0-9.]+", "_", raw)


def rules_from_probe(lines: Sequence[str], cpu: str, source: str, path: str = "") -> AcRules:
    """The table from the probe's output (`class kind offset result` lines): for each class,
    the alignment A (1..64) such that exactly the offsets that are not multiples of A raised
    #AC; the Zen 3 value when several fit, the largest otherwise. Classes the CPU cannot run
    (skip) or whose results fit no alignment (a #GP, loads and stores disagreeing) are left out
    and fall back to the Zen 3 rule."""
    seen: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 4 or not parts[2].isdigit():
            raise ProbeError(f"unexpected probe output {line!r}")
        seen.setdefault(parts[0], []).append((int(parts[2]), parts[3]))
    checks: dict[str, int] = {}
    for cls, results in seen.items():
        if any(r not in ("ok", "ac") for _, r in results):
            continue
        fits = [a for a in (1, 2, 4, 8, 16, 32, 64)
                if all((off % a != 0) == (r == "ac") for off, r in results)]
        if fits:
            checks[cls] = ZEN3_RULES.checks[cls] if ZEN3_RULES.checks.get(cls) in fits else max(fits)
    if not checks:
        raise ProbeError("the probe measured nothing")
    return AcRules(checks, source, cpu, path)


def measure_ac_rules(cache_dir: Path | None = None, refresh: bool = False) -> AcRules:
    """Build the probe (agent build cache), run it and return its table (ualdbg/agent/acprobe.py
    builds and runs it); the table is stored as JSON next to the probe, keyed by CPU
    vendor/family/model/stepping/microcode, and read back from there unless `refresh`."""

    from ..agent.acprobe import ProbeRunError, build_probe, run_probe
    from ..agent.build import BuildError

    if os.uname().machine not in ("x86_64", "AMD64"):
        raise ProbeError(f"the host is {os.uname().machine}, not x86-64")
    cpu = cpu_identity()
    try:
        exe = build_probe(cache_dir)
    except BuildError as exc:
        raise ProbeError(str(exc)) from None
    table = exe.parent / f"table-{cpu_key(cpu)}.json"
    label = f"{cpu['name']} ({cpu['vendor']} family {cpu['family']} model {cpu['model']} stepping {cpu['stepping']}" \
            f" microcode {cpu['microcode']})"
    if not refresh:
        try:
            doc = json.loads(table.read_text())
            return rules_from_probe(doc["probe"], label, "measured on this CPU", str(table))
        except (OSError, ValueError, KeyError, TypeError, ProbeError):
            pass
    try:
        lines = run_probe(exe)
    except ProbeRunError as exc:
        raise ProbeError(str(exc)) from None
    rules = rules_from_probe(lines, label, "measured on this CPU", str(table))
    tmp = table.with_name(f".{table.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps({"cpu": cpu, "probe": lines, "checks": dict(rules.checks)}, indent=1) + "\n")
        os.replace(tmp, table)
    except OSError:
        pass  # measured anyway; only the cache is lost
    return rules


@dataclass(frozen=True)
class NaturalPolicy:
    """Every operand aligned to its size (16 at most): what a strict-alignment CPU demands."""

    name: ClassVar[str] = "natural"

    def violates(self, access: Access, insn: Insn | None) -> bool:
        # No instruction exemptions: a gather lane or a masked move at a misaligned address is
        # just as fatal on SPARC or ARMv5 (each gather lane is its own element-sized access).
        # An instruction that itself demands more (vmovaps ymm: 32, xsave: 64) is held to that:
        # the step engine sees the operand before the #GP would kill the program.
        if access.size <= 1:
            return False
        align = required_alignment(access.size)
        if insn is not None and insn.gp_align > align:
            align = insn.gp_align
        return access.va % align != 0


@dataclass(frozen=True)
class CachelinePolicy:
    """The access spans two cache lines (a split load/store: slower, never trapped by x86)."""

    name: ClassVar[str] = "cacheline"
    line: int = 64

    def violates(self, access: Access, insn: Insn | None) -> bool:
        return _crosses(access, self.line)


@dataclass(frozen=True)
class PagePolicy:
    """The access spans two pages (two TLB lookups, possibly two faults)."""

    name: ClassVar[str] = "page"
    page: int = 4096

    def violates(self, access: Access, insn: Insn | None) -> bool:
        return _crosses(access, self.page)


_POLICIES: dict[str, type[AcPolicy] | type[NaturalPolicy] | type[CachelinePolicy] | type[PagePolicy]] = {
    cls.name: cls for cls in (AcPolicy, NaturalPolicy, CachelinePolicy, PagePolicy)
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def policy_by_name(name: str) -> Policy:
    """The policy called `name` (case-insensitive); ValueError naming the valid ones otherwise."""
    cls = _POLICIES.get(name.strip().lower())
    if cls is None:
        raise ValueError(f"unknown alignment policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}")
    return cls()


def violations(policy: Policy, insn: Insn | None, accesses: Sequence[Access]) -> list[Access]:
    """The accesses of one instruction execution that break `policy`, in execution order."""
    return [a for a in accesses if policy.violates(a, insn)]


def explains_fault(insn: Insn | None, accesses: Sequence[Access]) -> bool | None:
    """Whether a SIGBUS/BUS_ADRALN at this instruction is explained by one of its decoded
    accesses under x86 #AC rules. None when the decoder cannot tell: nothing was decoded, or the
    instruction touches memory the decoder does not fully model (far transfers, xsave) and none
    of the accesses it does model would fault."""
    if insn is None:
        return None
    if violations(AcPolicy(), insn, accesses):
        return True
    return False if insn.exact else None


_CLASS_TEXT = {
    "gp2": "2-byte integer (`mov ax`)", "gp4": "4-byte integer (`mov eax`)", "gp8": "8-byte integer (`mov rax`)",
    "sse4": "SSE scalar `movss`", "sse8": "SSE2 scalar `movsd`", "sse16": "SSE 16-byte `movups`/`movdqu`",
    "vex16": "VEX 16-byte `vmovdqu xmm`", "vex32": "VEX 32-byte `vmovdqu ymm`",
    "vex64": "EVEX 64-byte `vmovdqu64 zmm`", "x87_4": "x87 `fld dword`", "x87_8": "x87 `fld qword`",
    "x87_10": "x87 `fld tword`",
}


def markdown_table(rules: AcRules) -> str:
    """The measured table as Markdown, from the cached probe output (`python -m ualdbg.isa.alignment`)."""
    doc = json.loads(Path(rules.path).read_text())
    seen: dict[str, dict[str, list[str]]] = {}
    for line in doc["probe"]:
        cls, kind, off, result = line.split()
        seen.setdefault(cls, {}).setdefault(kind, []).append(f"{off}:{result}")
    out = [f"Measured by ualdbg/agent/src/acprobe/acprobe.c on {rules.cpu}.", "",
           "| class | probe results (offset mod 64: ok / ac) | checked at | Zen 3 rule |", "|---|---|---|---|"]
    for cls, kinds in seen.items():
        results = "; ".join(f"{kind} {' '.join(r)}" for kind, r in kinds.items())
        got = rules.checks.get(cls)
        at = "not measured" if got is None else "never" if got == 1 else str(got)
        zen3 = ZEN3_RULES.checks.get(cls, 0)
        out.append(f"| {_CLASS_TEXT.get(cls, cls)} | {results} | {at} | {'never' if zen3 == 1 else zen3} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown_table(measure_ac_rules()))
