"""Builds the native stepper from its C source with the system compiler, once per source
version, into the same private cache as the agent ($XDG_CACHE_HOME/ualdbg or ~/.cache/ualdbg,
checked: agent/private.py), keyed by a hash of the source, the compiler and the flags
(agent/build.py's `cached_build`). No prebuilt binary is shipped."""
from __future__ import annotations

from pathlib import Path

from ..agent.build import BuildError, cached_build

__all__ = ["BuildError", "build"]

SRC = Path(__file__).resolve().parent / "src"
SOURCES = ("stepper.c",)
CFLAGS = ("-O2", "-g", "-Wall", "-Wextra")
EXE_NAME = "ualdbg-stepper"


def build(dest_dir: Path | None = None) -> Path:
    """The path of the built stepper, compiling it if this source version is not cached yet."""
    return cached_build("the stepper", "stepper", EXE_NAME, [SRC / s for s in SOURCES], (), CFLAGS, (), dest_dir)
