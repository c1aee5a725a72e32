"""ualdbg's resolver against gdb on the corpus (corpus.py): every memory-access instruction of each
binary (or an evenly spread sample of them) is resolved by ualdbg.symbols and by gdb in batch
(gdb_oracle.py), and file:line and the function chain (innermost first) are compared.

    python tests/symbols/differential.py            # the whole corpus, every PC (`make corpus`)
    python tests/symbols/differential.py --sample   # what `make test` checks
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import capstone
from elftools.elf.elffile import ELFFile

if TYPE_CHECKING:
    from corpus import Variant

HERE = Path(__file__).resolve().parent

SAMPLE_PER_BINARY = 500
_NOT_ACCESSES = frozenset({"lea", "nop", "prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta",
                           "prefetchw", "endbr64", "clflush", "clflushopt"})


@dataclass(frozen=True)
class Answer:
    file: str | None  # absolute, normalised
    line: int | None
    functions: tuple[str, ...]  # innermost first
    calls: tuple[tuple[str | None, int | None], ...]  # the callers' lines, outward

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "??"

    def chain(self) -> str:
        callers = [f"{f} ({os.path.basename(c[0] or '??')}:{c[1]})" for f, c in zip(self.functions[1:], self.calls)]
        return " <- ".join([self.functions[0] if self.functions else "??", *callers])


def memory_access_pcs(elf_path: Path) -> list[int]:
    """Link-time addresses of the instructions that access memory through an operand, in the
    executable sections, inside sized function symbols (padding between functions is not code
    anybody runs)."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    md.skipdata = True
    with open(elf_path, "rb") as f:
        elf = ELFFile(f)
        spans = []
        for section in elf.iter_sections():
            if section.header.sh_type == "SHT_SYMTAB":
                for sym in section.iter_symbols():
                    if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] and sym["st_shndx"] != "SHN_UNDEF":
                        spans.append((sym["st_value"], sym["st_value"] + sym["st_size"]))
        spans.sort()
        pcs: list[int] = []
        for section in elf.iter_sections():
            if not section.header.sh_flags & 0x4 or section.header.sh_type != "SHT_PROGBITS":
                continue
            if section.name in (".plt", ".plt.got", ".plt.sec", ".init", ".fini"):
                continue
            base = section.header.sh_addr
            for insn in md.disasm(section.data(), base):
                if insn.id == 0 or insn.mnemonic in _NOT_ACCESSES:
                    continue
                if any(op.type == capstone.x86.X86_OP_MEM for op in insn.operands):
                    pcs.append(insn.address)
    inside = []
    starts = [lo for lo, _ in spans]
    for pc in pcs:
        i = bisect.bisect_right(starts, pc) - 1
        if i >= 0 and spans[i][0] <= pc < spans[i][1]:
            inside.append(pc)
    return sorted(set(inside))


def spread(pcs: Sequence[int], n: int) -> list[int]:
    if len(pcs) <= n:
        return list(pcs)
    step = len(pcs) / n
    return [pcs[int(i * step)] for i in range(n)]


def _norm(path: str | None) -> str | None:
    return None if path is None else os.path.normpath(path)


def ours(elf_path: Path, pcs: Iterable[int]) -> dict[int, Answer]:
    from ualdbg.symbols.elfindex import elf_index

    index = elf_index(str(elf_path))
    assert index is not None, elf_path
    result = {}
    for pc in pcs:
        info = index.lookup(pc)
        names = [info.function or "??"] + [c.function or "??" for c in info.inlined_from]
        if names == ["??"]:
            names = []
        result[pc] = Answer(
            _norm(None if info.pos is None else info.pos.path),
            None if info.pos is None else info.pos.line,
            tuple(names),
            tuple(
                (None, None) if c.pos is None else (_norm(c.pos.path), c.pos.line)
                for c in info.inlined_from
            ),
        )
    return result


ORACLE_BIAS = 0x600000000000  # unmapped in the process gdb runs the oracle in


def gdbs(elf_path: Path, pcs: Sequence[int], debug_dir: Path) -> dict[int, Answer]:
    with tempfile.TemporaryDirectory() as tmp:
        pcs_file = Path(tmp) / "pcs"
        out_file = Path(tmp) / "out"
        pcs_file.write_text("".join(f"{pc:#x}\n" for pc in pcs))
        env = dict(os.environ, ORACLE_IN=str(pcs_file), ORACLE_OUT=str(out_file),
                   ORACLE_FILE=str(elf_path), ORACLE_BIAS=f"{ORACLE_BIAS:#x}")
        done = subprocess.run(
            ["gdb", "-q", "-nx", "-batch",
             "-iex", f"set debug-file-directory {debug_dir}",
             "-x", str(HERE / "gdb_oracle.py"), "/bin/true"],
            env=env, capture_output=True, text=True, timeout=1800, check=False,
        )
        if not out_file.exists():
            raise RuntimeError(f"gdb failed on {elf_path}: {done.stderr[-2000:]}")
        result = {}
        for line in out_file.read_text().splitlines():
            doc = json.loads(line)
            frames = doc["frames"]
            names = tuple(f[0] for f in frames if f[0] is not None)
            first = frames[0] if frames else [None, None, 0]
            result[doc["pc"]] = Answer(
                _norm(first[1]), first[2] or None, names,
                tuple((_norm(f[1]), f[2] or None) for f in frames[1:]),
            )
    if len(result) != len(pcs):
        raise RuntimeError(f"gdb answered {len(result)} of {len(pcs)} PCs of {elf_path}: {done.stderr[-2000:]}")
    return result


