"""Real programs under `ualdbg trace --all-modules` (the agent engine): byte-identical output
and the same exit status as when they run alone."""
from __future__ import annotations

from pathlib import Path

import pytest
from agentrun import require_agent, trace
from support.env import require_tool
from support.run import run

SQL = """CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<5000)
  INSERT INTO t SELECT x, 'name' || x, x*1.5 FROM c;
CREATE INDEX ti ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name4%';
SELECT id, v FROM t WHERE name = 'name1234';
.mode line
SELECT * FROM t WHERE id = 42;
"""


def alone(argv: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    p = run(argv, stdin=stdin, timeout=120).fail_on_timeout()
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("argv,stdin", [
    (["/usr/bin/python3", "-c", "import json, sqlite3; print(1)"], None),  # not a pyenv shim
    (["git", "--version"], None),
    (["sqlite3", "DB"], SQL),
], ids=["python3", "git", "sqlite3"])
def test_real_program_unchanged(argv: list[str], stdin: str | None, tmp_path: Path) -> None:
    require_agent()
    exe = require_tool(argv[0])
    argv = [exe, *(str(tmp_path / "traced.db") if a == "DB" else a for a in argv[1:])]
    direct_argv = [a.replace("traced.db", "alone.db") for a in argv]
    code, out, err = alone(direct_argv, stdin)
    run = trace(argv, tmp_path, "--all-modules", stdin=stdin)
    assert run.returncode == code == 0, run.explain()
    assert run.stdout == out and run.stderr == err, run.explain()
    assert run.doc is not None and run.doc["engine"] == "agent" and run.doc["faults_total"] > 0, run.explain()
    assert run.doc["faults_ignored"] == 0 and run.doc["agent"]["single_stepped"] == 0, run.explain()
    # Every record decodes to an access the x86 alignment check explains.
    assert all(r["va"] is not None and r["size"] for r in run.doc["records"]), run.explain()
