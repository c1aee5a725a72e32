"""An instruction's cost class on x86 (core/cost.py): whether it is locked (a `lock` prefix, or
`xchg` with memory, which the CPU locks without one) and whether it is a vector access (an xmm,
ymm or zmm register moves the data: SSE, AVX, AVX-512, scalar forms included), and the class of
one of its accesses. On a strict CPU (a signal-mode CPU under qemu-user) every access traps.
And what each class costs on this CPU: the cost probe's price table, cached per CPU, and what
Linux's split-lock detection does here."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..core.cost import INSIDE, LINE_SPLIT, PAGE_SPLIT, SPLIT_LOCK, CostTable, cost_class
from ..core.model import Access

if TYPE_CHECKING:
    from ..core.result import TraceResult
    from .insn import Insn

_VECTOR_REGS = ("xmm", "ymm", "zmm")


def is_locked(insn: Insn | None) -> bool:
    """A locked read-modify-write: `lock`-prefixed, or xchg with a memory operand (implicitly
    locked, Intel SDM XCHG)."""
    if insn is None or insn.arch not in ("x86_64", "i386"):
        return False
    words = insn.mnemonic.split()
    return "lock" in words or (bool(insn.operands) and (insn.name or words[-1]) == "xchg")


def is_vector(insn: Insn | None) -> bool:
    """The data moves through a SIMD register (xmm/ymm/zmm)."""
    return insn is not None and insn.arch in ("x86_64", "i386") and any(r in insn.op_str for r in _VECTOR_REGS)


def is_strict(arch: str) -> bool:
    """A CPU whose misaligned accesses trap (no cost class but `traps`): the CPUs that trap
    natively or by prctl; not x86 (#AC is ualdbg's own doing) nor arm64 (the step engine only)."""
    from . import arch as archmod  # the CPU table: only for a trace of another CPU
    from .arch.info import MECH_NATIVE, MECH_PRCTL

    try:
        info = archmod.arch_by_name(arch)
    except ValueError:
        return False
    return info.mechanism in (MECH_NATIVE, MECH_PRCTL)


def classify(insn: Insn | None, access: Access | None, arch: str = "x86_64") -> str:
    """The cost class of `access` by `insn` (core/cost.py's names)."""
    if arch not in ("x86_64", "i386") and is_strict(arch):
        return cost_class(None, None, False, strict=True)
    if access is None:
        return cost_class(None, None, False)
    return cost_class(access.va, access.size, is_locked(insn))


def split_lock_detection(cpuinfo: str | None = None, cmdline: str | None = None) -> tuple[str, bool]:
    """What Linux does about a split lock here, in words, and whether measuring one could get the
    probe killed (split_lock_detect=fatal on a CPU that detects them): /proc/cpuinfo's
    split_lock_detect and bus_lock_detect flags, the kernel command line, kernel.split_lock_mitigate."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    cpuinfo = read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    cmdline = read("/proc/cmdline") if cmdline is None else cmdline
    flags = set(next((ln.partition(":")[2].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), []))
    detects = [f for f in ("split_lock_detect", "bus_lock_detect") if f in flags]
    mode = next((w.partition("=")[2] for w in cmdline.split() if w.startswith("split_lock_detect=")), "warn (default)")
    mitigate = read("/proc/sys/kernel/split_lock_mitigate").strip() or "?"
    if not detects:
        return (f"this CPU reports neither split_lock_detect nor bus_lock_detect: Linux does not see split locks "
                f"(split_lock_detect={mode.split()[0]} has nothing to act on; kernel.split_lock_mitigate={mitigate})"), False
    fatal = mode.startswith("fatal")
    return (f"{' and '.join(detects)} on this CPU, split_lock_detect={mode}, kernel.split_lock_mitigate={mitigate}"
            + ("; a split lock kills the process with SIGBUS: not measured" if fatal else "")), fatal


def measure_costs(cache_dir: Path | None = None, refresh: bool = False) -> CostTable:
    """The cost probe's figures on this CPU (ualdbg/agent/costprobe.py builds and runs it), cached
    as JSON next to it per CPU (vendor, family, model, stepping, microcode) and read back from
    there unless `refresh`. ProbeError when it cannot be built or run, or on another CPU than x86-64."""
    import json
    import os

    from ..agent.build import BuildError
    from ..agent.costprobe import CostProbeError, build_cost_probe, run_cost_probe
    from .alignment import ProbeError, cpu_identity, cpu_key

    if os.uname().machine not in ("x86_64", "AMD64"):
        raise ProbeError(f"the host is {os.uname().machine}, not x86-64")
    cpu = cpu_identity()
    try:
        exe = build_cost_probe(cache_dir)
    except BuildError as exc:
        raise ProbeError(str(exc)) from None
    table = exe.parent / f"costs-{cpu_key(cpu)}.json"
    detection, fatal = split_lock_detection()
    lines: list[str] | None = None
    if not refresh:
        try:
            lines = [str(x) for x in json.loads(table.read_text())["probe"]]
        except (OSError, ValueError, KeyError, TypeError):
            lines = None
    if lines is None:
        try:
            lines = run_cost_probe(exe, split_lock=not fatal)
        except CostProbeError as exc:
            raise ProbeError(str(exc)) from None
        tmp = table.with_name(f".{table.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps({"cpu": cpu, "probe": lines, "split_lock_detection": detection}, indent=1) + "\n")
            os.replace(tmp, table)
        except OSError:
            pass  # measured anyway; only the cache is lost
    return costs_from_probe(lines, f"{cpu['name']} ({cpu['vendor']} family {cpu['family']} model {cpu['model']})",
                            detection, str(table))


def costs_from_probe(lines: list[str], cpu: str, detection: str = "", path: str = "") -> CostTable:
    """The price table from the probe's lines: each class's ns over its aligned counterpart."""
    from .alignment import ProbeError

    measured: dict[str, float] = {}
    meta: dict[str, str] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "meta":
            meta[parts[1]] = parts[2]
        elif len(parts) == 2:
            try:
                measured[parts[0]] = float(parts[1])
            except ValueError:
                raise ProbeError(f"unexpected cost probe output {line!r}") from None
        else:
            raise ProbeError(f"unexpected cost probe output {line!r}")
    if "aligned" not in measured:
        raise ProbeError("the cost probe measured nothing")
    base = measured["aligned"]
    ns = {c: max(0.0, measured[c] - base) for c in (INSIDE, LINE_SPLIT, PAGE_SPLIT) if c in measured}
    if SPLIT_LOCK in measured:
        ns[SPLIT_LOCK] = max(0.0, measured[SPLIT_LOCK] - measured.get("locked-aligned", base))
    note = ""
    if SPLIT_LOCK not in measured:
        note = ("split lock not measured: " + ("the kernel killed the probe's split lock (signal "
                f"{meta['split-lock-killed']})" if "split-lock-killed" in meta else "split_lock_detect=fatal would kill it"))
    how = (f"measured here on {cpu} by ualdbg's cost probe: dependent 8-byte loads (latency) and locked adds on one "
           f"L1-resident address, best of {meta.get('rounds', '?')} runs of {meta.get('iterations', '?')}x"
           f"{meta.get('unroll', '?')}, clock_gettime, pinned to CPU {meta.get('cpu', '?')}; extra ns over the "
           "aligned access" + (f"; {detection}" if detection else "") + (f"; cache {path}" if path else ""))
    return CostTable(ns=ns, measured=measured, how=how, note=note)


_COSTS: CostTable | None | bool = False


def cost_table() -> CostTable | None:
    """The price table for this CPU, measured once per process (cached per CPU on disk); None when
    the probe cannot be built or run here (the summary then ranks by count)."""
    global _COSTS
    if _COSTS is False:
        from .alignment import ProbeError

        try:
            _COSTS = measure_costs()
        except ProbeError:
            _COSTS = None
    return _COSTS if isinstance(_COSTS, CostTable) else None


def costs_for(result: TraceResult) -> CostTable | None:
    """The price table a summary of this x86-64 trace ranks by, when one of its sites has a
    misaligned access past the inside of a line (nothing else to rank), None otherwise."""
    if result.arch not in ("x86_64", "i386", "i686"):
        return None
    if not any({c for c, n in s.classes.items() if n} - {INSIDE} for s in result.sites):  # (engines count zeros too)
        return None
    return cost_table()
