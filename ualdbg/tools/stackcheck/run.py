"""Running a stackcheck sweep: read the program's ELF and DWARF into items and probes, measure
every variant in ONE child gdb (the Measurer), time variants natively, trace them with the trap
engine (`runner.run_traced`), and hand it all to check.stackcheck_document. Used by the CLI and
by the debugger commands alike; the debugger a user sits in is never touched."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ...ci.gate import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_TOOL
from ...core.document import load_document
from ...core.external import find_tool
from ...core.result import TraceResult
from ...engines.runner import ToolError, pkg_roots, resolve_program
from ...engines.wrapper import child_setup
from ...lazyclass import dataclass
from ...symbols.dwarfindex import DWARF_ERRORS
from ...symbols.elfindex import elf_index
from ...symbols.variables import FunctionVariables, VariableError, VariableInfo
from .check import Item, Plan, ProbeSpec, Raw, Request, StackcheckError, Variant, make_variants, parse_var, stackcheck_document
from .launch import ExecHelper, LaunchSpec, time_native

Progress = Callable[[str, int, int], None]  # (phase, done, total)
_ELF_ERRORS: tuple[type[BaseException], ...] = (OSError, ELFError, *DWARF_ERRORS)


def exec_path_for(typed: str) -> str:
    """What a shell hands execve for `typed`: the word itself when it has a slash, else the
    first match on PATH."""
    if "/" in typed:
        return typed
    found = shutil.which(typed)
    if found is None:
        raise ToolError(f"{typed}: not found on PATH", EXIT_NOT_FOUND)
    return found


@dataclass
class Program:
    path: str
    word_size: int
    machine: str
    main_link: int
    separate_debug: bool
    variables: FunctionVariables | None


def load_program(path: str) -> Program:
    resolve_program(path)
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            word = 8 if elf.elfclass == 64 else 4
            machine = elf["e_machine"]
            main_link = None
            for name in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(name)
                if not isinstance(sec, SymbolTableSection):
                    continue
                for sym in sec.iter_symbols():
                    if sym.name == "main" and sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                        main_link = int(sym["st_value"])
                        break
                if main_link is not None:
                    break
            has_own_dwarf = elf.has_dwarf_info() and elf.get_section_by_name(".debug_info") is not None
    except _ELF_ERRORS as exc:  # a hostile header or symbol table: one line, as audit says it
        raise ToolError(f"{path}: a corrupt ELF file ({type(exc).__name__}: {str(exc)[:100]})") from None
    if machine not in ("EM_X86_64", "EM_386"):
        raise ToolError(f"{path}: {machine} programs are not supported (x86-64 and i386 are)")
    if main_link is None:
        raise ToolError(f"{path}: no symbol `main` (stripped?): stackcheck stops at main's entry")
    try:
        index = elf_index(path)
        dwarf = index.dwarf if index is not None else None
        fv = FunctionVariables(dwarf, word) if dwarf is not None else None
    except DWARF_ERRORS as exc:
        raise ToolError(f"{path}: a corrupt ELF or DWARF file ({type(exc).__name__}: {str(exc)[:100]})") from None
    return Program(path, word, "x86_64" if machine == "EM_X86_64" else "i386", main_link, not has_own_dwarf, fv)


def plan_items(req: Request, prog: Program) -> tuple[list[Item], list[ProbeSpec], list[str]]:
    notes: list[str] = []
    word = prog.word_size
    items = [
        Item("sp_entry", "sp_entry", 16, "stack pointer at the entry point (argc's address)"),
        Item("sp_main", "sp_main", 16, f"stack pointer at main's entry (sp+{word} is checked: the call pushed a return address)",
             bias=word),
    ]
    chosen: list[VariableInfo] = []
    if req.variables:
        if prog.variables is None:
            raise StackcheckError(f"{prog.path} has no DWARF: --var needs a program built with -g")
        for text in req.variables:
            func, name = parse_var(text)
            try:
                chosen.append(prog.variables.variable(func, name))
            except VariableError as exc:
                raise StackcheckError(f"--var {text}: {exc}") from None
    elif prog.variables is None:
        notes.append("no DWARF: only stack pointers, argv and environment strings are measured")
    else:
        try:
            found = prog.variables.variables("main")
        except VariableError as exc:
            found = []
            notes.append(f"no variables of main: {exc}")
        chosen = [v for v in found if v.kind != "parameter" and v.type.align >= 8 and v.probe is not None]
        skipped = [v.name for v in found if v.kind != "parameter" and v.type.align >= 8 and v.probe is None]
        if skipped:
            notes.append(f"main's {', '.join(skipped)} never live in memory (registers or optimised out): no address to check")
        if not chosen:
            notes.append("main has no local in memory whose type needs 8-byte alignment or more; name others with --var FUNC:NAME")
    probes: dict[tuple[str, str, int | None], ProbeSpec] = {}
    for v in chosen:
        detail = {"function": v.function, "name": v.name, "storage": v.kind, "size": v.type.size}
        if v.decl:
            detail["declared"] = v.decl
        if v.probe is None:
            notes.append(f"{v.ident}: never in memory (a register, or optimised out): no address")
            detail["probe"] = None
        else:
            # A static has its link-time address (plus the program's load bias): no scope to
            # be in, even when its function never runs.
            kind = "static" if v.probe.kind == "anywhere" else v.probe.kind
            key = (kind, v.function if kind != "static" else v.ident, v.probe.address)
            p = probes.get(key)
            pid = p.id if p is not None else f"p{len(probes)}"
            probes[key] = ProbeSpec(pid, kind, v.function, v.probe.address, (p.variables if p else ()) + ((v.ident, v.name),))
            detail["probe"] = (f"a static at link address {v.probe.address or 0:#x}" if kind == "static"
                               else f"{v.function} at link address {v.probe.address or 0:#x}")
        items.append(Item(v.ident, "variable", v.type.align, v.type.name, detail=detail))
    for i in range(len(req.argv)):
        items.append(Item(f"argv[{i}]", "argv", 1, "char[]", judged=False, detail={"index": i}))
    env_present = {e.split("=", 1)[0] for e in req.base_env}
    for name in req.env_names:
        if name not in env_present and name != "UALDBG_PAD":
            raise StackcheckError(f"--env {name}: not in the environment the program gets")
        items.append(Item(f"env {name}", "env", 1, "char[] (NAME=VALUE)", judged=False, detail={"name": name}))
    return items, list(probes.values()), notes


class DebuggerMeasurer:
    """Every variant in one debugger batch process (gdb or lldb: start-up and the program's
    symbols are paid once; a variant then costs one run and a few stops, ~10 ms in gdb and
    ~80 ms in lldb here). The loop itself is ualdbg.tools.stackcheck.sweep, driven through the
    adapter's stackcheck_driver."""

    def __init__(self, helper: ExecHelper, debugger: str = "gdb", separate_debug: bool = False,
                 trace: bool = False) -> None:
        if debugger not in ("gdb", "lldb"):
            raise ToolError(f"--debugger {debugger}: not available (gdb and lldb are)")
        self.helper = helper
        self.debugger = debugger
        self.separate_debug = separate_debug
        self.trace = trace
        self.log = ""

    def measure(self, plan: Plan, progress: Callable[[int, int], None] | None = None) -> list[Raw]:
        tmp = tempfile.mkdtemp(prefix="ualdbg-stackcheck-")
        try:
            return self._measure(plan, tmp, progress)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def command(self, plan_path: str, program: str) -> list[str]:
        setup = f"import sys; sys.path[:0] = {pkg_roots()!r}"
        if self.debugger == "lldb":
            return [find_tool("lldb"), "--no-lldbinit", "--batch", "-o", f"script {setup}",
                    # `import ualdbg...` binds `ualdbg` in lldb's script namespace, where lldb
                    # finds the command classes and callbacks of the trap engine by dotted name.
                    "-o", "script import ualdbg.adapters.lldb.stackcheck_driver; "
                          f"ualdbg.adapters.lldb.stackcheck_driver.main(lldb.debugger, {plan_path!r})"]
        cmd = [find_tool("gdb"), "-q", "-nx", "-batch"]
        if not self.separate_debug:
            # The program carries its own DWARF; keep gdb from loading libc6-dbg's files on
            # every run (140 ms a run here instead of 9 ms).
            cmd += ["-iex", "set debug-file-directory /nonexistent"]
        return cmd + ["-ex", f"python {setup}",
                      "-ex", f"python from ualdbg.adapters.gdb.stackcheck_driver import main; main({plan_path!r})",
                      program]

    def _measure(self, plan: Plan, tmp: str, progress: Callable[[int, int], None] | None) -> list[Raw]:
        variants = []
        for v in plan.variants:
            out = os.path.join(tmp, f"{v.id}.out")
            spec = LaunchSpec(v.launch.path, v.launch.argv, v.launch.env, v.launch.aslr,
                              stdin="/dev/null", stdout=out, stderr=out)
            spec_file = self.helper.write(spec, v.id)
            variants.append({"id": v.id, "wrapper": self.helper.shell_words(spec_file),
                             "helper": self.helper.argv(spec_file), "aslr": v.aslr, "output": out})
        result = os.path.join(tmp, "result.json")
        prog_file = os.path.join(tmp, "progress")
        doc = {
            "program": plan.program, "word_size": plan.word_size, "main_link": plan.main_link,
            "argv_at_main": plan.argv_at_main, "run_to_exit": plan.run_to_exit, "env_names": list(plan.env_names),
            "trace": self.trace,
            "probes": [{"id": p.id, "kind": p.kind, "function": p.function, "address": p.address,
                        "variables": [list(x) for x in p.variables]} for p in plan.probes],
            "variants": variants, "result": result, "progress": prog_file if progress else None,
        }
        plan_path = os.path.join(tmp, "plan.json")
        with open(plan_path, "w") as f:
            json.dump(doc, f)
        cmd = self.command(plan_path, plan.program)
        env = dict(os.environ, SHELL="/bin/sh")  # gdb's start-up shell; the program's env comes from the spec
        log = os.path.join(tmp, "debugger.log")
        with open(log, "w") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=child_setup())  # dies with ualdbg (engines/wrapper.py)
            try:
                while proc.poll() is None:
                    time.sleep(0.05)
                    if progress is not None:
                        try:
                            with open(prog_file) as pf:
                                done, total = (int(x) for x in pf.read().split())
                            progress(done, total)
                        except (OSError, ValueError):
                            pass
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        with open(log, errors="replace") as f:
            self.log = f.read()
        if not os.path.exists(result):
            if os.environ.get("UALDBG_DEBUG"):
                print(self.log, file=sys.stderr)
            raise ToolError(f"{self.debugger} did not finish the measurements (exit status {proc.returncode}; "
                            "UALDBG_DEBUG=1 shows its log)", EXIT_TOOL)
        with open(result) as f:
            data = json.load(f)
        if data.get("error"):
            # The debugger refusing the program's DWARF ("Dwarf Error: ...") is bad input (status 2),
            # as a corrupt ELF is; anything else is the debugger failing (125).
            bad_input = "Dwarf Error" in str(data["error"]) or "DWARF" in str(data["error"])
            raise ToolError(f"{self.debugger} measurement failed: {data['error']}", EXIT_ERROR if bad_input else EXIT_TOOL)
        raws = []
        for r in data["variants"]:
            trace = r.get("trace")
            raws.append(Raw(variant=r["variant"], sp_main=r.get("sp_main"), argv_ptr=r.get("argv_ptr"), argv=r.get("argv", []),
                            env=r.get("env", {}), vars=r.get("vars", {}), var_errors=r.get("var_errors", {}),
                            exit_status=r.get("exit_status"), output=r.get("output"), error=r.get("error"),
                            seconds=r.get("seconds", 0.0),
                            trace=None if trace is None else _trace_summary(load_document(trace, "the traced run"),
                                                                            r.get("exit_status"), None)))
        return raws


