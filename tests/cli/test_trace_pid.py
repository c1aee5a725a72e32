"""Issue 20 from the shell: `ualdbg trace --pid` and `check --pid` attach to a multi-threaded
program in the middle of its run, by injecting the agent (or, with --engine trap or where it
cannot be injected, through gdb's trap engine); the counts of the attached window match the
program's own count, threads it starts while attached are counted, and after the detach the
program ends normally with no thread armed and its signal handlers and masks as they were. Bad
cases give one line and status 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.build import build_program
from support.cli import run_cli
from support.env import FIXTURES, ROOT, scrubbed_env
from support.live import WORKERS, healthy, live_forker, live_program
from support.users import as_user, shared_install

IN_FLIGHT = 2 * (WORKERS + 1)


@pytest.mark.parametrize("engine", ["agent", "trap"])
def test_trace_pid_counts_the_attached_window(test_programs: Path, tmp_path: Path, engine: str) -> None:
    out = tmp_path / "t.json"
    with live_program(test_programs, tmp_path) as live:
        before = live.tasks()
        # --no-patch: every fault traps and has a record, whose tid shows the threads started while
        # attached (the agent now patches this short access too, with threads: issue 34; a patched
        # site's faults are counted without records; the 7-byte one's test is further down)
        p = run_cli("trace", "--pid", str(live.pid), "--duration", "1.5", "--json", str(out),
                    *(["--engine", "trap"] if engine == "trap" else ["--no-patch"]), timeout=120)
        end = live.finish()
    assert p.returncode == 0, p.explain()
    assert f"attached to process {live.pid}" in p.stderr and "detached from process" in p.stderr, p.explain()
    how = "agent injected" if engine == "agent" else "trap engine under gdb"
    assert f"attached to process {live.pid} ({how})" in p.stderr, p.explain()  # which engine, in the line
    assert "instead" not in p.stderr, p.explain()  # no fallback
    doc = json.loads(out.read_text())
    assert doc["attached"]["engine"] == engine, doc["attached"]
    if engine == "agent":
        assert doc["agent"]["injected"] and doc["attached"]["agent_left"] == "loaded, inert", doc["attached"]
        # main and the workers (and a short-lived thread if one was running): none blocks SIGBUS
        assert WORKERS + 1 <= doc["attached"]["threads_armed"] <= WORKERS + 2, doc["attached"]
        # Stopped only while injecting and removing: milliseconds, not the window.
        assert doc["attached"]["stopped_s"]["attach"] < 0.5 and doc["attached"]["stopped_s"]["detach"] < 0.5, doc["attached"]
    armed = int(end["armed"])
    assert armed > 100, f"{end}\n{p.explain()}"
    assert abs(doc["faults_total"] - armed) <= IN_FLIGHT, f"{doc['faults_total']} vs {end}\n{p.explain()}"
    assert doc["program"]["pid"] == live.pid and doc["attached"]["ended_by"] == "duration", doc["attached"]
    assert len({r["tid"] for r in doc["records"]} - before) >= 3  # threads started while attached
    assert healthy(end), f"{end}\n{p.explain()}"
    assert int(end["iterations"]) > armed  # it ran on after the detach


def test_ctrl_c_ends_the_trace_not_the_program(test_programs: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    with live_program(test_programs, tmp_path) as live:
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(live.pid), "--json", str(out)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=scrubbed_env(), cwd=ROOT)
        assert cli.stderr is not None
        line = cli.stderr.readline()  # once attached (the agent injected: no tracer stays)
        assert f"attached to process {live.pid}" in line, line
        time.sleep(1.5)
        cli.send_signal(signal.SIGINT)
        stdout, stderr = cli.communicate(timeout=60)
        end = live.finish()
    assert cli.returncode == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["attached"]["ended_by"] == "SIGINT", doc["attached"]
    assert abs(doc["faults_total"] - int(end["armed"])) <= IN_FLIGHT, f"{doc['faults_total']} {end}\n{stderr}"
    assert healthy(end), f"{end}\n{stderr}"


def test_check_pid_gates_on_the_window(test_programs: Path, tmp_path: Path) -> None:
    sarif = tmp_path / "r.sarif"
    with live_program(test_programs, tmp_path) as live:
        p = run_cli("check", "--pid", str(live.pid), "--duration", "1", "--sarif", str(sarif), timeout=120)
        end = live.finish()
    assert p.returncode == 1 and "ualdbg check: FAIL" in p.stderr, p.explain()
    assert "live_workers.c" in sarif.read_text()
    assert healthy(end), f"{end}\n{p.explain()}"


def test_the_process_exits_during_the_trace(test_programs: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    with live_program(test_programs, tmp_path, lifetime_ms=1500) as live:
        p = run_cli("trace", "--pid", str(live.pid), "--json", str(out), timeout=120)
        live.proc.wait(timeout=30)
    assert p.returncode == 0, p.explain()
    assert f"note: process {live.pid} exited during the trace (exit status 0)" in p.stderr, p.explain()
    doc = json.loads(out.read_text())
    text = live.out.read_text()
    assert "live: iterations=" in text and live.proc.returncode == 0
    assert doc["program"]["exit_status"] == 0 and doc["faults_total"] > 0


def _one_line_status_2(p: subprocess.CompletedProcess[str], words: str) -> None:
    assert p.returncode == 2, p.explain()
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], p.explain()


def test_no_such_process(tmp_path: Path) -> None:
    pid = 4_000_000  # above pid_max's largest value (2^22)
    _one_line_status_2(run_cli("trace", "--pid", str(pid)), f"no process {pid}")


def test_a_process_already_traced_by_gdb(test_programs: Path, tmp_path: Path) -> None:
    with live_program(test_programs, tmp_path) as live:
        ready = tmp_path / "gdb-attached"
        gdb = subprocess.Popen(["gdb", "-q", "-nx", "-batch", "-ex", f"attach {live.pid}", "-ex", f"shell touch {ready}",
                                "-ex", "shell sleep 4", "-ex", "detach"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=scrubbed_env())
        try:
            deadline = time.time() + 30
            while not ready.exists() and time.time() < deadline:
                time.sleep(0.05)
            p = run_cli("trace", "--pid", str(live.pid))
        finally:
            gdb.wait(timeout=60)
        end = live.finish()
    _one_line_status_2(p, f"is already traced by process {gdb.pid} (gdb)")
    assert healthy(end) and end["armed"] == "0", end


def test_a_process_of_another_user(test_programs: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:  # init is root's
        _one_line_status_2(run_cli("trace", "--pid", "1"), "belongs to another user")
        return
    # The program runs as root; ualdbg as nobody (support.users) may not trace it.
    with shared_install() as shared, live_program(test_programs, tmp_path) as live:
        p = subprocess.run([*as_user(), *shared.ualdbg("trace", "--pid", str(live.pid))], capture_output=True,
                           text=True, timeout=60, env=shared.env, cwd=shared.dir, stdin=subprocess.DEVNULL)
        end = live.finish()
    _one_line_status_2(p, "belongs to another user")
    assert healthy(end) and end["armed"] == "0", end


def test_ptrace_scope_forbids_attaching(test_programs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine has no Yama; what the user is told is checked against a stand-in file.
    from ualdbg.cli import attach

    scope = tmp_path / "ptrace_scope"
    monkeypatch.setattr(attach, "YAMA_SCOPE", str(scope))
    with live_program(test_programs, tmp_path) as live:
        scope.write_text("3\n")
        assert "ptrace_scope is 3" in (attach.attach_problem(live.pid) or "")
        scope.write_text("0\n")
        assert attach.attach_problem(live.pid) is None
        if os.geteuid() != 0:
            scope.write_text("2\n")
            assert "only root" in (attach.attach_problem(live.pid) or "")


def test_usage_errors() -> None:
    _one_line_status_2(run_cli("trace", "--duration", "2", "--", "/bin/true"), "--duration goes with --pid")
    _one_line_status_2(run_cli("trace", "--pid", "1", "--engine", "step"), "no --engine step")
    _one_line_status_2(run_cli("trace", "--pid", "1", "--", "/bin/true"), "name no program")


def test_a_static_binary_falls_back_to_gdb_in_one_line(tmp_path: Path) -> None:
    # The same program, linked statically: no dlopen in it to load the agent with.
    programs = tmp_path / "static"
    build_program(programs / "live_workers", FIXTURES / "programs" / "live_workers.c", flags=("-g", "-O1", "-static", "-pthread"))
    out = tmp_path / "t.json"
    with live_program(programs, tmp_path) as live:
        p = run_cli("trace", "--pid", str(live.pid), "--duration", "1.5", "--json", str(out), timeout=120)
        end = live.finish()
    assert p.returncode == 0, p.explain()
    said = [line for line in p.stderr.splitlines() if "instead" in line]
    assert said == [f"ualdbg: --pid: process {live.pid} (live_workers) is statically linked: there is no dlopen in it "
                    "to load the agent with; tracing with the trap engine under gdb instead"], p.explain()
    doc = json.loads(out.read_text())
    assert doc["attached"]["engine"] == "trap"
    # libc is part of the program here, and in scope: the program's own count is bump's
    bump = sum(site["count"] for site in doc["sites"] if site["function"] == "bump")
    assert abs(bump - int(end["armed"])) <= IN_FLIGHT and int(end["armed"]) > 100, f"{end}\n{p.explain()}"
    assert healthy(end), f"{end}\n{p.explain()}"


def test_attach_twice_to_the_same_process(test_programs: Path, tmp_path: Path) -> None:
    # The second injection finds the first agent loaded and inert, and starts it again.
    with live_program(test_programs, tmp_path) as live:
        docs = []
        for i in range(2):
            out = tmp_path / f"t{i}.json"
            p = run_cli("trace", "--pid", str(live.pid), "--duration", "0.7", "--json", str(out), timeout=120)
            assert p.returncode == 0 and "(agent injected)" in p.stderr, p.explain()
            docs.append(json.loads(out.read_text()))
        end = live.finish()
    assert all(d["faults_total"] > 50 for d in docs), [d["faults_total"] for d in docs]
    assert abs(sum(d["faults_total"] for d in docs) - int(end["armed"])) <= 2 * IN_FLIGHT, f"{end}"
    assert healthy(end), end


def test_a_child_forked_while_attached_is_traced_and_disarmed(test_programs: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    with live_forker(test_programs, tmp_path) as prog:
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(prog.pid), "--duration", "2",
                                "--json", str(trace)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=scrubbed_env(), cwd=ROOT)
        assert cli.stderr is not None
        line = cli.stderr.readline()
        assert f"attached to process {prog.pid} (agent injected)" in line, line
        time.sleep(0.3)
        prog.fork()  # now, while attached
        _, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, stderr
        got = prog.finish()  # after the detach: both report whether anything was left armed
    doc = json.loads(trace.read_text())
    per_pid: dict[int, int] = {}
    for p in doc["processes"]:
        per_pid[p["pid"]] = per_pid.get(p["pid"], 0) + p["faults_total"]
    for who, (pid, armed, ac_left, own_sigbus, handlers) in got.items():
        assert int(armed) > 100, got
        assert abs(per_pid.get(int(pid), 0) - int(armed)) <= 1, (who, per_pid, got)  # one thread each
        assert ac_left == "0" and own_sigbus == "0" and handlers == "ok", (who, got)


# Execs its arguments under a seccomp filter that allows every system call (mode 2, as a sandboxed
# service has): the filter survives the exec.
SECCOMP_EXEC = """
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
allow = ctypes.create_string_buffer(struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000))  # BPF_RET|BPF_K, ALLOW
prog = struct.pack("<HxxxxxxQ", 1, ctypes.addressof(allow))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_seccomp_falls_back_to_gdb_in_one_line(test_programs: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    with live_program(test_programs, tmp_path, prefix=(sys.executable, "-c", SECCOMP_EXEC)) as live:
        assert "Seccomp:\t2" in Path(f"/proc/{live.pid}/status").read_text()
        p = run_cli("trace", "--pid", str(live.pid), "--duration", "1", "--json", str(out), timeout=120)
        end = live.finish()
    assert p.returncode == 0, p.explain()
    said = [line for line in p.stderr.splitlines() if "instead" in line]
    assert len(said) == 1 and "runs under seccomp (mode 2)" in said[0] and "trap engine under gdb" in said[0], p.explain()
    doc = json.loads(out.read_text())
    assert doc["attached"]["engine"] == "trap" and abs(doc["faults_total"] - int(end["armed"])) <= IN_FLIGHT, end
    assert healthy(end), end


def _got_slot(exe: str, pid: int, name: str) -> int:
    """The address of the program's GOT slot for `name` (its JUMP_SLOT relocation) in process pid."""
    from elftools.elf.elffile import ELFFile

    with open(exe, "rb") as f:
        elf = ELFFile(f)
        rela = elf.get_section_by_name(".rela.plt")
        syms = elf.get_section(rela["sh_link"])
        offset = next(r["r_offset"] for r in rela.iter_relocations() if syms.get_symbol(r["r_info_sym"]).name == name)
    with open(f"/proc/{pid}/maps") as f:
        base = next(int(line.split("-")[0], 16) for line in f if line.rstrip().endswith(exe))
    return base + offset


def _read_u64(pid: int, addr: int) -> int:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return int.from_bytes(f.read(8), "little")


def test_the_got_slots_point_at_the_agent_while_attached_and_back_after(test_programs: Path, tmp_path: Path) -> None:
    exe = str(test_programs / "live_workers")
    with live_program(test_programs, tmp_path) as live:
        slot = _got_slot(exe, live.pid, "pthread_create")
        before = _read_u64(live.pid, slot)  # bound already: it starts a thread every 20 ms
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(live.pid), "--duration", "1.5"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=scrubbed_env(), cwd=ROOT)
        assert cli.stderr is not None
        assert "(agent injected)" in cli.stderr.readline()
        during = _read_u64(live.pid, slot)
        maps = Path(f"/proc/{live.pid}/maps").read_text()
        agent = [line for line in maps.splitlines() if line.endswith("ualdbg_agent.so")]
        _, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, stderr
        after = _read_u64(live.pid, slot)
        left = [line for line in Path(f"/proc/{live.pid}/maps").read_text().splitlines() if line.endswith("ualdbg_agent.so")]
        end = live.finish()
    spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in agent]
    assert any(lo <= during < hi for lo, hi in spans), (hex(during), agent)  # the agent's wrapper
    assert after == before != during, (hex(before), hex(during), hex(after))
    assert left == agent  # loaded, inert: not unloaded
    assert healthy(end), end


