"""Running `ualdbg trace --engine agent` (and the trap engine, for parity) from the agent tests,
with a scrubbed environment, a timeout, and the full command and output on failure."""
from __future__ import annotations

import json
import os
import platform
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.build import build_source
from support.cli import run_cli
from support.env import FIXTURES as ALL_FIXTURES
from support.env import require_tool
from support.run import Result

FIXTURES = ALL_FIXTURES / "agent"


def build_agent_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small programs of tests/fixtures/agent, one behaviour each (test modules make this
    a module-scoped fixture)."""
    require_agent()
    out = tmp_path_factory.mktemp("agent-programs")
    for src in FIXTURES.glob("*.c"):
        # Built from the fixture folder with a bare file name: DWARF says "signals.c".
        build_source(src, out, flags=("-g", "-O1", "-pthread"))
    return out


def require_agent() -> None:
    """The agent needs an x86-64 host and a C compiler; a real absence skips (never under CI)."""
    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent tests need an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")


def trace(program: list[str], tmp_path: Path, *options: str, engine: str = "agent", **kw: Any) -> Result:
    """`ualdbg trace --engine ENGINE OPTIONS -- PROGRAM` with its JSON document (the result's
    doc) and its report in a --log-file, so that the result's stdout and stderr are the
    program's own."""
    n = len(list(tmp_path.iterdir()))
    out, log = tmp_path / f"{engine}-{n}.json", tmp_path / f"{engine}-{n}.log"
    return run_cli("trace", "--engine", engine, *options, "--json", str(out), "--log-file", str(log), "--", *program,
                   json_path=out, **kw)


def by_function(doc: dict[str, Any]) -> Counter[str]:
    got: Counter[str] = Counter()
    for s in doc["sites"]:
        got[s["function"] or f"{s['module']}+{s['offset']}"] += s["count"]
    return got


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """What two engines must agree on for one deterministic run (ASLR off in both): everything
    but timing, CPU, ids, the engine's own notes, the out-of-scope counts (the agent's
    presence changes what the dynamic loader does, and it skips string routines), and what each
    engine could not see (a program's SIGBUS handler runs unarmed under the agent, while gdb
    takes every fault first: blind spots are the engine's own)."""
    d = json.loads(json.dumps(doc))
    for k in ("duration_s", "debugger", "engine", "processes", "agent", "notes", "faults_ignored",
              "ignored_by_module", "buffer", "blind_spots"):
        d.pop(k, None)
    d["program"].pop("pid")
    on_stack = set()
    for r in d["records"]:
        for k in ("time", "cpu", "pid", "tid", "seq"):
            r.pop(k)
        # The stack moves with the environment's size (the agent adds LD_PRELOAD, gdb adds
        # LINES/COLUMNS): compare a stack address's alignment, any other address exactly; and
        # not its cost class, which moves with its place in a 64-byte line (issue 33).
        if r["va"] is not None and int(r["va"], 16) >= 0x7FF000000000:
            r["va"] = f"stack, {int(r['va'], 16) % 16} mod 16"
            r.pop("class", None)
            on_stack.add(r["pc"])
    for s in d["sites"]:
        if s["pc"] in on_stack and "classes" in s:
            s["classes"] = {"stack": sum(s["classes"].values())}
    d["records"].sort(key=lambda r: json.dumps(r, sort_keys=True))  # threads interleave freely
    for s in d["sites"]:
        data = s.get("data")
        if data:
            # What one engine alone can tell (issue 31): the range its records touched (the
            # agent's), and the malloc'd block a debugger finds by reading the heap (the agent
            # reads no memory): a heap address is compared as the address and its pointer.
            data.pop("touched", None)
            if data["kind"] == "heap":
                s["data"] = {"kind": "heap", "va": data["va"], "via": data.get("via")}
        if data and data["kind"] in ("stack", "local", "parameter"):
            # The same: what the stack address is; not which thread id or where the stack lies.
            s["data"] = {"kind": data["kind"], "path": data.get("path"), "va": f"{int(data['va'], 16) % 16} mod 16"}
    return d
