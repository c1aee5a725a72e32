"""The #AC probe (src/acprobe/acprobe.c): which x86 instruction classes raise #AC on this CPU, built
like the agent (build.py's cache) and run once per CPU as a program of its own, never loaded
into anything; ualdbg/isa/alignment.py turns its output into the AC policy's table."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .build import SRC, cached_build

SOURCE = SRC.parent / "acprobe" / "acprobe.c"
# -mno-red-zone: the probe sets and clears EFLAGS.AC with pushfq/popfq below rsp, as the agent does.
FLAGS = ("-O2", "-Wall", "-Wextra", "-mno-red-zone")


class ProbeRunError(Exception):
    """The probe did not run, or failed: one line why."""


def build_probe(dest_dir: Path | None = None) -> Path:
    """The built probe, compiled if this source version is not cached (BuildError otherwise)."""
    return cached_build("the alignment probe", "acprobe", "acprobe", [SOURCE], flags=FLAGS, dest_dir=dest_dir)


def run_probe(exe: Path) -> list[str]:
    """The probe's output lines (`class kind offset result`), run without the agent preloaded."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeRunError(f"the alignment probe did not run: {exc}") from None
    if proc.returncode != 0:
        raise ProbeRunError(f"the alignment probe exited with status {proc.returncode}")
    return proc.stdout.splitlines()
