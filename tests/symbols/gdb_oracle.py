"""Runs inside gdb (`gdb -batch -x gdb_oracle.py /bin/true`): what gdb shows for each PC of the
ELF file $ORACLE_FILE listed in $ORACLE_IN (one hexadecimal link-time address per line), written
as JSON lines to $ORACLE_OUT.

gdb's own frames are the answer, not a re-implementation of its rules: a process is started and
stopped at its first instruction, the file is added with `add-symbol-file -o $ORACLE_BIAS` (at an
unused address), and for each PC the program counter is set there. gdb then builds the frames at
that PC as at a stop: the inlined frames first, up to the real (normal) frame. For each frame:
`Frame.name()` (the name `frame`, `up` and `bt` show) and `Frame.find_sal()` (the line shown:
for the innermost frame the PC's line, for an inlined function's caller the line of the call).
Nothing is executed at those PCs."""

from __future__ import annotations

import json
import os

import gdb  # type: ignore[import-not-found]


def frames_at(pc: int) -> list[list[object]]:
    # A frame pointer inside the stack, so that a CFA computed from it is plausible.
    gdb.execute("set $rbp = $rsp + 0x200", to_string=True)
    try:
        gdb.execute(f"set $pc = {pc:#x}", to_string=True)
    except gdb.error as exc:
        return [["<error>", str(exc), 0]]
    out: list[list[object]] = []
    frame = gdb.newest_frame()
    while frame is not None:
        sal = frame.find_sal()
        line = sal.line if sal.symtab is not None else 0
        out.append([frame.name(), sal.symtab.fullname() if line else None, line])
        if frame.type() != gdb.INLINE_FRAME:
            break
        frame = frame.older()
    return out


def main() -> None:
    bias = int(os.environ["ORACLE_BIAS"], 16)
    gdb.execute("set confirm off", to_string=True)
    gdb.execute("starti", to_string=True)
    gdb.execute(f"add-symbol-file {os.environ['ORACLE_FILE']} -o {bias:#x}", to_string=True)
    with open(os.environ["ORACLE_IN"]) as f:
        pcs = [int(line, 16) for line in f if line.strip()]
    with open(os.environ["ORACLE_OUT"], "w") as out:
        for pc in pcs:
            out.write(json.dumps({"pc": pc, "frames": frames_at(pc + bias)}) + "\n")


main()
