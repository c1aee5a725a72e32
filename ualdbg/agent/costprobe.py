"""The cost probe (src/costprobe/costprobe.c): what one access of each cost class takes on this
CPU (aligned, inside a line, across a line, across a page, a split lock), built like the agent
(build.py's cache) and run as a program of its own; ualdbg/isa/costclass.py caches its output per
CPU and makes the estimate's price table of it (issue 33)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .build import SRC, cached_build

SOURCE = SRC.parent / "costprobe" / "costprobe.c"
FLAGS = ("-O2", "-Wall", "-Wextra")


class CostProbeError(Exception):
    """The probe did not run, or failed: one line why."""


def build_cost_probe(dest_dir: Path | None = None) -> Path:
    """The built probe, compiled if this source version is not cached (BuildError otherwise)."""
    return cached_build("the cost probe", "costprobe", "costprobe", [SOURCE], flags=FLAGS, dest_dir=dest_dir)


def run_cost_probe(exe: Path, split_lock: bool = True) -> list[str]:
    """The probe's output lines (`class ns` and `meta key value`), run without the agent
    preloaded; `split_lock` False: the split lock is not measured (a kernel would kill it)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        proc = subprocess.run([str(exe), *([] if split_lock else ["nolock"])], capture_output=True, text=True,
                              timeout=120, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CostProbeError(f"the cost probe did not run: {exc}") from None
    if proc.returncode != 0:
        raise CostProbeError(f"the cost probe exited with status {proc.returncode}")
    return proc.stdout.splitlines()
