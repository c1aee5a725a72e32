"""A corpus of real optimised binaries that nobody here wrote, for checking ualdbg's resolver against
gdb (issue 18). The sources are Debian 12's own source tarballs, pinned by SHA-256, downloaded
once into a cache and built at test time with the flags of each variant; no third-party code is in
this repository.

    xxhsum  xxHash's CLI built as one translation unit with XXH_INLINE_ALL: a header-only C
            library compiled into a .c file, with its SSE2/AVX2 intrinsics (XXH3)
    lz4     the LZ4 compressor's CLI and liblz4.so (a PIE and a shared library)
    fmt     fmtlib's fuzzing drivers over src/format.cc: C++ templates and lambdas
    minpack MINPACK's Fortran 77 routines with one of its example drivers

Variants cover DWARF 4 and 5, -O0/-O2/-O3, compressed debug sections (-gz) and a separate debug
file found by build-id in a debug-file directory (gdb's `set debug-file-directory`, ualdbg's
UALDBG_DEBUG_FILE_DIRECTORY)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_POOL = "http://deb.debian.org/debian/pool/main/"


@dataclass(frozen=True)
class Source:
    name: str
    pool_path: str  # under pool/main/
    sha256: str
    top: str  # the folder the tarball unpacks to


SOURCES = {
    s.name: s
    for s in (
        Source("xxhash", "x/xxhash/xxhash_0.8.1.orig.tar.gz",
               "3bb6b7d6f30c591dd65aaaff1c8b7a5b94d81687998ca9400082c739a690436c", "xxHash-0.8.1"),
        Source("lz4", "l/lz4/lz4_1.9.4.orig.tar.gz",
               "0b0e3aa07c8c063ddf40b082bdf7e37a1562bda40a0ff5272957f3e987e0e54b", "lz4-1.9.4"),
        Source("fmt", "f/fmtlib/fmtlib_9.1.0+ds1.orig.tar.gz",
               "84ce1c2d0be3a9863935137969dcec6970125caac032f82474640bfc81463583", "fmtlib-9.1.0+ds1"),
        Source("minpack", "m/minpack/minpack_19961126+dfsg1.orig.tar.gz",
               "7d10509cc0faefcbe38a06453cb13a40aaecd2bebc1594fb7ee0943429d8f6d1", "minpack-19961126"),
    )
}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ualdbg" / "sources"


class CorpusError(Exception):
    pass


def fetch(source: Source) -> Path:
    """The tarball, from the cache when its checksum is right, else from Debian."""
    target = cache_dir() / os.path.basename(source.pool_path)
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == source.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    url = DEBIAN_POOL + source.pool_path
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise CorpusError(f"cannot download {url}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise CorpusError(f"{url}: SHA-256 {digest}, expected {source.sha256}")
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def unpack(source: Source, into: Path) -> Path:
    tree = into / source.top
    if not tree.exists():
        with tarfile.open(fetch(source)) as tar:
            tar.extractall(into)  # noqa: S202 - pinned by SHA-256 above
    return tree


@dataclass(frozen=True)
class Variant:
    """One binary: `build` names the recipe, `flags` the compiler flags of every unit."""

    name: str
    recipe: str
    flags: tuple[str, ...]
    split_debug: bool = False  # strip it and keep the DWARF in DEBUGDIR/.build-id/xx/yyyy.debug
    sample: bool = False  # part of the sample that `make test` checks
    notes: tuple[str, ...] = field(default=())


VARIANTS = (
    # The sample: five binaries, every required kind at least once.
    Variant("xxhsum-O3-avx2", "xxhsum", ("-g", "-O3", "-mavx2"), sample=True,
            notes=("header-only library in one .c", "AVX2 intrinsics", "DWARF 5", "PIE")),
    Variant("lz4-O2-gz", "lz4", ("-g", "-O2", "-gz"), sample=True,
            notes=("compressed debug sections",)),
    Variant("liblz4-O3-split", "liblz4", ("-g", "-O3"), split_debug=True, sample=True,
            notes=("shared library", "separate debug file by build-id")),
    Variant("fmt-O2", "fmt", ("-g", "-O2"), sample=True, notes=("C++ templates and lambdas",)),
    Variant("minpack-O2", "minpack", ("-g", "-O2"), sample=True, notes=("Fortran 77",)),
    Variant("xxhsum-O2-dwarf4", "xxhsum", ("-g", "-gdwarf-4", "-O2"), sample=True,
            notes=("DWARF 4",)),
    # The rest of the full run.
    Variant("xxhsum-O0", "xxhsum", ("-g", "-O0")),
    Variant("lz4-O3-dwarf4", "lz4", ("-g", "-gdwarf-4", "-O3")),
    Variant("lz4-O0-nopie", "lz4", ("-g", "-O0", "-no-pie", "-fno-pie")),
    Variant("fmt-O3-dwarf4", "fmt", ("-g", "-gdwarf-4", "-O3")),
    Variant("fmt-O0", "fmt", ("-g", "-O0")),
    Variant("minpack-O3-dwarf4", "minpack", ("-g", "-gdwarf-4", "-O3")),
    Variant("minpack-O0", "minpack", ("-g", "-O0")),
)


def _run(cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CorpusError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr[-3000:]}")


def _compile_all(compiler: str, sources: list[str], flags: tuple[str, ...], cwd: Path,
                 out: Path, extra: tuple[str, ...] = (), link: tuple[str, ...] = ()) -> None:
    """One compiler call per unit (in the source tree, so DW_AT_comp_dir is the tree) and one
    link: the DWARF names files as a real build does."""
    objects = []
    for src in sources:
        obj = out.parent / f"{out.name}.{src.replace('/', '_')}.o"
        _run([compiler, *flags, *extra, "-c", src, "-o", str(obj)], cwd)
        objects.append(str(obj))
    _run([compiler, *flags, *objects, "-o", str(out), *link], cwd)


def _build_recipe(recipe: str, flags: tuple[str, ...], src_root: Path, out: Path) -> None:
    if recipe == "xxhsum":
        tree = unpack(SOURCES["xxhash"], src_root)
        _compile_all("gcc", ["cli/xxhsum.c"], flags, tree, out, ("-DXXH_INLINE_ALL", "-I."))
    elif recipe == "lz4":
        tree = unpack(SOURCES["lz4"], src_root)
        units = [f"lib/{n}" for n in ("lz4.c", "lz4hc.c", "lz4frame.c", "xxhash.c", "lz4file.c")]
        units += [f"programs/{n}" for n in ("lz4cli.c", "lz4io.c", "bench.c", "datagen.c")]
        _compile_all("gcc", units, flags, tree, out, ("-Ilib",))
    elif recipe == "liblz4":
        tree = unpack(SOURCES["lz4"], src_root)
        units = [f"lib/{n}" for n in ("lz4.c", "lz4hc.c", "lz4frame.c", "xxhash.c", "lz4file.c")]
        _compile_all("gcc", units, flags, tree, out, ("-fPIC",), ("-shared",))
    elif recipe == "fmt":
        tree = unpack(SOURCES["fmt"], src_root)
        units = ["test/fuzzing/main.cc", "test/fuzzing/two-args.cc", "src/format.cc"]
        _compile_all("g++", units, flags, tree, out, ("-std=c++17", "-Iinclude"))
    elif recipe == "minpack":
        tree = unpack(SOURCES["minpack"], src_root)
        units = sorted(p.name for p in tree.glob("*.f")) + ["ex/tlmder.f"]
        _compile_all("gfortran", units, flags, tree, out)
    else:
        raise CorpusError(f"no recipe {recipe}")


def build(variant: Variant, work: Path, debug_dir: Path) -> Path:
    """Build one variant under `work`; a split variant's DWARF goes under `debug_dir`."""
    src_root = work / "src"
    src_root.mkdir(parents=True, exist_ok=True)
    out = work / "bin" / (variant.name + (".so" if variant.recipe == "liblz4" else ""))
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(out.name + ".tmp")
    _build_recipe(variant.recipe, variant.flags, src_root, staging)
    if variant.split_debug:
        build_id = _build_id(staging)
        debug = debug_dir / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")
        debug.parent.mkdir(parents=True, exist_ok=True)
        _run(["objcopy", "--only-keep-debug", str(staging), str(debug)], work)
        _run(["objcopy", "--strip-debug", str(staging)], work)
    staging.replace(out)
    return out


def _build_id(path: Path) -> str:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        for section in ELFFile(f).iter_sections():
            if section.header.sh_type == "SHT_NOTE":
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return str(note["n_desc"])
    raise CorpusError(f"{path}: no build-id")


def tools_missing() -> list[str]:
    return [t for t in ("gcc", "g++", "gfortran", "objcopy", "gdb") if shutil.which(t) is None]