def test_an_exec_while_attached_is_said_and_left_alone(tmp_path: Path) -> None:
    # The agent is gone with the old image: nothing may be called at its old addresses.
    go = tmp_path / "go"
    prog = subprocess.Popen(["bash", "-c", f'while [ ! -e {go} ]; do sleep 0.01; done; exec sleep 1.5'],
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(prog.pid), "--duration", "1"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=scrubbed_env(), cwd=ROOT)
        assert cli.stderr is not None
        assert "(agent injected)" in cli.stderr.readline()
        go.touch()
        _, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, stderr
        assert f"note: process {prog.pid} exec'd sleep during the trace" in stderr, stderr
        assert prog.wait(timeout=30) == 0  # sleep ran its course
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.wait()


def test_a_second_ualdbg_is_refused_and_a_killed_ones_agent_is_removed(test_programs: Path, tmp_path: Path) -> None:
    with live_program(test_programs, tmp_path) as live:
        first = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(live.pid)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env=scrubbed_env(), cwd=ROOT)
        assert first.stderr is not None
        assert "(agent injected)" in first.stderr.readline()
        second = run_cli("trace", "--pid", str(live.pid), "--duration", "0.5")
        _one_line_status_2(second, f"is already traced by ualdbg (process {first.pid}, the agent injected)")
        first.kill()  # SIGKILL: it cannot detach; the agent sees it gone and disarms itself
        first.wait()
        first.stderr.close()
        out = tmp_path / "t.json"
        p = run_cli("trace", "--pid", str(live.pid), "--duration", "1", "--json", str(out), timeout=120)
        end = live.finish()
    assert p.returncode == 0, p.explain()
    # (whether the agent had disarmed itself yet: tests/wrapper/test_signals.py)
    assert f"removed the agent a killed ualdbg (process {first.pid}) left in process {live.pid}" in p.stderr, p.explain()
    assert json.loads(out.read_text())["attached"]["engine"] == "agent"
    assert healthy(end), end


