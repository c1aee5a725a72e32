"""A test suite of many small processes (issue 34): the agent's post-processing costs per distinct
program, not per process. The processes of one program have the same maps (ASLR off) but for
their own buffer file: each snapshot text is parsed once per run, and each instruction decoded
once; the counts stay the same as each process's own."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentrun import require_agent
from support.env import BUILD

from ualdbg.engines import agent as engine
from ualdbg.symbols import maps

RUNS = 12
FAULTS = 7  # `not_aligned N` makes exactly N faults in scope (examples/README.md)


def test_many_processes_of_one_program_parse_their_maps_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_agent()
    script = tmp_path / "suite.sh"
    script.write_text(f"#!/bin/sh\nfor i in $(seq {RUNS}); do {BUILD / 'not_aligned'} {FAULTS} >/dev/null || exit 1; done\n")
    os.chmod(script, 0o755)
    parsed: list[str] = []
    real = maps.ModuleMap.from_text.__func__  # type: ignore[attr-defined]

    def counting(cls: type, text: str, **kw: object) -> maps.ModuleMap:
        parsed.append(text)
        return real(cls, text, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(maps.ModuleMap, "from_text", classmethod(counting))
    # The document's parses only: the warmer's look at a process still running (its snapshots
    # so far) depends on the machine's load (a busy one made 14 parses of 12 processes).
    monkeypatch.setenv("UALDBG_WARM", "0")
    res = engine.run_agent(engine.AgentRun([str(script)], exclude=(os.path.realpath("/bin/sh"),)))
    result = res.result
    images = [p for p in result.processes or [] if (p.path or "").endswith("not_aligned")]
    assert res.exit_status == 0 and len(images) == RUNS, result.processes
    assert result.faults_total == RUNS * FAULTS
    assert all(p.faults_total == FAULTS for p in images)
    # Before: at least one parse per process (a light one and a full one each since issue 34's
    # scope split); now one per distinct snapshot text of the program.
    assert len(parsed) < RUNS, f"{len(parsed)} maps parsed for {RUNS} processes of one program"
