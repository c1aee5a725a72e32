"""Builds the agent from its C source with the system compiler, once per source version: the
shared object is cached under $XDG_CACHE_HOME/ualdbg (or ~/.cache/ualdbg), keyed by a hash of
the sources, the compiler and the flags. No prebuilt binary is shipped."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent / "src"
SOURCES = ("agent.c", "signals.c", "wrappers.c", "insn.c", "cfi.c", "entry.S")
HEADERS = ("agent.h", "ualdbg_agent.h", "insn.h", "cfi.h")
# -mno-red-zone: the agent sets and clears EFLAGS.AC with pushfq/popfq in inline assembly,
# which writes below rsp. -fvisibility=hidden: only the interposed libc names are exported.
CFLAGS = ("-shared", "-fPIC", "-O2", "-g", "-Wall", "-Wextra", "-Wno-stringop-truncation", "-mno-red-zone",
          "-fvisibility=hidden", "-fno-strict-aliasing")
LIBS = ("-ldl", "-pthread")
LIB_NAME = "ualdbg_agent.so"


class BuildError(Exception):
    """The agent cannot be built here: one line saying why."""


def compiler() -> str:
    """The C compiler: $CC (its first word) or cc."""
    name = (os.environ.get("CC") or "cc").split()[0]
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"no C compiler ({name}) to build the agent; install one (Debian: apt-get install gcc)")
    return path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ualdbg"


def source_hash(cc: str) -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode() + b"\0" + (SRC / name).read_bytes() + b"\0")
    st = os.stat(cc)
    h.update(f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(" ".join(CFLAGS + LIBS).encode())
    return h.hexdigest()[:16]


def build(dest_dir: Path | None = None) -> Path:
    """The path of the built agent, compiling it if this source version is not cached yet."""
    cc = compiler()
    key = source_hash(cc)
    roots = [dest_dir] if dest_dir is not None else [cache_root(), Path(tempfile.gettempdir()) / f"ualdbg-{os.getuid()}"]
    last_error: OSError | None = None
    for root in roots:
        target = root / f"agent-{key}" / LIB_NAME
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            last_error = exc
            continue
        _compile(cc, target)
        return target
    raise BuildError(f"no writable cache directory for the agent ({last_error})")


def _compile(cc: str, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [cc, *CFLAGS, "-o", tmp, *(str(SRC / s) for s in SOURCES), *LIBS]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines() or ["?"]
            raise BuildError(f"the agent did not compile ({os.path.basename(cc)}): {lines[0].strip()}")
        os.replace(tmp, target)  # atomic: a concurrent run sees the old state or the whole library
    except OSError as exc:
        raise BuildError(f"the agent did not compile: {exc}") from None
    except subprocess.TimeoutExpired:
        raise BuildError("the agent did not compile: the compiler took more than 300 s") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
