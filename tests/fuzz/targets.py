"""What the fuzz tests feed mutated inputs to: every parser a user's file reaches before or
after a run (the program check and the agent's preflight, the ELF/DWARF symbolizer, the audit,
JSON traces through report, merge, baseline and SARIF). Each target returns normally or raises
one of the documented one-line errors; anything else is a bug (issue 17: never a traceback)."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

from rich.console import Console

from ualdbg.ci.baseline import BaselineError, keys_of
from ualdbg.ci.baseline import load as load_baseline
from ualdbg.ci.merge import merge
from ualdbg.commands.audit import run_audit
from ualdbg.engines.agent import AgentUnavailable, preflight
from ualdbg.engines.runner import ToolError, resolve_program
from ualdbg.render.audit import render as render_audit
from ualdbg.render.jsondoc import load_document
from ualdbg.render.sarif import build_sarif
from ualdbg.render.tables import header, records_table, summary_table
from ualdbg.symbols.data import module_data
from ualdbg.symbols.elfindex import clear_cache, elf_index
from ualdbg.tools.audit import AuditError

# The one-line errors each front end turns into `ualdbg: ...` and status 2.
EXPECTED = (ToolError, AgentUnavailable, AuditError, BaselineError, ValueError)


def elf_target(data: bytes, folder: Path) -> None:
    path = folder / "prog"
    path.write_bytes(data)
    os.chmod(path, 0o755)
    clear_cache()
    try:
        resolve_program(str(path), scripts=True)
        preflight(str(path))
    except EXPECTED:
        pass
    index = elf_index(str(path))  # None: not an ELF pyelftools can read (the caller says so)
    if index is not None:
        for addr in (0x1000, 0x1139, 0x1189, 0x119C, 0x11F0, 0x2000):
            index.lookup(addr)
        # What names a site's data: the variable at an address (the seeds' .rodata, .data,
        # .bss, COMMON /data/) and the frame scopes at a PC (issue 34: read through the units'
        # shapes, symbols/dietree.py).
        md = module_data(index)
        for addr in (0x2020, 0x4010, 0x4038, 0x4040, 0x4090, 0x40C4, 0x5000):
            md.global_at(addr)
        for addr in (0x1139, 0x1189, 0x11F0):
            md.scopes_at(addr)
        index.close()
    try:
        result = run_audit(str(path), None)
        render_audit(result.to_json())
    except EXPECTED:
        pass


def json_target(data: bytes, folder: Path) -> None:
    path = folder / "t.json"
    path.write_bytes(data)
    try:
        doc = load_document(str(path))
    except EXPECTED:
        return
    console = Console(file=io.StringIO(), width=120, markup=False, highlight=False, color_system=None)
    console.print(header(doc))
    for by in ("pc", "line", "function", "module"):
        console.print(summary_table(doc, by))
    console.print(records_table(doc, 10))
    merged = merge([("a", doc), ("b", doc)])
    console.print(summary_table(merged, "line"))
    keys_of(doc)
    json.dumps(build_sarif(doc))


def baseline_target(data: bytes, folder: Path) -> None:
    path = folder / "b.json"
    path.write_bytes(data)
    try:
        load_baseline(str(path))
    except EXPECTED:
        pass
