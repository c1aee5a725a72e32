"""The stackcheck measurer inside one gdb batch process: every variant is one `run` through
ualdbg's exec helper (exact argv and environment), stopped at main's entry (stack pointer, argv,
environment strings) and at each probe the first time it is reached (`&NAME`), then killed."""
from __future__ import annotations

import json
import os
import time
import traceback
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...stackcheck import parse_initial_stack


def _quiet(cmd: str) -> str:
    return str(gdb.execute(cmd, to_string=True))


def _stack_end(pid: int, sp: int) -> int:
    """End of the mapping that holds `sp` (the stack's top), from /proc: the kernel's view."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            lo_hi = line.split(None, 1)[0]
            lo, hi = (int(x, 16) for x in lo_hi.split("-"))
            if lo <= sp < hi:
                return hi
    return sp + 4096


class _Stops:
    """Which of our breakpoints the last stop hit (several can share one PC)."""

    def __init__(self) -> None:
        self.hit: list[Any] = []
        gdb.events.stop.connect(self.on_stop)

    def on_stop(self, event: Any) -> None:
        self.hit = list(getattr(event, "breakpoints", []) or [])


def _bp(spec: str) -> Any:
    bp = gdb.Breakpoint(spec, internal=True)
    bp.silent = True
    return bp


def main(plan_path: str) -> None:
    plan = json.load(open(plan_path))
    result: dict[str, Any] = {"arch": None, "variants": [], "error": None}
    try:
        _sweep(plan, result)
    except Exception as exc:  # the caller reports it as one line; the log has the rest
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    with open(plan["result"] + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(plan["result"] + ".tmp", plan["result"])


def _sweep(plan: dict[str, Any], result: dict[str, Any]) -> None:
    for cmd in ("set pagination off", "set confirm off", "set print inferior-events off", "set print thread-events off",
                # The measurement needs no shared-library symbols; reading them (libc6-dbg's
                # separate debug files above all) costs ~140 ms per run, the rest ~9 ms.
                "set auto-solib-add off", "set auto-load off", "set libthread-db-search-path /nonexistent",
                "set startup-with-shell on", "set breakpoint pending on"):
        _quiet(cmd)
    word = int(plan["word_size"])
    stops = _Stops()
    main_bp = _bp("*main")
    progress = plan.get("progress")
    total = len(plan["variants"])
    for n, variant in enumerate(plan["variants"]):
        t0 = time.monotonic()
        out = _one(plan, variant, word, stops, main_bp)
        out["seconds"] = round(time.monotonic() - t0, 6)
        result["variants"].append(out)
        if result["arch"] is None and out.get("arch"):
            result["arch"] = out["arch"]
        if progress:
            with open(progress + ".tmp", "w") as f:
                f.write(f"{n + 1} {total}\n")
            os.replace(progress + ".tmp", progress)


def _read_word(addr: int, word: int) -> int:
    data = bytes(gdb.selected_inferior().read_memory(addr, word))
    return int.from_bytes(data, "little")


def _one(plan: dict[str, Any], variant: dict[str, Any], word: int, stops: _Stops, main_bp: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"variant": variant["id"], "vars": {}, "var_errors": {}, "env": {}, "argv": []}
    _quiet(f"set exec-wrapper {variant['wrapper']}")
    _quiet(f"set disable-randomization {'off' if variant['aslr'] else 'on'}")
    temp: list[Any] = []
    pending = {p["id"]: p for p in plan["probes"]}
    try:
        stops.hit = []
        try:
            _quiet("run")
        except gdb.error as exc:
            out["error"] = str(exc)
            return out
        inf = gdb.selected_inferior()
        while inf.pid:
            hit = stops.hit
            stops.hit = []
            if main_bp in hit:
                _at_main(plan, out, word, pending, temp)
            for bp, probe_id in list(temp):
                if bp in hit:
                    probe = pending.pop(probe_id, None)
                    if probe is not None:
                        _at_probe(probe, out)
            if "sp_main" not in out and not hit:
                out["error"] = "stopped before main (a signal?)"
                break
            if not pending and not plan["run_to_exit"]:
                break
            try:
                _quiet("continue")
            except gdb.error as exc:
                out["error"] = str(exc)
                break
        if inf.pid:
            _quiet("kill")
        else:
            code = gdb.convenience_variable("_exitcode")
            out["exit_status"] = None if code is None else int(code)
        for p in pending.values():
            for item, _name in p["variables"]:
                out["vars"].setdefault(item, None)
                out["var_errors"].setdefault(item, f"{p['function']} not reached")
        if "sp_main" not in out and "error" not in out:
            out["error"] = "the program ended before main"
    finally:
        for bp, _ in temp:
            if bp.is_valid():
                bp.delete()
    out_file = variant.get("output")
    if plan["run_to_exit"] and out_file and os.path.exists(out_file):
        with open(out_file, errors="replace") as f:
            out["output"] = f.read(65536)
    return out


def _at_main(plan: dict[str, Any], out: dict[str, Any], word: int, pending: dict[str, Any], temp: list[Any]) -> None:
    frame = gdb.selected_frame()
    out["arch"] = frame.architecture().name()
    sp = int(frame.read_register("sp"))
    out["sp_main"] = sp
    where = plan["argv_at_main"]
    if "register" in where:
        argv = int(frame.read_register(where["register"]))
    else:
        argv = _read_word(sp + int(where["stack"]), word)
    out["argv_ptr"] = argv
    # argc sits one word below argv[]: the initial stack pointer the kernel set up.
    initial = argv - word
    inf = gdb.selected_inferior()
    end = _stack_end(inf.pid, initial)
    blob = bytes(inf.read_memory(initial, end - initial))
    argc, argv_addrs, env = parse_initial_stack(blob, initial, word)
    out["argc"] = argc
    out["argv"] = argv_addrs
    names = set(plan["env_names"])
    for addr, name in env:
        if name in names and name not in out["env"]:
            out["env"][name] = addr
    pc = int(frame.pc())
    bias = pc - int(plan["main_link"])
    for probe in list(pending.values()):
        if probe["kind"] == "main":
            _at_probe(pending.pop(probe["id"]), out)
        elif probe["kind"] == "address":
            addr = int(probe["address"]) + bias
            if addr == pc:
                _at_probe(pending.pop(probe["id"]), out)
                continue
            temp.append((_bp(f"*{addr:#x}"), probe["id"]))


def _at_probe(probe: dict[str, Any], out: dict[str, Any]) -> None:
    for item, name in probe["variables"]:
        try:
            value = gdb.parse_and_eval(f"&{name}")
            out["vars"][item] = int(value)
        except gdb.error as exc:
            out["vars"][item] = None
            out["var_errors"][item] = str(exc)
