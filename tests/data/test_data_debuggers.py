"""What the data is, in the break report of real gdb and real lldb (one report path, shared),
and the `ualdbg audit` debugger command on the loaded program with the session's own trace."""
from __future__ import annotations

import re
from pathlib import Path

from datarun import decl_line
from support.debuggers import run_gdb, run_lldb
from support.env import BUILD, ROOT


def data_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.startswith(("  data: ", "  via: "))]


def test_gdb_break_report_common_block() -> None:
    run = run_gdb([str(BUILD / "common_block"), "3"], ["ualdbg break", "run", "continue"])
    line = decl_line("common_block.f90", r"^\s*real :: r2\(n\)")
    lines = data_lines(run.stdout)
    # first stop: x(1) in fill = r2[0]; second: x(2) = r2 elements 2 and 3, so r2[2]+0
    assert lines[0] == f"data: r2[0]+0 in COMMON /data/, declared at common_block.f90:{line}", run.explain()
    assert lines[1].startswith("via: x[0]+0 (real(kind=8)[] x in fill)"), run.explain()
    assert lines[2] == f"data: r2[2]+0 in COMMON /data/, declared at common_block.f90:{line}", run.explain()
    assert lines[3].startswith("via: x[1]+0 "), run.explain()


def test_gdb_break_report_packed_and_mpi() -> None:
    run = run_gdb([str(BUILD / "packed_header"), "1"], ["ualdbg break", "run", "continue", "continue"])
    lines = data_lines(run.stdout)
    ring = decl_line("packed_header.c", r"static unsigned char ring\[")
    assert lines[:2] == [f"data: ring[26]+0, static, declared at packed_header.c:{ring}",
                         "via: ip->saddr+0 (const struct ip_hdr * ip in parse_frame); ip itself is not 4-byte aligned"], run.explain()
    assert lines[4:6] == [f"data: ring[43]+0, static, declared at packed_header.c:{ring}",
                          "via: app->seq+0 (const struct app_hdr * app in app_seq); member of packed struct app_hdr at offset 1, needs 4"], run.explain()
    run = run_gdb([str(BUILD / "mpi_status"), "2"], ["ualdbg break", "run"])
    line = decl_line("mpi_status.c", r"static struct request req;")
    assert data_lines(run.stdout)[0] == f"data: req.status[1]+0, static in main, declared at mpi_status.c:{line}", run.explain()


def test_gdb_trace_summary_advice_and_audit(tmp_path: Path) -> None:
    run = run_gdb([str(BUILD / "common_block"), "10"],
                  ["ualdbg trace start", "run", "ualdbg trace show --summary", "ualdbg audit", "ualdbg audit /etc/passwd"])
    out = run.stdout
    assert "data and advice per site" in out and "align: r2[0] of COMMON" in out, run.explain()
    row = re.search(r"COMMON member\s+COMMON /data/ r2\s+real\(kind=4\)\[1000\]\s+4\s+8\s+common_block.f90:\d+\s+(\d+)", out)
    assert row is not None and int(row.group(1)) == 40, run.explain()  # fill 10 + scale 20 + dsum 10
    assert "ualdbg audit: /etc/passwd: not an ELF file" in out + run.stderr and "Traceback" not in out + run.stderr, run.explain()


def test_lldb_break_report_names_the_data() -> None:
    # lldb --batch treats the stop as a crash and runs no further -o command: one stop is enough
    run = run_lldb([str(BUILD / "mpi_status"), "2"], ["ualdbg break", "process launch"])
    line = decl_line("mpi_status.c", r"static struct request req;")
    lines = data_lines(run.stdout)
    assert lines[0] == f"data: req.status[1]+0, static in main, declared at mpi_status.c:{line}", run.explain()
    assert lines[1].startswith("via: status[1]+0 (int * status in fake_recv)"), run.explain()


def test_lldb_audit_command() -> None:
    run = run_lldb([str(BUILD / "packed_header"), "2"], ["ualdbg trace start", "process launch", "ualdbg audit"])
    out = run.stdout
    for member in ("seq", "len", "stamp"):
        assert re.search(rf"packed member\s+struct app_hdr\.{member}\s.*\s2\s+packed_header\.c:\d+", out), run.explain()


def test_gdb_names_locals_of_the_faulting_frame_and_its_caller(stack_locals: Path) -> None:
    run = run_gdb([str(stack_locals), "1"], ["ualdbg break", "run", "continue"])
    src = "tests/data/programs/stack_locals.c"
    buf = decl_line_in(src, r"unsigned char buf\[64\];")
    r = decl_line_in(src, r"volatile struct rec r;")
    lines = [x for x in data_lines(run.stdout) if x.startswith("data: ")]
    pid = re.search(r"stack of thread (\d+)", run.stdout)
    assert pid is not None, run.explain()
    # main's buf, read through read8's p: one frame up, unwound with the CFI and the stack's memory
    assert lines[0] == f"data: buf[3]+0, local of main (frame #1), declared at stack_locals.c:{buf}, stack of thread {pid.group(1)}", run.explain()
    # own_local's struct r, below the stack pointer (the red zone) but in the frame's DWARF
    assert lines[1] == f"data: r.words[1]+1, local of own_local, declared at stack_locals.c:{r}, stack of thread {pid.group(1)}", run.explain()


def decl_line_in(path: str, pattern: str) -> int:
    lines = [i for i, t in enumerate((ROOT / path).read_text().split("\n"), 1) if re.search(pattern, t)]
    assert len(lines) == 1
    return lines[0]


def test_gdb_names_the_malloc_block(tmp_path: Path) -> None:
    """Issue 31, problem 5: with the program's memory, the heap data is named by its malloc'd
    block (glibc's chunks walked), not by the [heap] mapping."""
    from support.build import build_source

    prog = build_source(Path(__file__).resolve().parent / "programs" / "heap_offset.c", tmp_path, flags=("-g", "-O1"))
    run = run_gdb([str(prog), "3"], ["ualdbg break", "run"])
    lines = data_lines(run.stdout)
    assert re.fullmatch(r"data: byte 1 of the malloc'd block at 0x[0-9a-f]+ \(72 bytes usable\)", lines[0]), run.explain()


def test_gdb_names_argument_strings_and_their_advice() -> None:
    """Issue 31, problem 4: argv/environment strings are a data class of their own (named from
    /proc/PID/stat's arg_start..env_end of the live process), with the advice that fits them.
    Where argv[1] falls depends on every string above it (the checkout's path included): an unused
    trailing argument of 0 to 3 bytes moves it until the 4-byte read at argv[1] is misaligned too."""
    for pad in ("", "p", "pp", "ppp"):
        run = run_gdb([str(BUILD / "argv_fields"), "ABCDEFGHIJKLMNOPQ", "2", *([pad] if pad else [])],
                      ["ualdbg break", "run", "continue", "continue", "ualdbg trace start", "continue",
                       "ualdbg trace show --summary"])
        placed = re.search(r"argv\[1\] = 0x[0-9a-f]+ mod 4 = (\d)", run.stdout)
        assert placed, run.explain()
        if placed.group(1) != "0":
            break
    else:
        raise AssertionError("no padding misaligned argv[1]")
    lines = data_lines(run.stdout)
    assert lines[0] == "data: argv[1]+0 (argument strings: the kernel places them at no alignment)", run.explain()
    assert lines[2] == "data: argv[1]+4 (argument strings: the kernel places them at no alignment)", run.explain()
    assert "memcpy: argv[1] is in the argv strings" in run.stdout, run.explain()
