"""Builds the agent from its C source with the system compiler, once per source version: the
shared object is cached under $XDG_CACHE_HOME/ualdbg (or ~/.cache/ualdbg, else $TMPDIR/ualdbg-UID),
keyed by a hash of the sources, the compiler and the flags, in directories checked private
(agent/private.py); where none is, into a fresh private directory. No prebuilt binary is shipped."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .private import fresh_dir, private_dir, trusted_file, user_cache

# One folder per product of src/: the agent (here), the record writer, the line-program decoder and
# the #AC probe (below).
SRC = Path(__file__).resolve().parent / "src" / "agent"
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
    return Path(user_cache())


def cache_roots() -> Iterator[str]:
    """The cache directories to use, best first, each checked private (agent/private.py): the
    user's cache, then $TMPDIR/ualdbg-UID (HOME unset or not writable: service accounts, nobody,
    CI runners), then a fresh directory of this run's. Another user's directory under one of these
    names is passed over, never trusted (issue 29)."""
    for candidate in (str(cache_root()), os.path.join(tempfile.gettempdir(), f"ualdbg-{os.geteuid()}")):
        real = private_dir(candidate)
        if real is not None:
            yield real
    fresh = fresh_dir()  # made only when no cache would do
    if fresh is not None:
        yield fresh


def source_hash(cc: str) -> str:
    return _hash(cc, [SRC / n for n in SOURCES + HEADERS], CFLAGS + LIBS)


def _hash(cc: str, files: Sequence[Path], args: Sequence[str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    st = os.stat(cc)
    h.update(f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(" ".join(args).encode())
    return h.hexdigest()[:16]


def _fingerprint(cc: str, files: Sequence[Path], args: Sequence[str]) -> str:
    """What the sources' hash depends on, told by stat alone (size, mtime, inode of each file and
    of the compiler): while it is unchanged, so is the hash, which need not be read again (each
    `ualdbg trace` asks: issue 34)."""
    parts = []
    for path in [Path(cc), *files]:
        st = os.stat(path)
        parts.append(f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
    return "\n".join([*parts, " ".join(args)])


def _stamp_path(root: Path, tag: str, fingerprint: str) -> Path:
    # One stamp per source tree (its first line, the compiler's, aside): checkouts that share the
    # cache do not overwrite each other's.
    import zlib

    return root / f"{tag}.{zlib.crc32(fingerprint.split(chr(10), 2)[1].encode()):08x}.stamp"


def _stamped(root: Path, tag: str, fingerprint: str) -> str | None:
    """The hash recorded with this fingerprint in the tree's stamp under `root`, if it is the same."""
    try:
        recorded, _, key = _stamp_path(root, tag, fingerprint).read_text().rpartition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return key if recorded == fingerprint and len(key) == 16 and key.isalnum() else None


def _stamp(root: Path, tag: str, fingerprint: str, key: str) -> None:
    """Record the hash for this fingerprint (atomically; a cache that cannot be written is fine)."""
    path = _stamp_path(root, tag, fingerprint)
    if _stamped(root, tag, fingerprint) == key:
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=".stamp-", dir=root)
        with os.fdopen(fd, "w") as f:
            f.write(f"{fingerprint}\n{key}")
        os.replace(tmp, path)
    except OSError:
        pass


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
    files, args = [*sources, *headers], [*flags, *libs]
    stamp = _fingerprint(cc, files, args)
    key: str | None = None
    tried = []
    for root in [str(dest_dir)] if dest_dir is not None else cache_roots():
        tried.append(root)
        # The stamp lives in the (private) root: it only names which <tag>-<key> folder to look in,
        # and that folder and its file are still checked private and trusted below.
        key = key or _stamped(Path(root), tag, stamp) or _hash(cc, files, args)
        folder = private_dir(os.path.join(root, f"{tag}-{key}"))
        if folder is None:
            continue
        target = Path(folder) / out_name
        if trusted_file(str(target)):
            _stamp(Path(root), tag, stamp, key)
            return target
        if os.path.lexists(target):  # not ours, or writable by others: never loaded, built anew
            try:
                os.unlink(target)
            except OSError:
                continue
        _compile(what, cc, flags, sources, libs, target)
        _stamp(Path(root), tag, stamp, key)
        return target
    raise BuildError(f"no private directory to build {what} in (tried {', '.join(tried) or 'none'}): "
                     "set XDG_CACHE_HOME to a directory of yours")


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


# The JSON writer of the ring's records (src/records/): loaded into ualdbg itself with ctypes, never
# into the traced program. -ffp-contract=off: its time arithmetic must be Python's, operation for
# operation (IEEE double, no fused multiply-add).
RECORDS_SOURCE = SRC.parent / "records" / "records.c"
RECORDS_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-ffp-contract=off", "-fvisibility=hidden")
RECORDS_LIB = "ualdbg_records.so"


def build_records(dest_dir: Path | None = None) -> Path:
    """The path of the built record writer, compiling it if this source version is not cached."""
    return cached_build("the record writer", "records", RECORDS_LIB, [RECORDS_SOURCE], (), RECORDS_FLAGS,
                        ("-lm",), dest_dir)


# The line-program decoder (src/lines/): loaded into ualdbg itself with ctypes, like the record
# writer; symbols/lineprogram.py decodes in Python where it cannot be built.
LINES_SOURCE = SRC.parent / "lines" / "lines.c"
LINES_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden")
LINES_LIB = "ualdbg_lines.so"


def build_lines(dest_dir: Path | None = None) -> Path:
    """The path of the built line-program decoder, compiling it if this version is not cached."""
    return cached_build("the line-program decoder", "lines", LINES_LIB, [LINES_SOURCE], (), LINES_FLAGS, (), dest_dir)


CODE_MAPS = "codemaps"  # beside the agent's library: the patcher's code maps kept between runs (codemap.c)
CODE_MAPS_KEPT = 256 << 20  # bytes kept at most; beyond, the least recently used go first
_STALE_TMP_S = 3600  # a half-written map older than this was left by a killed process


def prune_code_maps(lib: str, limit: int = CODE_MAPS_KEPT) -> int:
    """Keeps the code maps beside the agent `lib` under `limit` bytes: the least recently used
    (the agent stamps a map's mtime when it reads one) are removed until half the limit is left,
    and so are half-written ones a killed process left. Only this user's regular files named as
    the agent names them, in a folder checked private; returns how many were removed."""
    folder = private_dir(os.path.join(os.path.dirname(lib), CODE_MAPS), create=False, exec_needed=False)
    if folder is None:
        return 0
    import time

    now, removed, kept = time.time(), 0, []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for e in entries:
        if not e.name.startswith("codemap.") or not e.name.endswith((".cm", ".tmp")):
            continue
        try:
            st = e.stat(follow_symlinks=False)
            if not e.is_file(follow_symlinks=False) or st.st_uid != os.geteuid():
                continue
            if e.name.endswith(".tmp"):
                if now - st.st_mtime > _STALE_TMP_S:
                    os.unlink(e.path)
                    removed += 1
                continue
        except OSError:
            continue
        kept.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in kept)
    if total <= limit:
        return removed
    for _mtime, size, path in sorted(kept):
        if total <= limit // 2:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed += 1
    return removed
