"""`ualdbg stackcheck`: does alignment (and speed) depend on argv and the environment? The sweep
of variants (argv[0] lengths x environment padding, plus ASLR runs), the items measured in each,
the verdicts, the timing analysis and the JSON document. Debugger-neutral: addresses come from a
Measurer (stackcheck_run.py runs gdb or lldb); this module never starts a process itself."""
from __future__ import annotations

import os
import statistics
import struct
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any, Protocol

from ... import __version__
from ...core.errors import UaldbgError
from ...lazyclass import dataclass
from .launch import LaunchSpec

SCHEMA = 1
PAD_NAME = "UALDBG_PAD"
PAD_CHAR = "x"
MODULI = (16, 32, 64, 4096)
MAX_VARIANTS = 4096


class StackcheckError(UaldbgError):
    """Bad input (a range, a variable, an environment name): one line, exit status 2."""


# -- input -----------------------------------------------------------------------------------

def parse_lengths(text: str, *, minimum: int, what: str) -> tuple[int, ...]:
    """`1-16`, `0-64/4`, `3,5,8-10`, `7`: sorted distinct whole numbers >= minimum."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise StackcheckError(f"{what} {text!r}: empty item (use e.g. 1-16, 0-64/4 or 3,5,8)")
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if "-" in body:
                lo_text, hi_text = body.split("-", 1)
                lo, hi = int(lo_text), int(hi_text)
            else:
                lo = hi = int(body)
        except ValueError:
            raise StackcheckError(f"{what} {text!r}: not a range (use e.g. 1-16, 0-64/4 or 3,5,8)") from None
        if step <= 0:
            raise StackcheckError(f"{what} {text!r}: the step must be positive")
        if lo > hi:
            raise StackcheckError(f"{what} {text!r}: {lo} is more than {hi}")
        if lo < minimum:
            raise StackcheckError(f"{what} {text!r}: lengths start at {minimum}")
        if hi > 1 << 20:
            raise StackcheckError(f"{what} {text!r}: {hi} bytes is more than this tool will put on a stack")
        out.update(range(lo, hi + 1, step))
    return tuple(sorted(out))


def parse_var(text: str) -> tuple[str, str]:
    func, sep, name = text.partition(":")
    if not sep or not func or not name:
        raise StackcheckError(f"--var {text!r}: write FUNC:NAME, e.g. main:x")
    return func, name


@dataclass
class Request:
    """One sweep: the program as the user runs it and what to vary and measure."""

    argv: list[str]  # argv as given: argv[0] is what the user typed
    exec_path: str  # what execve gets (the shell's choice: the typed path, or found on PATH)
    base_env: tuple[str, ...]  # the user's environment, NAME=VALUE in order
    env_note: str = ""  # what was taken out of the base environment and why
    argv0_lengths: tuple[int, ...] | None = None  # None: argv[0] as given
    env_pad: tuple[int, ...] = (0,)
    env_names: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()  # FUNC:NAME; empty: main's locals that need 8 bytes or more
    aslr_runs: int = 0
    time_runs: int = 0
    trace: bool = False
    max_spread: float | None = None
    run_to_exit: bool = False
    debugger: str = "gdb"


@dataclass(frozen=True)
class Variant:
    id: str
    label: str
    argv0: str
    argv0_length: int | None  # None: as given
    env_pad: int
    aslr: bool
    launch: LaunchSpec


def argv0_of_length(given: str, length: int) -> str:
    """A name of exactly `length` characters made from the program's base name: cut, or
    extended with '_' (a program that looks at its own name still sees its name first)."""
    base = os.path.basename(given) or "p"
    return (base + "_" * length)[:length]


def make_variants(req: Request) -> list[Variant]:
    env_base = tuple(e for e in req.base_env if not e.startswith(PAD_NAME + "="))
    lengths: Sequence[int | None] = req.argv0_lengths if req.argv0_lengths is not None else (None,)
    out: list[Variant] = []
    for n in lengths:
        argv0 = req.argv[0] if n is None else argv0_of_length(req.argv[0], n)
        for pad in req.env_pad:
            env = env_base + ((f"{PAD_NAME}={PAD_CHAR * pad}",) if pad else ())
            label = f"argv0={'as given' if n is None else n} pad={pad}"
            out.append(Variant(f"v{len(out)}", label, argv0, n, pad, False,
                               LaunchSpec(req.exec_path, (argv0, *req.argv[1:]), env, aslr=False)))
    base_env = env_base
    for k in range(req.aslr_runs):
        out.append(Variant(f"aslr{k + 1}", f"ASLR on #{k + 1}", req.argv[0], None, 0, True,
                           LaunchSpec(req.exec_path, tuple(req.argv), base_env, aslr=True)))
    if len(out) > MAX_VARIANTS:
        raise StackcheckError(f"{len(out)} variants is more than {MAX_VARIANTS}: narrow --argv0-lengths or --env-pad")
    return out


# -- what is measured ------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """Something with an address in every variant."""

    id: str
    kind: str  # variable | argv | env | sp_entry | sp_main
    align: int  # what its type needs; 1 for characters
    type: str
    bias: int = 0  # checked value is address + bias (sp at a function entry: sp + word is 16-aligned)
    judged: bool = True  # counts toward exit status 1 when misaligned
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeSpec:
    """A place in the code where some variables' addresses are taken (debugger-neutral)."""

    id: str
    kind: str  # address (stop at link-time `address` in `function`) | static (at link-time `address`)
    function: str
    address: int | None = None
    variables: tuple[tuple[str, str], ...] = ()  # (item id, variable name)


