"""The parity test: for every example, `ualdbg trace save` from lldb equals the one from gdb once
what must differ is taken out (the debugger's name, time, CPU, pid and tid values, and
absolute code addresses, compared as module+offset instead). It runs both debuggers the way a
user would, so a behaviour difference between the adapters is a test failure."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.debuggers import run_gdb, run_lldb
from support.env import BUILD
from support.expected import expected_by_program

PROGRAMS = sorted(expected_by_program())


def normalise(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    doc.pop("debugger")
    doc.pop("duration_s")
    doc["program"].pop("pid")
    for process in doc.get("processes") or []:  # (the agent's sections: each process's pids, and
        process.pop("pid"), process.pop("ppid")  # its environment naming ualdbg's pid and run directory)
    if doc.get("agent"):
        doc["agent"].pop("environment_added")
        # The agent's variables stay in the program's environment (follow=2: its own exec
        # carries them), where gdb appends them and lldb orders them by hash: libc's unaligned
        # reads in getenv differ, out of scope. The faults in scope are compared, not those.
        doc["agent"]["out_of_scope"].pop("traps")
    for key in ("faults_ignored", "ignored_by_module"):
        doc.pop(key, None)
    for process in doc.get("processes") or []:
        process.pop("faults_ignored")
    where = {s["pc"]: f"{s['module']}+{s['offset']}" for s in doc["sites"]}
    for site in doc["sites"]:
        site.pop("pc")
        if site.get("data", {}).get("tid") is not None:  # what the data is, not the thread's id
            site["data"]["tid"] = "tid"
            site["data"]["text"] = re.sub(r"thread \d+", "thread T", site["data"]["text"])
    # Threads interleave as the scheduler pleases: compare each thread's records in its own
    # order, the threads sorted by what they did.
    per_thread: dict[int, list[tuple[Any, ...]]] = {}
    for rec in doc["records"]:
        per_thread.setdefault(rec["tid"], []).append((where.get(rec["pc"], rec["pc"]), rec["va"], rec["size"], rec["access"]))
    doc["records"] = sorted(per_thread.values())
    return doc


# The program gets the same one-variable environment from both. Left alone, gdb starts it
# through /bin/sh (which adds PWD and reorders the variables) and lldb passes the variables in
# hash order: libc's unaligned reads in getenv() then differ (out of scope, but counted in
# faults_ignored). Neither is the adapters' doing.
PROGRAM_ENV = "PATH=/usr/bin:/bin"
# The agent (the default) with one record per fault: when a hot site is patched depends on when
# the other threads could be stopped, which the scheduler decides, not the adapter.
START = "ualdbg trace start --no-patch"


def gdb_trace(prog: list[str], out: Path, stdout: Path) -> tuple[dict[str, Any], str]:
    # The program's own SIGBUS (sigbus_handler's real bus error) goes to it without a stop in
    # both debuggers, so that every program runs to its end. Its output goes to a regular file,
    # as lldb's does below: libgfortran copies its output buffers differently into a pipe than
    # into a file (5 more unaligned memcpy reads in libc for common_block; measured with
    # --all-modules), which made the two documents differ by the sink, not by the adapters.
    # gdb warns that a file cannot be a controlling terminal; the program does not need one.
    name, value = PROGRAM_ENV.split("=", 1)
    stdout.touch()
    run = run_gdb(prog, ["set startup-with-shell off", "unset environment", f"set environment {name} {value}",
                         f"set inferior-tty {stdout}", "handle SIGBUS nostop noprint pass", START, "run",
                         f"ualdbg trace save {out}"])
    assert out.exists(), run.explain()
    return json.loads(out.read_text()), run.explain()


def lldb_trace(prog: list[str], out: Path, stdout: Path) -> tuple[dict[str, Any], str]:
    # Program output to a file, as gdb's goes to its pipe: not to lldb's pseudo-terminal, where
    # libc would buffer it by line and make different (unaligned) copies. -k: if the program
    # crashed, lldb --batch skips the rest of -o.
    save = f"ualdbg trace save {out}"
    run = run_lldb(prog, ["settings set target.inherit-env false", f"settings set target.env-vars {PROGRAM_ENV}",
                          "process handle -s false -n false -p true SIGBUS", START,
                          f"process launch -o {stdout} -e {stdout}.err", save], crash=[save])
    assert out.exists(), run.explain()
    return json.loads(out.read_text()), run.explain()


@pytest.mark.parametrize("prog,args", PROGRAMS, ids=[f"{p}-{'-'.join(a)}" for p, a in PROGRAMS])
def test_lldb_trace_equals_gdb_trace(prog: str, args: tuple[str, ...], tmp_path: Path) -> None:
    cmd = [str(BUILD / prog), *args]
    g, g_log = gdb_trace(cmd, tmp_path / "gdb.json", tmp_path / "gdb.out")
    lldb_doc, l_log = lldb_trace(cmd, tmp_path / "lldb.json", tmp_path / "lldb.out")
    assert g["debugger"] == "gdb" and lldb_doc["debugger"] == "lldb"
    ng, nl = normalise(g), normalise(lldb_doc)
    assert nl == ng, (f"lldb and gdb disagree on {prog}:\n--- gdb ---\n{json.dumps(ng, indent=1)[:4000]}\n"
                      f"--- lldb ---\n{json.dumps(nl, indent=1)[:4000]}\n{g_log}\n{l_log}")
    assert lldb_doc["program"]["exit_status"] == 0, l_log
    # The program wrote the same output under both debuggers (gdb writes its warning there too).
    g_out = [line for line in (tmp_path / "gdb.out").read_text().splitlines(keepends=True)
             if not line.startswith("warning: GDB: Failed to set controlling terminal")]
    assert "".join(g_out) == (tmp_path / "lldb.out").read_text()
