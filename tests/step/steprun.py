"""Running `ualdbg trace/check --engine step` (and the trap engine, for the cross-check) from the
step tests: JSON to a file, the program's own stdout kept apart, the full command on failure."""
from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clirun import explain, run_cli
from conftest import BUILD, require_tool

from ualdbg.symbols.elfindex import elf_index

PROGRAMS = Path(__file__).resolve().parent / "programs"

# Where the kernel maps a PIE with address randomisation off (ELF_ET_DYN_BASE on x86-64): the
# stepper, like gdb, runs programs that way. test_module_bias_is_the_kernels checks it.
PIE_BASE = 0x555555554000


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    doc: dict[str, Any] | None

    def explain(self) -> str:
        return explain(self.proc)


def ualdbg(*args: str, json_path: Path, stdin: str | None = None, timeout: float = 300,
           env: dict[str, str] | None = None) -> Run:
    cmd, rest = list(args), []
    if "--" in cmd:
        i = cmd.index("--")
        cmd, rest = cmd[:i], cmd[i:]
    proc = run_cli(*cmd, "--json", str(json_path), *rest, stdin=stdin, timeout=timeout, env=env)
    doc = json.loads(json_path.read_text()) if json_path.exists() else None
    return Run(proc, doc)


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


def build_program(source: str, out_dir: Path, *flags: str) -> Path:
    """tests/step/programs/SOURCE compiled into out_dir (g++ for .cpp, gcc otherwise) at -g -O2
    plus `flags`, from its folder with the bare file name, so DWARF names the file SOURCE."""
    compiler = "g++" if source.endswith(".cpp") else "gcc"
    require_tool(compiler)
    out = out_dir / Path(source).stem
    subprocess.run([compiler, "-g", "-O2", "-Wall", *flags, "-o", str(out), source], check=True, cwd=PROGRAMS)
    return out