@dataclass
class Plan:
    """What a Measurer is asked to do: every variant once, stopping at main's entry and at
    each probe the first time it is reached."""

    program: str
    word_size: int
    main_link: int  # link-time address of main
    argv_at_main: dict[str, Any]  # {"register": "rsi"} or {"stack": 8}: where argv is at main's entry
    probes: list[ProbeSpec]
    variants: list[Variant]
    run_to_exit: bool
    env_names: tuple[str, ...]


@dataclass
class Raw:
    """What a Measurer found in one variant."""

    variant: str
    sp_main: int | None = None
    argv_ptr: int | None = None
    argv: list[int] = field(default_factory=list)
    env: dict[str, int] = field(default_factory=dict)  # name -> address of the NAME=VALUE string
    vars: dict[str, int | None] = field(default_factory=dict)
    var_errors: dict[str, str] = field(default_factory=dict)
    exit_status: int | None = None
    output: str | None = None
    error: str | None = None
    seconds: float = 0.0
    trace: dict[str, Any] | None = None  # --trace: the run's unaligned accesses (stackcheck_run._trace_summary)


class Measurer(Protocol):
    def measure(self, plan: Plan, progress: Callable[[int, int], None] | None = None) -> list[Raw]: ...


def parse_initial_stack(blob: bytes, base: int, word: int) -> tuple[int, list[int], list[tuple[int, str]]]:
    """argc, argv[] and (address, NAME) of each environment string, from the memory at the
    initial stack pointer (argc, argv pointers, NULL, envp pointers, NULL, auxv, ..., strings)."""
    fmt = "<Q" if word == 8 else "<I"

    def w(i: int) -> int:
        return int(struct.unpack_from(fmt, blob, i * word)[0])

    argc = w(0)
    argv = [w(1 + i) for i in range(argc)]
    env: list[tuple[int, str]] = []
    i = 2 + argc
    while (i + 1) * word <= len(blob):
        p = w(i)
        if p == 0:
            break
        off = p - base
        name = ""
        if 0 <= off < len(blob):
            end = blob.find(b"=", off, off + 4096)
            nul = blob.find(b"\0", off, off + 4096)
            if end >= 0 and (nul < 0 or end < nul):
                name = blob[off:end].decode("utf-8", "surrogateescape")
            elif nul >= 0:
                name = blob[off:nul].decode("utf-8", "surrogateescape")
        env.append((p, name))
        i += 1
    return argc, argv, env


