"""Builds the agent from its C source with the system compiler, once per source version: the
shared object is cached under $XDG_CACHE_HOME/ualdbg (or ~/.cache/ualdbg), keyed by a hash of
the sources, the compiler and the flags. No prebuilt binary is shipped."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

SRC = Path(__file__).resolve().parent / "src"
SOURCES = ("agent.c", "signals.c", "wrappers.c", "trampolines.c", "patch.c", "stopworld.c", "codemap.c", "process.c",
           "access.c", "insn.c", "cfi.c", "entry.S")
HEADERS = ("process.h", "patch.h", "stopworld.h", "codemap.h", "trampolines.h", "wrappers.h", "signals.h",
           "ualdbg_agent.h", "access.h", "insn.h", "cfi.h")
# -mno-red-zone: the agent sets and clears EFLAGS.AC with pushfq/popfq in inline assembly,
# which writes below rsp. -fvisibility=hidden: only the interposed libc names are exported.
CFLAGS = ("-shared", "-fPIC", "-O2", "-g", "-Wall", "-Wextra", "-Wno-stringop-truncation", "-mno-red-zone",
          "-fvisibility=hidden", "-fno-strict-aliasing")
LIBS = ("-ldl", "-pthread")
LIB_NAME = "ualdbg_agent.so"


class BuildError(Exception):
    """The agent cannot be built here: one line saying why."""


def compiler(what: str = "the agent") -> str:
    """The C compiler: $CC (its first word) or cc."""
    name = (os.environ.get("CC") or "cc").split()[0]
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"no C compiler ({name}) to build {what}; install one (Debian: apt-get install gcc)")
    return path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ualdbg"


def source_hash(cc: str) -> str:
    return _hash(cc, [SRC / n for n in SOURCES + HEADERS], CFLAGS + LIBS)


def _hash(cc: str, files: Sequence[Path], args: Sequence[str]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    st = os.stat(cc)
    h.update(f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(" ".join(args).encode())
    return h.hexdigest()[:16]


def build(dest_dir: Path | None = None) -> Path:
    """The path of the built agent, compiling it if this source version is not cached yet."""
    return cached_build("the agent", "agent", LIB_NAME, [SRC / s for s in SOURCES], [SRC / h for h in HEADERS],
                        CFLAGS, LIBS, dest_dir)


def cached_build(what: str, tag: str, out_name: str, sources: Sequence[Path], headers: Sequence[Path] = (),
                 flags: Sequence[str] = (), libs: Sequence[str] = (), dest_dir: Path | None = None) -> Path:
    """<cache>/<tag>-<hash>/<out_name> built from `sources` with the system compiler, compiled
    only if this version (sources, headers, compiler, flags) is not cached yet. `what` names
    the product in BuildError messages ("the agent")."""
    cc = compiler(what)
    key = _hash(cc, [*sources, *headers], [*flags, *libs])
    roots = [dest_dir] if dest_dir is not None else [cache_root(), Path(tempfile.gettempdir()) / f"ualdbg-{os.getuid()}"]
    last_error: OSError | None = None
    for root in roots:
        target = root / f"{tag}-{key}" / out_name
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            last_error = exc
            continue
        _compile(what, cc, flags, sources, libs, target)
        return target
    raise BuildError(f"no writable cache directory for {what} ({last_error})")


def _compile(what: str, cc: str, flags: Sequence[str], sources: Sequence[Path], libs: Sequence[str],
             target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    cmd = [cc, *flags, "-o", tmp, *(str(s) for s in sources), *libs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines() or ["?"]
            raise BuildError(f"{what} did not compile ({os.path.basename(cc)}): {lines[0].strip()}")
        os.replace(tmp, target)  # atomic: a concurrent run sees the old state or the whole library
    except OSError as exc:
        raise BuildError(f"{what} did not compile: {exc}") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} did not compile: the compiler took more than 300 s") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# The JSON writer of the ring's records (records.c): loaded into ualdbg itself with ctypes, never
# into the traced program. -ffp-contract=off: its time arithmetic must be Python's, operation for
# operation (IEEE double, no fused multiply-add).
RECORDS_SOURCE = "records.c"
RECORDS_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-ffp-contract=off", "-fvisibility=hidden")
RECORDS_LIB = "ualdbg_records.so"


def build_records(dest_dir: Path | None = None) -> Path:
    """The path of the built record writer, compiling it if this source version is not cached."""
    return cached_build("the record writer", "records", RECORDS_LIB, [SRC / RECORDS_SOURCE], (), RECORDS_FLAGS,
                        ("-lm",), dest_dir)
