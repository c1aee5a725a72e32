"""Running `ualdbg trace --engine agent` (and the trap engine, for parity) from the agent tests,
with a scrubbed environment, a timeout, and the full command and output on failure."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, require_tool, scrubbed_env

FIXTURES = ROOT / "tests" / "fixtures" / "agent"


def build_agent_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small programs of tests/fixtures/agent, one behaviour each (test modules make this
    a module-scoped fixture)."""
    require_agent()
    out = tmp_path_factory.mktemp("agent-programs")
    for src in FIXTURES.glob("*.c"):
        # Built from the fixture folder with a bare file name: DWARF says "signals.c".
        subprocess.run(["gcc", "-g", "-O1", "-pthread", "-o", str(out / src.stem), src.name], check=True, cwd=FIXTURES)
    return out


def require_agent() -> None:
    """The agent needs an x86-64 host and a C compiler; a real absence skips (never under CI)."""
    import platform

    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent tests need an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")


@dataclass
class Traced:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    doc: dict[str, Any] | None
    report: str = ""  # ualdbg's own report (--log-file): never in the program's streams

    def explain(self) -> str:
        return f"command: {' '.join(self.cmd)}\nexit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"

    @property
    def program_stdout(self) -> str:
        """What the program wrote: ualdbg's report goes to stderr or --log-file, never stdout."""
        return self.stdout


def ualdbg(*args: str, json_path: Path | None = None, stdin: str | None = None, env: dict[str, str] | None = None,
           timeout: float = 300, cwd: Path | None = None) -> Traced:
    cmd = [sys.executable, "-m", "ualdbg", *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=scrubbed_env(env),
                       cwd=cwd or ROOT, stdin=None if stdin is not None else subprocess.DEVNULL)
    doc = json.loads(json_path.read_text()) if json_path is not None and json_path.exists() else None
    return Traced(cmd, p.returncode, p.stdout, p.stderr, doc)


def trace(program: list[str], tmp_path: Path, *options: str, engine: str = "agent", **kw: Any) -> Traced:
    n = len(list(tmp_path.iterdir()))
    out, log = tmp_path / f"{engine}-{n}.json", tmp_path / f"{engine}-{n}.log"
    run = ualdbg("trace", "--engine", engine, *options, "--json", str(out), "--log-file", str(log), "--", *program,
                 json_path=out, **kw)
    run.report = log.read_text() if log.exists() else ""
    return run


def by_function(doc: dict[str, Any]) -> Counter[str]:
    got: Counter[str] = Counter()
    for s in doc["sites"]:
        got[s["function"] or f"{s['module']}+{s['offset']}"] += s["count"]
    return got


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """What two engines must agree on for one deterministic run (ASLR off in both): everything
    but timing, CPU, ids, the engine's own notes, and the out-of-scope counts (the agent's
    presence changes what the dynamic loader does, and it skips string routines)."""
    d = json.loads(json.dumps(doc))
    for k in ("duration_s", "debugger", "engine", "processes", "agent", "notes", "faults_ignored",
              "ignored_by_module", "buffer"):
        d.pop(k, None)
    d["program"].pop("pid")
    for r in d["records"]:
        for k in ("time", "cpu", "pid", "tid", "seq"):
            r.pop(k)
        # The stack moves with the environment's size (the agent adds LD_PRELOAD, gdb adds
        # LINES/COLUMNS): compare a stack address's alignment, any other address exactly.
        if r["va"] is not None and int(r["va"], 16) >= 0x7FF000000000:
            r["va"] = f"stack, {int(r['va'], 16) % 16} mod 16"
    d["records"].sort(key=lambda r: json.dumps(r, sort_keys=True))  # threads interleave freely
    for s in d["sites"]:
        data = s.get("data")
        if data and data["kind"] in ("stack", "local", "parameter"):
            # The same: what the stack address is; not which thread id or where the stack lies.
            s["data"] = {"kind": data["kind"], "path": data.get("path"), "va": f"{int(data['va'], 16) % 16} mod 16"}
    return d
