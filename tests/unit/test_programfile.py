"""What a program file is before a run (core/programfile.py): read with struct at every `ualdbg
trace`, it must say what pyelftools said of the same files (issue 34): an executable or a PIE is
fine, an object file is not an executable, a file cut short or whose program headers lie past
its end is corrupt; and whether the program is the host's."""
from __future__ import annotations

import glob
import os
import platform
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from support.env import require_tool

from ualdbg.core.programfile import elf_structure_problem, host_elf

TRUE = shutil.which("true") or "/bin/true"


def test_executables_hold_together_and_are_the_hosts() -> None:
    assert elf_structure_problem(TRUE) is None
    assert host_elf(TRUE) is (platform.machine() in ("x86_64", "aarch64"))


def test_an_object_file_is_not_an_executable(tmp_path: Path) -> None:
    require_tool("cc")
    src = tmp_path / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    subprocess.run(["cc", "-c", "-o", str(tmp_path / "a.o"), str(src)], check=True, timeout=60)
    assert elf_structure_problem(str(tmp_path / "a.o")) == "not an executable ELF file (ET_REL)"


def test_cut_short_or_headers_past_the_end_is_corrupt(tmp_path: Path) -> None:
    data = Path(TRUE).read_bytes()
    short = tmp_path / "short"
    short.write_bytes(data[:40])  # the identification and part of the header
    assert "cut short" in (elf_structure_problem(str(short)) or "")
    far = bytearray(data[:4096])
    struct.pack_into("<Q", far, 32, 1 << 40)  # e_phoff: a terabyte into a 4 KiB file
    (tmp_path / "far").write_bytes(bytes(far))
    assert "past the end" in (elf_structure_problem(str(tmp_path / "far")) or "")
    odd = bytearray(data)
    odd[4] = 7  # EI_CLASS
    (tmp_path / "odd").write_bytes(bytes(odd))
    assert "class 7" in (elf_structure_problem(str(tmp_path / "odd")) or "")


def test_a_big_endian_program_of_another_cpu_is_read_too() -> None:
    found = [p for p in glob.glob("/usr/*-linux-gnu*/lib/libc.so.6") if os.path.isfile(p)]
    if not found:  # scripts/bootstrap.sh installs them (the cross-architecture tests need them)
        if os.environ.get("CI") == "true":
            pytest.fail("no cross C library installed (Debian: libc6-sparc64-cross)")
        pytest.skip("no cross C library installed (Debian: libc6-sparc64-cross)")
    assert any("sparc64" in p or "hppa" in p or "mips-" in p for p in found)  # big-endian ones among them
    for path in found:
        assert elf_structure_problem(path) is None, path
        assert host_elf(path) is (f"/{platform.machine()}-" in path), path