# -- verdicts --------------------------------------------------------------------------------

def residues(addr: int, item: Item) -> dict[str, int]:
    v = addr + item.bias
    out = {"align": v % item.align} if item.align > 1 else {}
    for m in (8, *MODULI) if item.align == 1 else MODULI:
        out[str(m)] = v % m
    return out


def verdict(item: Item, values: dict[str, int | None], labels: dict[str, str]) -> dict[str, Any]:
    measured = {k: v for k, v in values.items() if v is not None}
    missing = [k for k, v in values.items() if v is None]
    out: dict[str, Any] = {"item": item.id, "align": item.align, "measured": len(measured), "variants": len(values)}
    if not measured:
        out.update(verdict="not-measured", misaligned_in=[], moves_modulo=[],
                   text="no address in any variant" + (f" ({len(missing)} not reached)" if missing else ""))
        return out
    bad = [k for k, v in measured.items() if (v + item.bias) % item.align]
    distinct = {str(m): sorted({(v + item.bias) % m for v in measured.values()}) for m in (8, *MODULI)}
    moves = [m for m in MODULI if len(distinct[str(m)]) > 1]
    out["distinct"] = distinct
    out["moves_modulo"] = moves
    out["misaligned_in"] = bad
    out["not_reached_in"] = missing
    n = len(measured)
    if bad:
        names = ", ".join(labels.get(k, k) for k in bad[:12]) + (" ..." if len(bad) > 12 else "")
        out["verdict"] = "misaligned"
        out["text"] = f"MISALIGNED for its {item.align}-byte alignment in {len(bad)} of {n} variants: {names}"
    elif item.align == 1:
        vals = distinct["8"]
        out["verdict"] = "moves" if len(vals) > 1 else "stable"
        out["text"] = (f"characters (no alignment of their own); address mod 8 takes {len(vals)} value{'s' if len(vals) != 1 else ''}"
                       f" ({', '.join(map(str, vals))}): a 2/4/8-byte field read from it is misaligned in some variants"
                       if len(vals) > 1 else f"characters; address mod 8 is always {vals[0]}")
        if len(distinct["4096"]) > 1 and len(vals) == 1:
            out["verdict"] = "moves"
            out["text"] += f"; mod 4096 takes {len(distinct['4096'])} values"
    elif moves:
        parts = []
        if 64 in moves:
            parts.append(f"its cache-line offset (mod 64) takes {len(distinct['64'])} values ({', '.join(map(str, distinct['64']))})")
        elif 16 in moves or 32 in moves:
            m = 16 if 16 in moves else 32
            parts.append(f"mod {m} takes {len(distinct[str(m)])} values")
        if 4096 in moves:
            parts.append(f"its page offset (mod 4096) takes {len(distinct['4096'])} values")
        out["verdict"] = "moves"
        out["text"] = f"always {item.align}-byte aligned, but " + " and ".join(parts)
    else:
        out["verdict"] = "stable"
        out["text"] = f"always {item.align}-byte aligned at the same page offset ({distinct['4096'][0]:#x})"
    return out


# -- timing ----------------------------------------------------------------------------------

def timing_summary(times: list[float]) -> dict[str, Any]:
    med = statistics.median(times)
    return {"runs": len(times), "median_s": round(med, 6), "min_s": round(min(times), 6), "max_s": round(max(times), 6),
            "spread_pct": round((max(times) - min(times)) / med * 100, 2) if med > 0 else 0.0,
            "times_s": [round(t, 6) for t in times]}


