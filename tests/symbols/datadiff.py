"""The narrow reads that name a site's data and code (issue 34) against the full walks they replace,
on one binary: the variable at every address of its data (ModuleData.global_at against the table
of the whole DWARF, ModuleData.globals), the frame scopes and the function chain at every
memory-access PC (ModuleData.scopes_at and DwarfIndex.frames_at against the walks of whole
units), and the CFA rule there (one FDE against all of .eh_frame). Any difference is a bug of
the narrow reads: the full walks are what ualdbg named things by before.

    python tests/symbols/datadiff.py PROGRAM...          # e.g. bench/realworld.py's sqlite3, CPython
    python tests/symbols/datadiff.py --corpus            # the corpus of tests/symbols (`make corpus`)
    python tests/symbols/datadiff.py --every 1 PROGRAM   # every byte of the data, not every 8th
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from differential import memory_access_pcs, spread  # noqa: E402

_SHF_ALLOC, _SHF_EXECINSTR = 0x2, 0x4


@dataclass
class Outcome:
    name: str
    addresses: int = 0
    variables: int = 0
    pcs: int = 0
    full_s: float = 0.0  # the full walks' time
    narrow_s: float = 0.0  # the narrow reads' time
    mismatches: list[str] = field(default_factory=list)


def data_addresses(md: Any, every: int) -> list[int]:
    """The first, middle, last and one-past-last byte (and the byte before) of every variable the
    full walk finds and every data symbol, and every `every`-th byte of the allocated sections
    that are not code."""
    found: set[int] = set()
    for v in [*md.dwarf_vars, *md.symbols]:
        end = v.start + max(v.size, 1)
        found.update((v.start - 1, v.start, (v.start + end) // 2, end - 1, end))
    for section in md.index.elf.iter_sections():
        h = section.header
        if h["sh_flags"] & _SHF_ALLOC and not h["sh_flags"] & _SHF_EXECINSTR and h["sh_addr"]:
            found.update(range(h["sh_addr"], h["sh_addr"] + h["sh_size"], every))
    return sorted(a for a in found if a > 0)


def _scopes(scopes: list[Any]) -> list[tuple[Any, ...]]:
    return [(name, die.offset, [v.offset for v in variables]) for name, die, variables in scopes]


def compare(name: str, path: Path, *, every: int = 8, pcs_limit: int | None = None) -> Outcome:
    """The narrow reads against the full walks on one binary (each side with indexes of its own)."""
    from ualdbg.symbols.data import ModuleData
    from ualdbg.symbols.dwarfindex import children
    from ualdbg.symbols.elfindex import ElfIndex

    full, narrow = ModuleData(ElfIndex(str(path))), ModuleData(ElfIndex(str(path)))
    out = Outcome(name)
    if full.dwarf is not None:
        full.index.dwarf.holders = None  # type: ignore[union-attr] # every unit walked whole
    full._outer_children = lambda cu, level, pc: children(level)  # type: ignore[method-assign]
    out.variables = len(full.dwarf_vars)
    addresses = data_addresses(full, every)
    out.addresses = len(addresses)
    t0 = time.perf_counter()
    table = full.globals
    want = [table.find(a) for a in addresses]
    t1 = time.perf_counter()
    got = [narrow.global_at(a) for a in addresses]
    t2 = time.perf_counter()
    out.full_s, out.narrow_s = t1 - t0, t2 - t1
    out.mismatches += [f"{name} variable at {a:#x}: full walk {w}, narrow {g}"
                       for a, w, g in zip(addresses, want, got) if w != g]
    pcs = memory_access_pcs(path)
    if pcs_limit is not None:
        pcs = spread(pcs, pcs_limit)
    out.pcs = len(pcs)
    sides = []
    for md in (full, narrow):
        t = time.perf_counter()
        dwarf = md.dwarf
        answers = [(_scopes(md.scopes_at(pc)), dwarf.frames_at(pc) if dwarf is not None else (),
                    md.frame_rules.every_rule.find(pc) if md is full else md.frame_rules.rule_at(pc)) for pc in pcs]
        sides.append((answers, time.perf_counter() - t))
    out.full_s += sides[0][1]
    out.narrow_s += sides[1][1]
    what = ("frame scopes", "function chain", "CFA rule")
    for pc, w, g in zip(pcs, sides[0][0], sides[1][0]):
        out.mismatches += [f"{name} {what[i]} at {pc:#x}: full walk {w[i]}, narrow {g[i]}" for i in range(3) if w[i] != g[i]]
    return out


def report(outcomes: Sequence[Outcome]) -> str:
    lines = [f"{'binary':<28} {'variables':>9} {'addresses':>10} {'PCs':>7} {'full walks s':>12} {'narrow s':>9} {'differ':>7}"]
    for o in outcomes:
        lines.append(f"{o.name:<28} {o.variables:>9} {o.addresses:>10} {o.pcs:>7} {o.full_s:>12.2f} {o.narrow_s:>9.2f} "
                     f"{len(o.mismatches):>7}")
    return "\n".join(lines)


def corpus_binaries(work: Path) -> list[tuple[str, Path]]:
    from corpus import VARIANTS, build

    return [(v.name, build(v, work, work / "debug")) for v in VARIANTS]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("programs", nargs="*", type=Path)
    parser.add_argument("--corpus", action="store_true", help="the 13 builds of tests/symbols/corpus.py")
    parser.add_argument("--work", type=Path, help="the corpus's build folder (kept; default: a temporary one)")
    parser.add_argument("--every", type=int, default=8, help="check every Nth byte of the data sections (default 8)")
    parser.add_argument("--pcs", type=int, default=None, help="at most this many PCs per binary, spread evenly")
    parser.add_argument("--show", type=int, default=20, help="mismatches to print")
    args = parser.parse_args(argv)
    if not args.programs and not args.corpus:
        parser.error("name programs, or --corpus")
    with tempfile.TemporaryDirectory(prefix="ualdbg-corpus-") as tmp:
        work = args.work or Path(tmp)
        binaries = [(p.name, p) for p in args.programs] + (corpus_binaries(work) if args.corpus else [])
        os.environ.setdefault("UALDBG_DEBUG_FILE_DIRECTORY", str(work / "debug"))  # the split build's DWARF
        outcomes = []
        for name, path in binaries:
            outcomes.append(compare(name, path, every=args.every, pcs_limit=args.pcs))
            print(report(outcomes[-1:]).splitlines()[-1], flush=True)
    print(report(outcomes))
    for m in [m for o in outcomes for m in o.mismatches][: args.show]:
        print(m)
    return 0 if all(not o.mismatches for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
