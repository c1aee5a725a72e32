"""One builder for every program a test compiles (gcc, g++, a cross gcc): the command a test
would run, with its output cached by the compiler, the flags, the folder it runs in and the
sources' (and their folders' headers') modification times, so an unchanged program is compiled
once, not once per session or per test."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from support.env import ROOT, require_tool
from support.run import Result, run

CACHE = ROOT / ".pytest_cache" / "programs"  # beside pytest's own cache: ignored by git, removed by `make clean`


class BuildError(Exception):
    """The compiler failed; the message is its command line and output."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.explain())
        self.result = result


def _key(compiler: str, flags: Sequence[str], sources: Sequence[str], libs: Sequence[str], cwd: Path) -> str:
    files = []
    for src in sources:
        path = (cwd / src).resolve()
        files.append([str(path), path.stat().st_mtime_ns])
        files += sorted([str(h), h.stat().st_mtime_ns] for h in path.parent.glob("*.h"))
    compiler_file = Path(compiler).resolve()
    text = json.dumps([str(compiler_file), compiler_file.stat().st_mtime_ns, list(flags), list(sources), list(libs),
                       str(cwd.resolve()), files])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def build_program(out: Path, *sources: str | Path, flags: Sequence[str] = ("-g", "-O1"), compiler: str = "gcc",
                  cwd: Path | None = None, libs: Sequence[str] = ()) -> Path:
    """`compiler FLAGS -o OUT SOURCES LIBS`, run in `cwd` (default: the repository; DWARF names
    the sources as given, relative to it), and `out`. A missing compiler skips locally and fails
    under CI; a failed build raises BuildError."""
    compiler_path = require_tool(compiler)
    cwd = cwd or ROOT
    names = [str(s) for s in sources]
    cached = CACHE / _key(compiler_path, flags, names, libs, cwd) / out.name
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{out.name}.{os.getpid()}")
        result = run([compiler, *flags, "-o", str(partial), *names, *libs], cwd=cwd, timeout=600).fail_on_timeout()
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise BuildError(result)
        os.replace(partial, cached)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(cached, out)
    return out


def build_source(source: Path, out_dir: Path, *, flags: Sequence[str] = ("-g", "-O1"), libs: Sequence[str] = ()) -> Path:
    """One C (gcc) or C++ (g++, for .cpp) file compiled from its own folder with its bare name,
    so that DWARF names it as it is named there, into out_dir/STEM."""
    compiler = "g++" if source.suffix == ".cpp" else "gcc"
    return build_program(out_dir / source.stem, source.name, flags=flags, compiler=compiler, cwd=source.parent, libs=libs)