def _trace_summary(trace: TraceResult, status: int | None, signal: int | None) -> dict[str, Any]:
    sites = []
    for s in trace.sites:
        loc = s.loc
        if loc.file and loc.line:
            where = f"{os.path.basename(loc.file)}:{loc.line}"
        elif loc.function:
            where = f"{loc.function}+{_hex(loc.function_offset)}"
        else:
            where = f"{loc.module_name}+{_hex(loc.offset)}"
        sites.append({"location": where, "pc": f"{s.pc:#x}", "count": s.count, "sizes": sorted(s.sizes),
                      "access": s.access.value if s.access else None})
    vas = sorted({f"{r.va:#x}" for r in trace.records if r.va is not None})[:16]  # as text, as the document has them
    return {"faults_total": trace.faults_total, "faults_ignored": trace.faults_ignored,
            "sites": sites, "addresses": vas, "exit_status": status, "exit_signal": signal, "error": None}


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def run_stackcheck(req: Request, progress: Progress | None = None, measurer: Any = None) -> dict[str, Any]:
    t0 = time.monotonic()
    prog = load_program(req.exec_path)
    if req.trace and prog.machine != "x86_64":
        # The trap engine knows x86-64's registers and syscalls only: an i386 run would be
        # "traced" with nothing armed and report zero faults.
        raise StackcheckError(f"--trace: the trap engine runs x86-64 programs, not {prog.machine} ones; "
                              "measure without --trace")
    items, probes, notes = plan_items(req, prog)
    variants = make_variants(req)
    plan = Plan(program=os.path.abspath(req.exec_path), word_size=prog.word_size, main_link=prog.main_link,
                argv_at_main={"register": "rsi"} if prog.word_size == 8 else {"stack": 8},
                probes=probes, variants=variants, run_to_exit=req.run_to_exit,
                env_names=tuple(dict.fromkeys(req.env_names)))
    with ExecHelper(bits=prog.word_size * 8) as helper:
        if helper.kind != "c":
            notes.append("no C compiler: the exec helper is a Python script (slower sweeps)")
        if not helper.same_bits and req.debugger == "lldb":
            notes.append("no 32-bit C compiler (gcc-multilib): lldb may place variables of a realigned i386 frame wrongly")
        m = measurer or DebuggerMeasurer(helper, req.debugger, prog.separate_debug, trace=req.trace)
        raws = m.measure(plan, (lambda d, t: progress("measuring" + (" and tracing" if req.trace else ""), d, t))
                         if progress else None)
        times = _time_variants(req, variants, helper, progress) if req.time_runs else None
    traces: dict[str, dict[str, Any]] | None = None
    if req.trace:
        # Traced in the measured run itself: the same argv, environment and stack, by construction.
        traces = {r.variant: r.trace if r.trace is not None else
                  {"faults_total": 0, "faults_ignored": 0, "sites": [], "addresses": [], "error": r.error or "not traced"}
                  for r in raws}
    return stackcheck_document(req, plan, items, raws, times, traces, prog.machine, notes, time.monotonic() - t0)


def _time_variants(req: Request, variants: list[Variant], helper: ExecHelper, progress: Progress | None) -> dict[str, list[float]]:
    """N native runs per variant, interleaved (round k runs every variant once, in a shuffled
    order) so that drift in the machine's speed spreads over all variants instead of biasing
    the ones measured last."""
    import random

    rng = random.Random(21255)
    specs = {v.id: helper.write(LaunchSpec(v.launch.path, v.launch.argv, v.launch.env, v.launch.aslr,
                                           stdin="/dev/null", stdout="/dev/null", stderr="/dev/null"), v.id)
             for v in variants}
    times: dict[str, list[float]] = {v.id: [] for v in variants}
    total = len(variants) * req.time_runs
    done = 0
    for _ in range(req.time_runs):
        order = [v.id for v in variants]
        rng.shuffle(order)
        for vid in order:
            secs, _status = time_native(helper, specs[vid])
            times[vid].append(secs)
            done += 1
            if progress:
                progress("timing", done, total)
    return times
