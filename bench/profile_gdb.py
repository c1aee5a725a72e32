"""Where the time of ualdbg's trace path in gdb goes. Sourced inside gdb after
`-x gdb/ualdbg.py -ex "ualdbg trace start"`, with two convenience variables set first:
`$bench_out` (the JSON file to write) and `$bench_mode`:
- "split": wraps ualdbg's entry points and the Target calls with perf_counter timers (cheap), so
  the run's wall time splits into ualdbg's Python (inclusive, per section) and the rest (gdb,
  ptrace, the kernel, the program);
- "cprofile": runs the program under cProfile and keeps the top functions (slower: cProfile
  inflates Python time, so read its shares of Python time, not absolute figures).
Then `run`s the program to its end and writes the JSON."""
import cProfile
import json
import os
import pstats
import time

import gdb  # noqa: TID251  (runs inside gdb, as gdb/ualdbg.py does)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, [(module, attribute path), ...]): each is timed inclusively, at the first place of its
# list that exists (the code under test moves faster than this list); a label found nowhere is
# reported as skipped.
SECTIONS = [
    ("signal catchpoint condition ($_ualdbg_signal), all", [("ualdbg.adapters.gdb.conditions", "_SignalFunction.invoke"),
                                                            ("ualdbg.adapters.gdb.hooks", "_SignalFunction.invoke")]),
    ("syscall catchpoint condition ($_ualdbg_syscall)", [("ualdbg.adapters.gdb.conditions", "_SyscallFunction.invoke"),
                                                        ("ualdbg.adapters.gdb.hooks", "_SyscallFunction.invoke")]),
    ("arm point at main", [("ualdbg.adapters.gdb.catchpoints", "ArmPoint.stop"), ("ualdbg.adapters.gdb.hooks", "ArmPoint.stop")]),
    ("`handle SIGBUS` changes", [("ualdbg.adapters.gdb.signals", "SignalHandles.set_pass"),
                                  ("ualdbg.adapters.gdb.hooks", "GdbHooks._set_pass")]),
    ("engine: on_signal (SIGBUS and SIGTRAP)", [("ualdbg.engines.trap", "TrapEngine.on_signal")]),
    ("engine: TF trap after the fault, re-arm AC", [("ualdbg.engines.trap", "TrapEngine._on_trap")]),
    ("session: record_fault", [("ualdbg.engines.faultpath", "FaultPath.record"),
                                ("ualdbg.engines.recorder", "FaultRecorder.record_fault")]),
    ("session: module_of (scope)", [("ualdbg.engines.image", "ProcessImage.module_of"),
                                     ("ualdbg.engines.recorder", "FaultRecorder.module_of")]),
    ("session: decode + policy", [("ualdbg.engines.rules", "FaultRules.analyse"),
                                   ("ualdbg.engines.recorder", "FaultRecorder.analyse")]),
    ("session: CPU of the thread (/proc/PID/task/TID/stat)",
     [("ualdbg.engines.procfs", "CpuReader.__call__"), ("ualdbg.engines.recorder", "last_cpu")]),
    ("session: resolve (symbolize)", [("ualdbg.engines.image", "ProcessImage.resolve"),
                                       ("ualdbg.engines.recorder", "FaultRecorder.resolve")]),
    ("trace buffer: add", [("ualdbg.core.trace", "TraceBuffer.add")]),
    ("target: siginfo ($_siginfo)", [("ualdbg.adapters.gdb.target", "GdbTarget.siginfo")]),
    ("target: read_register", [("ualdbg.adapters.gdb.target", "GdbTarget.read_register")]),
    ("target: write_register", [("ualdbg.adapters.gdb.target", "GdbTarget.write_register")]),
    ("target: current_tid", [("ualdbg.adapters.gdb.target", "GdbTarget.current_tid")]),
    ("target: read_memory", [("ualdbg.adapters.gdb.target", "GdbTarget.read_memory")]),
]


class Timers:
    def __init__(self) -> None:
        self.stats: dict[str, list[float]] = {}

    def wrap(self, module_name: str, path: str, label: str) -> bool:
        import importlib

        try:
            owner = importlib.import_module(module_name)
            *outer, attr = path.split(".")
            for name in outer:
                owner = getattr(owner, name)
            fn = getattr(owner, attr)
        except (ImportError, AttributeError):
            return False
        stat = self.stats.setdefault(label, [0, 0.0])
        clock = time.perf_counter

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                stat[0] += 1
                stat[1] += clock() - t0

        setattr(owner, attr, timed)
        return True


def _short(key: tuple) -> str:
    filename, line, name = key
    if filename == "~":
        return name  # a builtin: "<method 'read_register' of 'gdb.Frame' objects>"
    if filename.startswith(ROOT + os.sep):
        filename = filename[len(ROOT) + 1 :]
    elif "site-packages" in filename:
        filename = filename.split("site-packages" + os.sep, 1)[1]
    else:
        filename = os.path.basename(filename)
    return f"{filename}:{line}({name})"


def _faults() -> tuple[int, int]:
    from ualdbg.adapters.gdb.install import installed

    _host, hooks = installed()
    buf = hooks.session.buffer
    return buf.total, buf.ignored


def mark_arming(marks: dict) -> None:
    """Note when the arm point at `main` first runs: the armed part of the run starts there, and
    per-fault figures leave out gdb's start-up, the loader and libc's start."""
    try:
        from ualdbg.adapters.gdb import catchpoints as owner
    except ImportError:  # before the gdb hooks were split by concern
        from ualdbg.adapters.gdb import hooks as owner

    stop = owner.ArmPoint.stop

    def marked(self):
        marks.setdefault("armed_at", time.perf_counter())
        return stop(self)

    owner.ArmPoint.stop = marked


def main() -> None:
    out = gdb.convenience_variable("bench_out").string()
    mode = gdb.convenience_variable("bench_mode").string()
    gdb.execute("set pagination off")
    doc: dict = {"mode": mode}
    marks: dict = {}
    if mode == "split":
        timers = Timers()
        doc["skipped"] = [label for label, places in SECTIONS if not any(timers.wrap(m, p, label) for m, p in places)]
        mark_arming(marks)
        t0 = time.perf_counter()
        gdb.execute("run", to_string=True)
        t1 = time.perf_counter()
        doc["wall_s"] = t1 - t0
        doc["armed_s"] = t1 - marks.get("armed_at", t0)
        doc["sections"] = {label: {"calls": int(c), "seconds": s} for label, (c, s) in timers.stats.items()}
    else:
        prof = cProfile.Profile()
        mark_arming(marks)
        t0 = time.perf_counter()
        prof.enable()
        gdb.execute("run", to_string=True)
        prof.disable()
        t1 = time.perf_counter()
        doc["wall_s"] = t1 - t0
        doc["armed_s"] = t1 - marks.get("armed_at", t0)
        stats = pstats.Stats(prof)
        rows = []
        for key, (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            rows.append({"function": _short(key), "calls": nc, "tottime": tt, "cumtime": ct})
        rows.sort(key=lambda r: r["tottime"], reverse=True)
        doc["python_s"] = sum(r["tottime"] for r in rows)
        doc["by_tottime"] = rows[:25]
        doc["by_cumtime"] = sorted(rows, key=lambda r: r["cumtime"], reverse=True)[:40]
    doc["faults_total"], doc["faults_ignored"] = _faults()
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


main()
