"""Helpers of the cross-architecture suite: the toolchains it needs (missing ones fail under
CI=true, skip locally), the cross-built examples, the expected rows of examples/README.md's
strict-alignment table, and the counts its programs print (gdb-multiarch against qemu-user is
support.debuggers.run_gdb_multiarch)."""
from __future__ import annotations

import collections
import re
import subprocess
from pathlib import Path

from support.env import EXAMPLES, require_tool
from support.expected import Expected

from ualdbg.isa.arch import arch_by_name

CROSS_ARCHES = ("sparc64", "alpha", "hppa", "sh4")
SECTION = "## Expected faults on strict-alignment CPUs"


def require_cross(arch: str) -> None:
    info = arch_by_name(arch)
    for tool in (f"{info.triplet}-gcc", info.qemu or "", "gdb-multiarch"):
        require_tool(tool)


_built: set[str] = set()


def build(arch: str) -> Path:
    """`make -C examples cross ARCH=arch`, once per session."""
    require_cross(arch)
    if arch not in _built:
        subprocess.run(["make", "-s", "-C", str(EXAMPLES), "cross", f"ARCH={arch}"], check=True,
                       capture_output=True, text=True)
        _built.add(arch)
    return EXAMPLES / "build" / arch


def cross_rows() -> dict[tuple[str, str, tuple[str, ...]], list[Expected]]:
    """(arch, program, args) -> its rows, from the README section on strict CPUs only."""
    text = (EXAMPLES / "README.md").read_text()
    out: dict[tuple[str, str, tuple[str, ...]], list[Expected]] = {}
    for line in text[text.index(SECTION):].splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] in ("arch", "") or set(cells[0]) <= set("-: "):
            continue
        arch, prog, args, loc, count, size, access = cells
        row = Expected(prog, tuple(args.split()), loc, int(count), int(size) if size.isdigit() else None,
                       access if access not in ("-", "") else None)
        out.setdefault((arch, prog, row.args), []).append(row)
    return out


def routine_counts(doc: dict) -> dict[str, int]:  # type: ignore[type-arg]
    """A trace document's fault counts per function."""
    counts: collections.Counter[str] = collections.Counter()
    for site in doc["sites"]:
        counts[site["function"]] += site["count"]
    return dict(counts)


def pair_stream_counts(text: str) -> dict[str, int]:
    """pair_stream's own count of its misaligned records (examples/pair_stream.c)."""
    m = re.search(r"pair_stream: records=(\d+) stride=(\d+) key4=(\d+) weight8=(\d+) total8=(\d+)", text)
    assert m is not None, text
    return dict(zip(("records", "stride", "key4", "weight8", "total8"), map(int, m.groups())))
