"""`ualdbg break`, `status` and `off` typed in gdb-multiarch connected to qemu-user: a stop AT
the faulting instruction with the VA the program printed, every fault once, the program's
results right; on Alpha `off` gives the program back its own prctl setting."""
from __future__ import annotations

import re
import subprocess

from crossrun import build
from support.debuggers import run_gdb_multiarch
from support.env import BUILD
from support.reports import REPORT1


def native_last_line(*args: str) -> str:
    return subprocess.run([str(BUILD / "memalign"), *args], capture_output=True, text=True, check=True).stdout.splitlines()[-1]


def test_sparc64_break_stops_at_each_fault_then_performs_it() -> None:
    prog = build("sparc64") / "memalign"
    faults = 3 + 3 + 3 * 2 * 2  # memalign 3 2: C writes of .a, C of .b, 2*C*R reads
    run = run_gdb_multiarch("sparc64", [str(prog), "3", "2"],
                            ["ualdbg break", "continue", "python print('PC-AT-STOP', hex(int(gdb.parse_and_eval('$pc'))))",
                             "x/i $pc", *["continue"] * faults, "ualdbg status"])
    out = run.stdout
    reports = [REPORT1.match(line) for line in out.splitlines()]
    reports = [m for m in reports if m]
    assert len(reports) == faults, run.explain()
    v = int(re.search(r"memalign: v=(0x[0-9a-f]+)", out).group(1), 16)  # type: ignore[union-attr]
    assert int(reports[0].group(1), 16) == v, run.explain()  # v[0].a: the VA decoded from `st`
    assert f"PC-AT-STOP {reports[0].group(2)}" in out, run.explain()  # stopped AT it, not past it
    assert re.search(r"=> 0x[0-9a-f]+ <fill\+\d+>:\s+st\s", out), run.explain()
    assert native_last_line("3", "2") in out, run.explain()  # the performed stores and loads were right
    assert run.program_exit == (0, None), run.explain()


def test_alpha_break_then_off_restores_the_programs_prctl_setting() -> None:
    prog = build("alpha") / "memalign"
    run = run_gdb_multiarch("alpha", [str(prog), "3", "2"],
                            ["ualdbg break", "continue", "ualdbg status", "ualdbg off", "continue"])
    out = run.stdout
    assert len([line for line in out.splitlines() if REPORT1.match(line)]) == 1, run.explain()
    assert re.search(r"prctl\(PR_SET_UNALIGN\): armed \(the program's own setting: 0x[0-9a-f]+\)", out), run.explain()
    assert "ualdbg: off; the program's own PR_SET_UNALIGN setting is back" in out, run.explain()
    # After `off` qemu fixes the accesses up silently again, as the kernel would: no more stops.
    assert native_last_line("3", "2") in out, run.explain()
    assert run.program_exit == (0, None), run.explain()


def test_alpha_break_when_stopped_past_main_arms_by_an_inferior_call() -> None:
    prog = build("alpha") / "memalign"
    run = run_gdb_multiarch("alpha", [str(prog), "3", "2"],
                            ["break fill", "continue", "ualdbg break", "ualdbg status", "continue", "continue",
                             "ualdbg off", "continue"])
    out = run.stdout
    assert "prctl(PR_SET_UNALIGN): armed" in out.split("Catchpoint", 1)[0], run.explain()  # before any fault
    reports = [m for m in map(REPORT1.match, out.splitlines()) if m]
    assert len(reports) == 2, run.explain()  # v[0].a and v[0].b, then off: no more stops
    assert int(reports[1].group(1), 16) - int(reports[0].group(1), 16) == 4, run.explain()
    assert native_last_line("3", "2") in out and run.program_exit == (0, None), run.explain()


def test_alpha_break_at_the_entry_says_it_arms_at_main() -> None:
    # qemu's stub stops at the loader's entry, before libc (and its prctl) is mapped: arming
    # there cannot be done now, and the command must not claim it was.
    prog = build("alpha") / "memalign"
    run = run_gdb_multiarch("alpha", [str(prog), "3", "2"], ["ualdbg break", "ualdbg status", "continue"])
    out = run.stdout
    assert "armed at main: libc's prctl is not loaded yet" in out and "armed now" not in out, run.explain()
    assert "prctl(PR_SET_UNALIGN): off" in out and "#AC rule" not in out, run.explain()  # no x86 rule on Alpha
    assert len([line for line in out.splitlines() if REPORT1.match(line)]) == 1, run.explain()


def test_hppa_break_stops_at_each_fault_then_off_gives_the_setting_back() -> None:
    # PA-RISC: prctl arming through the PC queue and an upward-growing stack; the VA decoded
    # from `stw` is the one the program printed.
    prog = build("hppa") / "memalign"
    run = run_gdb_multiarch("hppa", [str(prog), "3", "2"],
                            ["ualdbg break", "continue", "x/i $pc", "continue", "ualdbg status", "ualdbg off", "continue"])
    out = run.stdout
    reports = [m for m in map(REPORT1.match, out.splitlines()) if m]
    assert len(reports) == 2, run.explain()  # v[0].a, v[0].b, then off: qemu fixes up silently
    v = int(re.search(r"memalign: v=(0x[0-9a-f]+)", out).group(1), 16)  # type: ignore[union-attr]
    assert int(reports[0].group(1), 16) == v and int(reports[1].group(1), 16) == v + 4, run.explain()
    assert re.search(r"=> 0x[0-9a-f]+ <fill\+\d+>:\s+stw\s", out), run.explain()
    assert "memalign.c:31" in out and "/usr/hppa-linux-gnu/include" not in out, run.explain()  # DWARF 3 line table
    assert "prctl(PR_SET_UNALIGN): armed" in out, run.explain()
    assert "ualdbg: off; the program's own PR_SET_UNALIGN setting is back" in out, run.explain()
    assert native_last_line("3", "2") in out and run.program_exit == (0, None), run.explain()