def _split(name: str, by: str, classes: dict[str, str], medians: dict[str, float], noise: float) -> dict[str, Any] | None:
    """Whether the variants' median times split by `classes`: every class has two variants or
    more, the classes' ranges of medians do not overlap, and their medians differ by more than
    the run-to-run noise."""
    groups: dict[str, list[float]] = {}
    for v, med in medians.items():
        if v in classes:
            groups.setdefault(classes[v], []).append(med)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda kv: statistics.median(kv[1]))
    enough = all(len(g) >= 2 for _, g in ordered)
    separated = all(max(a[1]) < min(b[1]) for a, b in zip(ordered, ordered[1:]))
    g_lo = statistics.median(ordered[0][1])
    g_hi = statistics.median(ordered[-1][1])
    diff = (g_hi - g_lo) / g_lo * 100 if g_lo > 0 else 0.0
    return {"item": name, "by": by,
            "groups": {k: {"variants": len(g), "median_s": round(statistics.median(g), 6)} for k, g in ordered},
            "difference_pct": round(diff, 2), "tracks": bool(enough and separated and diff > noise),
            "too_few": not enough}


def timing_analysis(items: list[Item], per_variant: dict[str, dict[str, Any]],
                    addresses: dict[str, dict[str, int | None]], max_spread: float | None,
                    faulty: dict[str, bool] | None = None) -> dict[str, Any]:
    """Across variants: the spread of the median times (max over min), and for each item whose
    alignment class changes (misaligned or not; else its cache-line offset), and for the
    traced unaligned accesses (some or none), whether the times split with it (_split).
    Strings have no alignment class of their own: the trace split covers what reads them."""
    medians = {v: t["median_s"] for v, t in per_variant.items()}
    if not medians:
        return {}
    lo, hi = min(medians.values()), max(medians.values())
    spread = (hi - lo) / lo * 100 if lo > 0 else 0.0
    noise = max(1.0, statistics.median(t["spread_pct"] for t in per_variant.values()))
    tracks = []
    for item in items:
        if item.align <= 1:
            continue
        vals = {v: a for v, a in addresses.get(item.id, {}).items() if a is not None}
        aligned = {v: "misaligned" if (a + item.bias) % item.align else "aligned" for v, a in vals.items()}
        split = _split(item.id, "alignment", aligned, medians, noise)
        if split is None:
            split = _split(item.id, "mod 64", {v: str((a + item.bias) % 64) for v, a in vals.items()}, medians, noise)
        if split is not None:
            tracks.append(split)
    if faulty:
        split = _split("traced unaligned accesses", "trace", {v: "some" if f else "none" for v, f in faulty.items()},
                       medians, noise)
        if split is not None:
            tracks.append(split)
    return {"median_min_s": round(lo, 6), "median_max_s": round(hi, 6), "spread_pct": round(spread, 2),
            "noise_pct": round(noise, 2), "max_spread_pct": max_spread,
            "exceeded": bool(max_spread is not None and spread > max_spread), "tracks": tracks}


# -- the document ----------------------------------------------------------------------------

