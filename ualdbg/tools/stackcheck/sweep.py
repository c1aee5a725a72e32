"""The measuring loop of `ualdbg stackcheck` inside one debugger process, debugger-neutral: for
each variant of the plan, start it through the exec helper, take the stack pointer, argv and the
environment strings at main's entry and each probe's variable addresses the first time it is
reached, optionally trace it to its end, then kill it. The adapters' stackcheck drivers supply
only a SweepDebugger (start, continue, breakpoints, registers, memory, `&NAME`)."""
from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from ...core.errors import UaldbgError
from .check import parse_initial_stack


class SweepError(UaldbgError):
    """A debugger operation failed in one variant: recorded as that variant's error."""


class StopView(Protocol):
    """The stopped thread of the program."""

    def pc(self) -> int: ...

    def sp(self) -> int: ...

    def register(self, name: str) -> int: ...

    def read_memory(self, addr: int, size: int) -> bytes: ...

    def address_of(self, name: str) -> int:
        """`&name` in the stopped frame (a local, a parameter or a static). Raises SweepError."""
        ...


class SweepDebugger(Protocol):
    """What the loop needs from a debugger. `start` and `cont` return at the next stop that is
    one of ours (main's entry, a probe) or when the program has ended; stops of the exec helper
    and other debugger-internal stops are the adapter's business."""

    name: str

    def start(self, variant: dict[str, Any]) -> None: ...

    def cont(self) -> None: ...

    def alive(self) -> bool: ...

    def pid(self) -> int: ...

    def hits(self) -> set[str]:
        """Which of our breakpoints the last stop hit: "main" and/or probe ids."""
        ...

    def stopped(self) -> StopView: ...

    def add_probe(self, probe_id: str, addr: int) -> None: ...

    def clear_probes(self) -> None: ...

    def kill(self) -> None: ...

    def exit_status(self) -> int | None: ...

    def trace_begin(self) -> None:
        """--trace: arm the trap engine for this variant from main on (a no-op without it)."""
        ...

    def trace_end(self, status: int | None) -> dict[str, Any] | None:
        """--trace: the variant's trace document (ualdbg JSON schema 1), then reset."""
        ...


def stack_end(pid: int, sp: int) -> int:
    """End of the mapping that holds `sp` (the stack's top), from /proc: the kernel's view."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo <= sp < hi:
                return hi
    return sp + 4096


def at_main(plan: dict[str, Any], out: dict[str, Any], stop: StopView, pid: int,
            pending: dict[str, dict[str, Any]], dbg: SweepDebugger) -> None:
    """Main's entry: sp, argv[] and the named environment strings (parsed from the initial
    stack: argc sits one word below argv[]), statics (link address + the program's load bias),
    breakpoints for the other probes."""
    word = int(plan["word_size"])
    sp = stop.sp()
    out["sp_main"] = sp
    where = plan["argv_at_main"]
    if "register" in where:
        argv = stop.register(where["register"])
    else:
        argv = int.from_bytes(stop.read_memory(sp + int(where["stack"]), word), "little")
    out["argv_ptr"] = argv
    initial = argv - word
    end = stack_end(pid, initial)
    blob = stop.read_memory(initial, end - initial)
    argc, argv_addrs, env = parse_initial_stack(blob, initial, word)
    out["argc"] = argc
    out["argv"] = argv_addrs
    names = set(plan["env_names"])
    for addr, name in env:
        if name in names and name not in out["env"]:
            out["env"][name] = addr
    pc = stop.pc()
    bias = pc - int(plan["main_link"])
    for probe in list(pending.values()):
        if probe["kind"] == "static":
            for item, _name in pending.pop(probe["id"])["variables"]:
                out["vars"][item] = int(probe["address"]) + bias
        elif probe["kind"] == "address":
            addr = int(probe["address"]) + bias
            if addr == pc:
                at_probe(pending.pop(probe["id"]), out, stop)
            else:
                dbg.add_probe(probe["id"], addr)


def at_probe(probe: dict[str, Any], out: dict[str, Any], stop: StopView) -> None:
    for item, name in probe["variables"]:
        try:
            out["vars"][item] = stop.address_of(name)
        except SweepError as exc:
            out["vars"][item] = None
            out["var_errors"][item] = str(exc)


def measure_variant(plan: dict[str, Any], variant: dict[str, Any], dbg: SweepDebugger) -> dict[str, Any]:
    out: dict[str, Any] = {"variant": variant["id"], "vars": {}, "var_errors": {}, "env": {}, "argv": []}
    pending = {p["id"]: p for p in plan["probes"]}
    to_exit = bool(plan["run_to_exit"] or plan.get("trace"))
    tracing = bool(plan.get("trace"))
    try:
        if tracing:
            dbg.trace_begin()
        try:
            dbg.start(variant)
        except SweepError as exc:
            out["error"] = str(exc)
            return out
        while dbg.alive():
            hit = dbg.hits()
            if "main" in hit and "sp_main" not in out:
                at_main(plan, out, dbg.stopped(), dbg.pid(), pending, dbg)
            for probe_id in hit - {"main"}:
                probe = pending.pop(probe_id, None)
                if probe is not None:
                    at_probe(probe, out, dbg.stopped())
            if "sp_main" not in out and not hit:
                out["error"] = "stopped before main (a signal?)"
                break
            if not pending and not to_exit:
                break
            try:
                dbg.cont()
            except SweepError as exc:
                out["error"] = str(exc)
                break
        if dbg.alive():
            dbg.kill()
        else:
            out["exit_status"] = dbg.exit_status()
        for p in pending.values():
            for item, _name in p["variables"]:
                out["vars"].setdefault(item, None)
                out["var_errors"].setdefault(item, f"{p['function']} not reached")
        if "sp_main" not in out and "error" not in out:
            out["error"] = "the program ended before main"
    finally:
        dbg.clear_probes()
        if tracing:
            doc = dbg.trace_end(out.get("exit_status"))
            if doc is not None:
                out["trace"] = doc
    out_file = variant.get("output")
    if plan["run_to_exit"] and out_file and os.path.exists(out_file):
        with open(out_file, errors="replace") as f:
            out["output"] = f.read(65536)
    return out


def sweep(plan_path: str, make: Callable[[dict[str, Any]], SweepDebugger]) -> None:
    """Measure every variant of the plan with the debugger `make(plan)` sets up; write the
    result file the measurer reads (an error in the sweep itself becomes the result's `error`,
    one line; the debugger's log has the traceback)."""
    with open(plan_path) as f:
        plan = json.load(f)
    result: dict[str, Any] = {"variants": [], "error": None}
    progress = plan.get("progress")
    total = len(plan["variants"])
    try:
        dbg = make(plan)
        for n, variant in enumerate(plan["variants"]):
            t0 = time.monotonic()
            out = measure_variant(plan, variant, dbg)
            out["seconds"] = round(time.monotonic() - t0, 6)
            result["variants"].append(out)
            if progress:
                with open(progress + ".tmp", "w") as f:
                    f.write(f"{n + 1} {total}\n")
                os.replace(progress + ".tmp", progress)
    except Exception as exc:  # the caller reports it as one line; the log has the rest
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    with open(plan["result"] + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(plan["result"] + ".tmp", plan["result"])