@dataclass
class Outcome:
    variant: str
    pcs: int
    line_agree: int
    function_agree: int
    mismatches: list[str]


def compare(name: str, elf_path: Path, debug_dir: Path, limit: int | None = None,
            pcs: Sequence[int] | None = None) -> Outcome:
    """ualdbg against gdb on `pcs` (default: every memory-access instruction, or `limit` of
    them spread evenly)."""
    if pcs is None:
        pcs = memory_access_pcs(elf_path)
        if limit is not None:
            pcs = spread(pcs, limit)
    from ualdbg.symbols.elfindex import clear_cache

    saved = os.environ.get("UALDBG_DEBUG_FILE_DIRECTORY")
    os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = str(debug_dir)
    try:
        clear_cache()
        mine = ours(elf_path, pcs)
    finally:
        if saved is None:
            del os.environ["UALDBG_DEBUG_FILE_DIRECTORY"]
        else:
            os.environ["UALDBG_DEBUG_FILE_DIRECTORY"] = saved
        clear_cache()
    theirs = gdbs(elf_path, pcs, debug_dir)
    # gdb's answer can depend on which compile units it read before: template code that
    # several units describe (fmtlib's lambdas) gets the blocks of whichever unit gdb expanded
    # first. Where a long-running gdb and ualdbg disagree, a fresh gdb asked for that PC alone
    # (what a user sees at a first stop) is the answer.
    for pc in pcs:
        a, b = mine[pc], theirs[pc]
        if (a.file, a.line, a.functions, a.calls) != (b.file, b.line, b.functions, b.calls):
            theirs[pc] = gdbs(elf_path, [pc], debug_dir)[pc]
    line_ok = func_ok = 0
    mismatches = []
    for pc in pcs:
        a, b = mine[pc], theirs[pc]
        same_line = (a.file, a.line) == (b.file, b.line)
        same_func = a.functions == b.functions and a.calls == b.calls
        line_ok += same_line
        func_ok += same_func
        if not (same_line and same_func):
            mismatches.append(
                f"{name} {pc:#x}:\n  ualdbg {a.where()} {a.chain()}\n  gdb    {b.where()} {b.chain()}"
            )
    return Outcome(name, len(pcs), line_ok, func_ok, mismatches)


def run(variants: Sequence[Variant], work: Path, limit: int | None) -> list[Outcome]:
    from corpus import build  # beside this file: on sys.path when run as a script or by pytest

    debug_dir = work / "debug"
    return [compare(v.name, build(v, work, debug_dir), debug_dir, limit) for v in variants]


def report(outcomes: Sequence[Outcome]) -> str:
    lines = [f"{'binary':<22} {'PCs':>6} {'file:line':>10} {'function':>10}"]
    for o in outcomes:
        lines.append(f"{o.variant:<22} {o.pcs:>6} {o.line_agree:>10} {o.function_agree:>10}")
    total = sum(o.pcs for o in outcomes)
    line_ok = sum(o.line_agree for o in outcomes)
    func_ok = sum(o.function_agree for o in outcomes)
    lines.append(
        f"{'all':<22} {total:>6} {line_ok:>10} {func_ok:>10}"
        f"   ({100 * line_ok / max(total, 1):.2f}% / {100 * func_ok / max(total, 1):.2f}%)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", action="store_true", help="the sample `make test` checks")
    parser.add_argument("--work", type=Path, help="build folder (kept; default: a temporary one)")
    parser.add_argument("--only", action="append", default=[], help="variant name (repeatable)")
    parser.add_argument("--show", type=int, default=20, help="mismatches to print")
    args = parser.parse_args(argv)
    from corpus import VARIANTS

    variants = [v for v in VARIANTS if (v.sample or not args.sample) and (not args.only or v.name in args.only)]
    limit = SAMPLE_PER_BINARY if args.sample else None
    if args.work:
        outcomes = run(variants, args.work, limit)
    else:
        with tempfile.TemporaryDirectory(prefix="ualdbg-corpus-") as tmp:
            outcomes = run(variants, Path(tmp), limit)
    print(report(outcomes))
    shown = [m for o in outcomes for m in o.mismatches][: args.show]
    for m in shown:
        print(m)
    return 0 if all(not o.mismatches for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