def hexa(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def stackcheck_document(req: Request, plan: Plan, items: list[Item], raws: list[Raw],
                   times: dict[str, list[float]] | None, traces: dict[str, dict[str, Any]] | None,
                   arch: str, notes: list[str], duration: float) -> dict[str, Any]:
    by_id = {r.variant: r for r in raws}
    labels = {v.id: v.label for v in plan.variants}
    addresses: dict[str, dict[str, int | None]] = {it.id: {} for it in items}
    variants_out = []
    word = plan.word_size
    for v in plan.variants:
        r = by_id.get(v.id) or Raw(v.id, error="not measured")
        vals: dict[str, int | None] = {}
        for it in items:
            a: int | None
            if it.kind == "sp_entry":
                a = None if r.argv_ptr is None else r.argv_ptr - word
            elif it.kind == "sp_main":
                a = r.sp_main
            elif it.kind == "argv":
                i = int(it.detail["index"])
                a = r.argv[i] if i < len(r.argv) else None
            elif it.kind == "env":
                a = r.env.get(str(it.detail["name"]))
            else:
                a = r.vars.get(it.id)
            vals[it.id] = a
            addresses[it.id][v.id] = a
        entry: dict[str, Any] = {
            "id": v.id, "label": v.label, "argv0": v.argv0, "argv0_length": len(v.argv0),
            "argv0_as_given": v.argv0_length is None, "env_pad": v.env_pad,
            "env_added": {PAD_NAME: PAD_CHAR * v.env_pad} if v.env_pad else {},
            "aslr": v.aslr, "error": r.error,
            "addresses": {k: {"address": hexa(a), **({} if a is None else residues(a, next(i for i in items if i.id == k)))}
                          for k, a in vals.items()},
        }
        if r.var_errors:
            entry["variable_errors"] = dict(r.var_errors)
        if req.run_to_exit:
            entry["exit_status"] = r.exit_status
            entry["output"] = r.output
        if times is not None and v.id in times and times[v.id]:
            entry["time"] = timing_summary(times[v.id])
        if traces is not None and v.id in traces:
            entry["trace"] = traces[v.id]
        variants_out.append(entry)
    verdicts = [verdict(it, addresses[it.id], labels) for it in items]
    timing = None
    if times is not None:
        per = {v["id"]: v["time"] for v in variants_out if "time" in v}
        some = {vid: bool(t.get("faults_total")) for vid, t in traces.items()} if traces else None
        timing = timing_analysis(items, per, addresses, req.max_spread, some)
    trace_summary: dict[str, Any] | None = None
    if traces is not None:
        faulty = [vid for vid, t in traces.items() if t.get("faults_total")]
        trace_summary = {"variants": len(traces), "variants_with_faults": faulty,
                         "labels": [labels.get(vid, vid) for vid in faulty],
                         "errors": {vid: t["error"] for vid, t in traces.items() if t.get("error")}}
    reasons = []
    for verdict_, it in zip(verdicts, items):
        if it.judged and verdict_["verdict"] == "misaligned":
            reasons.append(f"{verdict_['item']} is misaligned in {len(verdict_['misaligned_in'])} variant(s)")
    if trace_summary and trace_summary["variants_with_faults"]:
        reasons.append(f"{len(trace_summary['variants_with_faults'])} traced variant(s) made unaligned accesses")
    if timing and timing.get("exceeded"):
        reasons.append(f"run time spread {timing['spread_pct']}% exceeds --max-spread {req.max_spread}%")
    return {
        "schema": SCHEMA, "tool": "ualdbg", "document": "stackcheck", "version": __version__,
        "debugger": req.debugger, "arch": arch,
        "program": {"path": req.exec_path, "argv": list(req.argv)},
        "environment": {
            "base_variables": len(req.base_env), "base_bytes": sum(len(e) + 1 for e in req.base_env),
            "padding": {"name": PAD_NAME, "fill": PAD_CHAR, "position": "last",
                        "lengths": list(req.env_pad),
                        "meaning": f"pad N adds the string {PAD_NAME}=<N x '{PAD_CHAR}'> as the last variable; pad 0 adds nothing"},
            "note": req.env_note,
            "same_in_every_run": "each run (debugger, native timing, trace) gets exactly this argv and environment through "
                                 "ualdbg's exec helper; the debugger's own additions (LINES, COLUMNS) never reach the program",
        },
        "aslr_runs": req.aslr_runs,
        "items": [{"id": it.id, "kind": it.kind, "align": it.align, "type": it.type, **it.detail} for it in items],
        "variants": variants_out,
        "verdicts": verdicts,
        "timing": timing,
        "trace": trace_summary,
        "notes": notes,
        "duration_s": round(duration, 3),
        "exit": 1 if reasons else 0,
        "reasons": reasons,
    }
