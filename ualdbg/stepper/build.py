"""Builds the native stepper from its C source with the system compiler, once per source
version, into the same cache as the agent ($XDG_CACHE_HOME/ualdbg or ~/.cache/ualdbg), keyed by
a hash of the source, the compiler and the flags. No prebuilt binary is shipped."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from ..agent.build import BuildError as _CompilerMissing
from ..agent.build import cache_root, compiler

SRC = Path(__file__).resolve().parent / "src"
SOURCES = ("stepper.c",)
CFLAGS = ("-O2", "-g", "-Wall", "-Wextra")
EXE_NAME = "ualdbg-stepper"


class BuildError(Exception):
    """The stepper cannot be built here: one line saying why."""


def source_hash(cc: str) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (SRC / name).read_bytes() + b"\0")
    st = os.stat(cc)
    h.update(f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(" ".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def build(dest_dir: Path | None = None) -> Path:
    """The path of the built stepper, compiling it if this source version is not cached yet."""
    try:
        cc = compiler()
    except _CompilerMissing as exc:
        raise BuildError(str(exc).replace("the agent", "the stepper")) from None
    key = source_hash(cc)
    roots = [dest_dir] if dest_dir is not None else [cache_root(), Path(tempfile.gettempdir()) / f"ualdbg-{os.getuid()}"]
    last_error: OSError | None = None
    for root in roots:
        target = root / f"stepper-{key}" / EXE_NAME
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            last_error = exc
            continue
        _compile(cc, target)
        return target
    raise BuildError(f"no writable cache directory for the stepper ({last_error})")


def _compile(cc: str, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".build-", dir=target.parent)
    os.close(fd)
    cmd = [cc, *CFLAGS, "-o", tmp, *(str(SRC / s) for s in SOURCES)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines() or ["?"]
            raise BuildError(f"the stepper did not compile ({os.path.basename(cc)}): {lines[0].strip()}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a concurrent run sees no stepper or the whole one
    except OSError as exc:
        raise BuildError(f"the stepper did not compile: {exc}") from None
    except subprocess.TimeoutExpired:
        raise BuildError("the stepper did not compile: the compiler took more than 300 s") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
