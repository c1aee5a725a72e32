"""Drive `--engine step` the same way in real gdb and in real lldb-19: one trace command list per
debugger, the JSON document it saves, and the scope functions of a trap-engine trace (the ELF
symbol around each faulting PC, so inlined helpers count as the function they are inlined in)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.debuggers import run_gdb, run_lldb
from support.run import Result

from ualdbg.symbols.elfindex import elf_index

# One small environment for the program in both debuggers (tests/lldb/test_lldb_parity.py).
PROGRAM_ENV = "PATH=/usr/bin:/bin"
DEBUGGERS = ("gdb", "lldb")


def trace(debugger: str, program: list[str], start: str, out: Path, tmp_path: Path,
          after: list[str] = (), *, sigbus_stops: bool = False) -> tuple[dict[str, Any] | None, Result]:  # type: ignore[assignment]
    """`ualdbg trace start ...`, run the program to its end, `ualdbg trace save`, then `after`.
    The program's own SIGBUS (sigbus_handler's real bus error) goes to it without a stop; with
    `sigbus_stops` a SIGBUS stops the program instead and is not passed on (gdb's `handle
    SIGBUS stop print nopass`), so a program that must not get one is left unfinished. lldb
    writes the program's output to tmp_path/lldb.out."""
    save = f"ualdbg trace save {out}"
    if debugger == "gdb":
        name, value = PROGRAM_ENV.split("=", 1)
        handle = "handle SIGBUS stop print nopass" if sigbus_stops else "handle SIGBUS nostop noprint pass"
        run = run_gdb(program, ["set startup-with-shell off", "unset environment", f"set environment {name} {value}",
                                handle, start, "run", save, *after])
    else:
        handle = "process handle -s true -n true -p false SIGBUS" if sigbus_stops else "process handle -s false -n false -p true SIGBUS"
        run = run_lldb(program, ["settings set target.inherit-env false", f"settings set target.env-vars {PROGRAM_ENV}",
                                 handle, start,
                                 f"process launch -o {tmp_path / 'lldb.out'} -e {tmp_path / 'lldb.err'}", save, *after],
                       crash=[save])
    doc = json.loads(out.read_text()) if out.exists() else None
    return doc, run


def per_site(doc: dict[str, Any]) -> dict[str, int]:
    """Counts per module+offset (addresses differ between runs, offsets do not)."""
    return {f"{s['module']}+{s['offset']}": s["count"] for s in doc["sites"]}


def scope_options(program: Path, doc: dict[str, Any]) -> str:
    """`--in F` for each function (ELF symbol, not inline frame) holding a site of a trace;
    for a stripped program, `--range` over the sites' PCs (both debuggers run it without ASLR,
    so its addresses are the same in the next run)."""
    index = elf_index(str(program))
    assert index is not None
    names, pcs = set(), []
    for site in doc["sites"]:
        if site["module"] != program.name:
            continue
        sym = index.symbol_at(int(site["offset"], 16))
        if sym is None:
            pcs.append(int(site["pc"], 16))
        else:
            names.add(sym.name)
    opts = [f"--in {name}" for name in sorted(names)]
    if pcs:
        opts.append(f"--range {min(pcs):#x},{max(pcs) + 16:#x}")
    return " ".join(opts) or "--in main"