def _code_changed(pid: int) -> list[str]:
    """The executable file mappings of process `pid` whose bytes are not their file's."""
    changed = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        with open(parts[5], "rb") as f:
            f.seek(int(parts[2], 16))
            want = f.read(hi - lo)
        with open(f"/proc/{pid}/mem", "rb") as m:
            m.seek(lo)
            if m.read(len(want)) != want:
                changed.append(line)
    return changed


def test_hot_sites_are_patched_while_attached_and_the_code_is_as_it_was_after(test_programs: Path, tmp_path: Path) -> None:
    """Issue 21 in a running process: the workers' 7-byte misaligned incq is patched while
    attached (threads running), counted exactly (the program's own count of the window), and
    after the detach the program's code is its file's again, byte for byte."""
    out = tmp_path / "t.json"
    with live_program(test_programs, tmp_path, long_access=True) as live:
        assert _code_changed(live.pid) == []
        cli = subprocess.Popen([sys.executable, "-m", "ualdbg", "trace", "--pid", str(live.pid), "--duration", "1.5",
                                "--json", str(out)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=scrubbed_env(), cwd=ROOT)
        assert cli.stderr is not None
        assert "(agent injected)" in cli.stderr.readline()
        time.sleep(0.7)
        during = _code_changed(live.pid)
        _, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, stderr
        after = _code_changed(live.pid)  # the program runs on
        end = live.finish()
    doc = json.loads(out.read_text())
    exe = str(test_programs / "live_workers")
    assert any(line.endswith(exe) for line in during), during  # patched: the jump is in its code
    assert after == [], after
    site = next(s for s in doc["sites"] if s["function"] == "bump_long")
    assert site.get("patched") and site["count"] > site["trapped"], site
    assert doc["agent"]["patching"]["sites_patched"] >= 1, doc["agent"]["patching"]
    armed = int(end["armed"])
    assert armed > 100 and abs(doc["faults_total"] - armed) <= IN_FLIGHT, f"{doc['faults_total']} vs {end}"
    assert healthy(end), end
    assert int(end["iterations"]) > armed  # it ran on after the detach
