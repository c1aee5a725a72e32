"""What the fuzz tests feed mutated inputs to: every parser a user's file reaches before or
after a run (the program check and the agent's preflight, the ELF/DWARF symbolizer, the audit,
stackcheck's reading of the program, JSON traces through report, merge, baseline and SARIF). Each
target returns normally or raises one of the documented one-line errors; anything else is a bug
(issue 17: never a traceback), and so is a target that runs past its deadline (issue 29: a hang)."""
from __future__ import annotations

import io
import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ualdbg.ci.baseline import BaselineError, keys_of
from ualdbg.ci.baseline import load as load_baseline
from ualdbg.ci.gate import decide
from ualdbg.ci.merge import merge
from ualdbg.commands.audit import run_audit
from ualdbg.core.document import read_document
from ualdbg.engines.agent import AgentUnavailable, preflight
from ualdbg.engines.runner import ToolError, resolve_program
from ualdbg.render.audit import render as render_audit
from ualdbg.render.console import make_console
from ualdbg.render.sarif import build_sarif
from ualdbg.render.tables import blind_lines, header, records_table, summary_table
from ualdbg.symbols.data import module_data
from ualdbg.symbols.elfindex import clear_cache, elf_index
from ualdbg.symbols.layout import X86_64_REGS
from ualdbg.tools.audit import AuditError
from ualdbg.tools.stackcheck.check import Request, StackcheckError
from ualdbg.tools.stackcheck.run import load_program, plan_items

# The one-line errors each front end turns into `ualdbg: ...` and a documented status (ci/gate.py: 2, 125-127).
EXPECTED = (ToolError, AgentUnavailable, AuditError, BaselineError, StackcheckError, ValueError)
# Seconds one input may take in one target: the slowest real input here takes well under one.
DEADLINE = float(os.environ.get("UALDBG_FUZZ_DEADLINE", "20"))


class Hang(BaseException):
    """A target ran past its deadline. A BaseException, so that no `except Exception` in the code
    under test can swallow it."""


@contextmanager
def deadline(seconds: float = DEADLINE) -> Iterator[None]:
    """Fail the input (Hang) when the block runs longer than `seconds` (SIGALRM, main thread)."""
    def expired(_signo: int, _frame: object) -> None:
        raise Hang(f"the input took more than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _strict_console() -> tuple[io.BytesIO, object]:
    """A console that encodes as a UTF-8 terminal does, strictly: a lone surrogate or raw escape
    that reached it unescaped would fail here, as it would on the user's terminal."""
    raw = io.BytesIO()
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    return raw, make_console(text, width=120)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _no_raw_escapes(raw: io.BytesIO) -> None:
    found = _CONTROL.search(raw.getvalue().decode("utf-8"))
    assert found is None, f"a control character from the input reached the console raw: {found.group()!r}"


def elf_target(data: bytes, folder: Path) -> None:
    path = folder / "prog"
    path.write_bytes(data)
    os.chmod(path, 0o755)
    clear_cache()
    with deadline():
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
            # ... and what unwinds a frame to find a local: the one FDE .eh_frame_hdr's table
            # leads to (symbols/cfi.py).
            regs = dict.fromkeys(X86_64_REGS, 0x7FF000)
            for addr in (0x1139, 0x1189, 0x11F0):
                md.scopes_at(addr)
                md.cfa(addr, regs, 0)
                md.unwind(addr, regs, lambda _va, n: bytes(n))
            index.close()
        try:
            result = run_audit(str(path), None)
            raw, console = _strict_console()
            for item in render_audit(result.to_json()):
                console.print(item)  # type: ignore[attr-defined]
            _no_raw_escapes(raw)
        except EXPECTED:
            pass


def stackcheck_target(data: bytes, folder: Path) -> None:
    """What `ualdbg stackcheck` reads of the program before any debugger starts: its ELF header,
    symbols and main's variables from DWARF (default and with --var)."""
    path = folder / "prog"
    path.write_bytes(data)
    os.chmod(path, 0o755)
    clear_cache()
    with deadline():
        for variables in ((), ("main:x",)):
            try:
                prog = load_program(str(path))
                plan_items(Request(argv=[str(path)], exec_path=str(path), base_env=("A=1",), variables=variables), prog)
            except EXPECTED:
                pass


def json_target(data: bytes, folder: Path) -> None:
    path = folder / "t.json"
    path.write_bytes(data)
    with deadline():
        try:
            doc = read_document(str(path))
        except EXPECTED:
            return
        raw, console = _strict_console()
        p = console.print  # type: ignore[attr-defined]
        p(header(doc))
        for line in blind_lines(doc):
            p(line)
        for by in ("pc", "line", "function", "module"):
            p(summary_table(doc, by))
        p(records_table(doc, 1000))  # report's default limit
        merged = merge([("a", doc), ("b", doc)])
        p(summary_table(merged, "line"))
        _no_raw_escapes(raw)
        keys_of(doc)
        verdict = decide(doc, max_faults=0)
        json.dumps(build_sarif(doc, exit_code=verdict.status))
        json.dumps(build_sarif(merged))


def baseline_target(data: bytes, folder: Path) -> None:
    path = folder / "b.json"
    path.write_bytes(data)
    with deadline():
        try:
            load_baseline(str(path))
        except EXPECTED:
            pass
