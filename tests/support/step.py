"""What the step tests (tests/step, tests/step_debugger) share: their programs and how they are built, the code range of an
example as it runs, a document's counts per PC."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from support.env import BUILD, TESTS
from ualdbg.symbols.elfindex import elf_index

PROGRAMS = TESTS / "step" / "programs"
# How tests/step/programs are built (support.build.build_source), plus each test's own flags.
FLAGS = ("-g", "-O2", "-Wall")

# Where the kernel maps a PIE with address randomisation off (ELF_ET_DYN_BASE on x86-64): the
# stepper, like gdb, runs programs that way. test_module_bias_is_the_kernels checks it.
PIE_BASE = 0x555555554000


def code_range(prog: str | Path) -> str:
    """`--range` text covering the executable code of an example as it runs (no ASLR)."""
    path = Path(prog) if Path(prog).is_absolute() else BUILD / prog
    index = elf_index(str(path))
    assert index is not None, path
    bias = PIE_BASE if index.elf_type == "ET_DYN" else 0
    lo = min(s.vaddr for s in index.segments if s.executable) + bias
    hi = max(s.vaddr + s.memsz for s in index.segments if s.executable) + bias
    return f"{lo:#x},{hi:#x}"


def per_pc(doc: dict[str, Any]) -> Counter[str]:
    return Counter({s["pc"]: s["count"] for s in doc["sites"]})
