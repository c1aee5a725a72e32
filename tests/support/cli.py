"""Run the `ualdbg` shell command as a user would: a scrubbed environment, stdin from /dev/null
(or the given text), a timeout, the JSON document it saved; a failing test prints the full
command and output (Result.explain)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from support.env import scrubbed_env
from support.run import Result, run


def run_cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None, json_path: Path | None = None, allow_timeout: bool = False) -> Result:
    """`python -m ualdbg ARGS` (`env`: variables on top of the scrubbed environment). With
    `json_path`, the result's doc is the document saved there, if any. A timeout fails the test
    with the output so far, unless `allow_timeout`."""
    result = run([sys.executable, "-m", "ualdbg", *args], stdin=stdin, env=scrubbed_env(env), cwd=cwd, timeout=timeout)
    if not allow_timeout:
        result.fail_on_timeout()
    if json_path is not None and json_path.exists():
        result.doc = json.loads(json_path.read_text())
    return result


def run_json(*args: str, json_path: Path, **kw: object) -> Result:
    """`ualdbg ARGS` with `--json json_path` put before the program's `--`."""
    cmd, rest = list(args), []
    if "--" in cmd:
        i = cmd.index("--")
        cmd, rest = cmd[:i], cmd[i:]
    return run_cli(*cmd, "--json", str(json_path), *rest, json_path=json_path, **kw)  # type: ignore[arg-type]
