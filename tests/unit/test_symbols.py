"""ualdbg.symbols against binutils: small C and Fortran programs are built at test time and every
instruction of their .text is resolved and compared with `addr2line -f -i` and `nm`; the
programs' own /proc/self/maps check load biases of PIE, non-PIE and shared-library code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.build import build_program
from support.env import require_tool

from ualdbg.core.model import InlineFrame, Module, SourceLoc
from ualdbg.symbols import ModuleMap, SourcePos, Symbolizer, elf_index, is_system_path, parse_maps
from ualdbg.symbols.elfindex import ElfIndex

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "symbols"
LINK_SOURCE = "src/prog.c"  # as compiled: relative to the build directory, the DW_AT_comp_dir


def run(cmd: Sequence[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(
        list(cmd), cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc.stdout


class Builds:
    """Fixture programs, each compiled on first use into one temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(FIXTURES, root / "src")
        self._done: dict[str, Path] = {}

    def _build(self, name: str, cmd: list[str]) -> Path:
        if name not in self._done:
            run(cmd, cwd=self.root)
            self._done[name] = self.root / name
        return self._done[name]

    def gcc(self, name: str, *flags: str, source: str = LINK_SOURCE, libs: Sequence[str] = ()) -> Path:
        if name not in self._done:
            self._done[name] = build_program(self.root / name, source, flags=flags, cwd=self.root, libs=libs)
        return self._done[name]

    def strip(self, name: str, original: Path, *flags: str) -> Path:
        require_tool("strip")
        return self._build(name, ["strip", *flags, str(original), "-o", name])

    def gfortran(self, name: str, *flags: str) -> Path:
        if name not in self._done:
            self._done[name] = build_program(self.root / name, "src/fortran.f90", flags=flags, compiler="gfortran",
                                             cwd=self.root)
        return self._done[name]

    def library(self) -> Path:
        return self.gcc("libdemo.so", "-g", "-O1", "-shared", "-fPIC", source="src/libdemo.c")

    def uselib(self) -> Path:
        self.library()
        return self.gcc("uselib", "-g", "-O1", source="src/uselib.c", libs=("-L.", "-ldemo", "-Wl,-rpath,$ORIGIN"))


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    return Builds(tmp_path_factory.mktemp("symbols"))


# -- binutils as the reference ---------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    function: str | None
    path: str | None
    line: int | None


def text_addresses(elf: Path) -> list[int]:
    require_tool("objdump")
    out = run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(elf)])
    return [int(m.group(1), 16) for m in re.finditer(r"^\s+([0-9a-f]+):\s", out, re.M)]


def function_symbols(elf: Path, *, dynamic: bool = False) -> list[tuple[int, int, str]]:
    """(start, end, name) of sized function symbols, as nm lists them."""
    require_tool("nm")
    out = run(["nm", "-S", "--defined-only", *(["-D"] if dynamic else []), str(elf)])
    spans = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwWiI":
            start, size = int(parts[0], 16), int(parts[1], 16)
            spans.append((start, start + size, parts[3].split("@")[0]))
    return spans


def addr2line(elf: Path, addrs: Sequence[int]) -> dict[int, list[Frame]]:
    """`addr2line -a -f -i` per address: innermost frame first, then the inlining callers."""
    require_tool("addr2line")
    out = run(
        ["addr2line", "-a", "-f", "-i", "-e", str(elf), *(hex(a) for a in addrs)]
    ).splitlines()
    result: dict[int, list[Frame]] = {}
    current: list[Frame] = []
    i = 0
    while i < len(out):
        if out[i].startswith("0x"):
            current = result.setdefault(int(out[i], 16), [])
            i += 1
            continue
        function, where = out[i], out[i + 1].split(" (discriminator")[0]
        i += 2
        path, _, line_text = where.rpartition(":")
        line = int(line_text) if line_text.isdigit() and line_text != "0" else None
        # Without a line binutils still names the STT_FILE symbol's file: not a location.
        current.append(
            Frame(
                None if function == "??" else function,
                None if line is None else os.path.normpath(path),
                line,
            )
        )
    return result


def frame(function: str | None, pos: SourcePos | None) -> Frame:
    return Frame(function, None, None) if pos is None else Frame(function, pos.path, pos.line)


def our_frames(index: ElfIndex, addr: int) -> list[Frame]:
    info = index.lookup(addr)
    return [frame(info.function, info.pos)] + [frame(c.function, c.pos) for c in info.inlined_from]


def compare_with_gdb(elf: Path) -> tuple[int, int]:
    """Resolve every .text instruction inside a function and compare file:line, the function
    chain and the callers' lines with gdb's own frames at that PC (tests/symbols/gdb_oracle.py);
    return (compared, inlined)."""
    from symbols.differential import compare, ours

    spans = function_symbols(elf)
    addrs = [a for a in text_addresses(elf) if any(lo <= a < hi for lo, hi, _ in spans)]
    outcome = compare(elf.name, elf, elf.parent, pcs=addrs)
    assert not outcome.mismatches, f"{elf.name}: {len(outcome.mismatches)}/{len(addrs)} differ\n" + "\n".join(
        outcome.mismatches[:10]
    )
    inlined = sum(len(a.functions) > 1 for a in ours(elf, addrs).values())
    return len(addrs), inlined


# -- DWARF lookups against gdb ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "flags", "version"),
    [
        ("pie_o1", ("-g", "-O1"), 5),
        ("nopie_o1", ("-g", "-O1", "-no-pie", "-fno-pie"), 5),
        ("dwarf4_o1", ("-g", "-gdwarf-4", "-O1"), 4),
        ("pie_o2", ("-g", "-O2"), 5),
        ("dwarf4_o2", ("-g", "-gdwarf-4", "-O2"), 4),
        ("pie_o0", ("-g", "-O0"), 5),
    ],
)
def test_c_matches_gdb(
    builds: Builds, name: str, flags: tuple[str, ...], version: int
) -> None:
    elf = builds.gcc(name, *flags)
    compared, inlined = compare_with_gdb(elf)
    assert compared > 60
    if "-O0" not in flags:
        assert inlined > 0, "the static inline helpers should have been inlined"
    index = elf_index(str(elf))
    assert index is not None and index.dwarf is not None
    versions = {cu.header["version"] for cu in index.dwarf.dwarfinfo.iter_CUs()}
    assert versions == {version}


@pytest.mark.parametrize(
    ("name", "flags"),
    [("fortran_o1", ("-g", "-O1")), ("fortran_o2_dwarf4", ("-g", "-gdwarf-4", "-O2"))],
)
def test_fortran_matches_gdb(builds: Builds, name: str, flags: tuple[str, ...]) -> None:
    elf = builds.gfortran(name, *flags)
    compared, _ = compare_with_gdb(elf)
    assert compared > 30
    index = elf_index(str(elf))
    assert index is not None
    main_program = next(s for s in function_symbols(elf) if s[2] == "MAIN__")
    # DWARF calls the main program `fdemo`: gdb shows that name (addr2line shows the symbol
    # MAIN__), and so does ualdbg.
    assert index.lookup(main_program[0]).function == "fdemo"


def test_inline_chain_goes_outward(builds: Builds) -> None:
    elf = builds.gcc("pie_o1", "-g", "-O1")
    source = (builds.root / LINK_SOURCE).read_text().splitlines()
    line_of = {
        tag: n for n, text in enumerate(source, 1) for tag in re.findall(r"/\* (\w+) \*/", text)
    }
    index = elf_index(str(elf))
    assert index is not None
    chains = [index.lookup(a) for a in text_addresses(elf)]
    hits = [c for c in chains if c.function == "read32"]
    assert hits, "no PC resolved into the inlined read32"
    for info in hits:
        assert info.pos is not None and info.pos.line == line_of["READ32_LOAD"]
        assert info.pos.file == LINK_SOURCE
        assert [(c.function, c.pos and c.pos.line) for c in info.inlined_from] == [
            ("sum_pair", line_of["SUM_PAIR_CALL"]),
            ("main", line_of["MAIN_CALL"]),
        ]


# -- symbol-table fallbacks --------------------------------------------------------------------


def covering_names(spans: list[tuple[int, int, str]], addr: int) -> set[str]:
    return {name for lo, hi, name in spans if lo <= addr < hi}


@pytest.mark.parametrize("variant", ["no_dwarf", "strip_debug"])
def test_symtab_fallback_matches_nm(builds: Builds, variant: str) -> None:
    if variant == "no_dwarf":
        elf = builds.gcc("no_dwarf", "-O1")
    else:
        elf = builds.strip("strip_debug", builds.gcc("pie_o1", "-g", "-O1"), "-g")
    index = elf_index(str(elf))
    assert index is not None and index.dwarf is None
    spans = function_symbols(elf)
    checked = 0
    for addr in text_addresses(elf):
        names = covering_names(spans, addr)
        if not names:
            continue
        info = index.lookup(addr)
        assert info.function in names, f"{addr:#x}: {info.function} not in {names}"
        symbol_start = next(lo for lo, hi, name in spans if name == info.function)
        assert info.function_start == symbol_start
        assert info.pos is None and info.inlined_from == ()
        checked += 1
    assert checked > 60


def test_separate_debug_file_via_debuglink(builds: Builds) -> None:
    require_tool("objcopy")
    original = builds.gcc("pie_o2", "-g", "-O2")
    linked = builds.root / "linked"
    shutil.copy(original, linked)
    run(["objcopy", "--only-keep-debug", "linked", "linked.debug"], cwd=builds.root)
    run(["strip", "-g", "linked"], cwd=builds.root)
    run(["objcopy", "--add-gnu-debuglink=linked.debug", "linked"], cwd=builds.root)
    index = elf_index(str(linked))
    assert index is not None and index.dwarf is not None
    compared, inlined = compare_with_gdb(linked)
    assert compared > 60 and inlined > 0


def test_stripped_executable_gives_module_and_offset_only(builds: Builds) -> None:
    original = builds.gcc("pie_o1", "-g", "-O1")
    elf = builds.strip("stripped", original)
    index = elf_index(str(elf))
    assert index is not None and index.dwarf is None
    main = next(lo for lo, _, name in function_symbols(original) if name == "main")
    info = index.lookup(main)
    assert (info.function, info.pos, info.inlined_from) == (None, None, ())
    module = Module(
        path=str(elf), base=0x5555_5555_4000, start=0x5555_5555_4000, end=0x5555_5556_0000
    )
    loc = Symbolizer(ModuleMap([module], main=str(elf))).resolve(module.base + main)
    assert loc == SourceLoc(pc=module.base + main, module=str(elf), offset=main)
    assert loc.where() == f"stripped+{main:#x}"


def test_stripped_library_falls_back_to_dynsym(builds: Builds) -> None:
    library = builds.library()
    stripped = builds.strip("libdemo_stripped.so", library)
    index = elf_index(str(stripped))
    assert index is not None and index.dwarf is None
    exported = {name: (lo, hi) for lo, hi, name in function_symbols(stripped, dynamic=True)}
    assert {"lib_sum", "lib_private_addr"} <= exported.keys()
    for name, (lo, hi) in exported.items():
        for addr in (lo, (lo + hi) // 2, hi - 1):
            info = index.lookup(addr)
            assert (info.function, info.function_start) == (name, lo)
    private = next(lo for lo, _, name in function_symbols(library) if name == "lib_private")
    assert index.lookup(private).function is None  # static: only .symtab knew it


# -- load bias from the running programs' maps ------------------------------------------------


def run_with_maps(program: Path, *args: str) -> tuple[dict[str, int], str]:
    """Run a fixture that prints `name=0x...` addresses, then its /proc/self/maps."""
    out = run([str(program), *args])
    addresses = {k: int(v, 16) for k, v in re.findall(r"(\w+)=(0x[0-9a-f]+)", out)}
    maps = "\n".join(line for line in out.splitlines() if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line))
    return addresses, maps


def addr2line_line(elf: Path, addr: int) -> int | None:
    return addr2line(elf, [addr])[addr][0].line


@pytest.mark.parametrize(
    ("name", "flags", "pie"),
    [("pie_o1", ("-g", "-O1"), True), ("nopie_o1", ("-g", "-O1", "-no-pie", "-fno-pie"), False)],
)
def test_bias_from_own_maps(builds: Builds, name: str, flags: tuple[str, ...], pie: bool) -> None:
    elf = builds.gcc(name, *flags)
    addresses, maps = run_with_maps(elf, "maps")
    modules = ModuleMap.from_text(maps, main=str(elf))
    symbols = {name: lo for lo, _, name in function_symbols(elf)}
    main = modules.find(addresses["main"])
    assert main is not None and main == modules.main and main.path == str(elf)
    assert main.base == addresses["main"] - symbols["main"]
    if pie:
        assert main.base == main.start != 0
    else:
        assert main.base == 0
    symbolizer = Symbolizer(modules)
    for function in ("main", "load64"):
        loc = symbolizer.resolve(addresses[function])
        assert (loc.module, loc.offset) == (str(elf), symbols[function])
        assert (loc.function, loc.function_offset) == (function, 0)
        assert loc.file == LINK_SOURCE
        assert loc.line == addr2line_line(elf, symbols[function])
    loc = symbolizer.resolve(addresses["main"])
    assert loc.file is not None and loc.line is not None
    assert symbolizer.source_path(loc.file) == str(builds.root / LINK_SOURCE)
    source = (builds.root / LINK_SOURCE).read_text().splitlines()
    assert symbolizer.source_line(loc.file, loc.line) == source[loc.line - 1]
    assert "int main(" in source[loc.line - 2]  # gcc puts main's entry on its "{" line
    assert symbolizer.resolve(addresses["main"]) is loc  # cached per PC


def test_shared_library_bias_and_scope(builds: Builds) -> None:
    program = builds.uselib()
    library = builds.library()
    addresses, maps = run_with_maps(program)
    modules = ModuleMap.from_text(maps, main=str(program))
    lib_module = modules.find(addresses["lib_private"])
    assert lib_module is not None and lib_module.path == str(library)
    assert modules.in_default_scope(lib_module) and not modules.is_system(lib_module)
    assert modules.main is not None and modules.in_default_scope(modules.main)
    system = [m for m in modules.modules if modules.is_system(m)]
    assert {m.name for m in system} >= {"libc.so.6", "ld-linux-x86-64.so.2"}
    private = next(lo for lo, _, name in function_symbols(library) if name == "lib_private")
    assert lib_module.base == addresses["lib_private"] - private

    # Every instruction of the library, at its runtime address, against addr2line.
    symbolizer = Symbolizer(modules)
    spans = function_symbols(library)
    addrs = [a for a in text_addresses(library) if covering_names(spans, a)]
    reference = addr2line(library, addrs)
    for addr in addrs:
        loc = symbolizer.resolve(lib_module.base + addr)
        assert loc.offset == addr
        path = loc.file and symbolizer.source_path(loc.file)
        ours = [Frame(loc.function, path, loc.line)]
        ours += [
            Frame(f.function, f.file and symbolizer.source_path(f.file), f.line)
            for f in loc.inlined_from
        ]
        assert ours == reference[addr], f"{addr:#x}"
    entry = symbolizer.resolve(addresses["lib_private"])
    assert (entry.function, entry.function_offset, entry.file) == (
        "lib_private",
        0,
        "src/libdemo.c",
    )
    assert any(
        frame == InlineFrame("lib_private", "src/libdemo.c", 14)
        for addr in addrs
        for frame in symbolizer.resolve(lib_module.base + addr).inlined_from
    )


def test_live_process_maps() -> None:
    cat = os.path.realpath(require_tool("cat"))
    proc = subprocess.Popen([cat], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        # An echoed line proves cat runs its main loop: exec and dynamic loading are done.
        proc.stdin.write(b"ready\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"ready\n"
        modules = ModuleMap.for_pid(proc.pid)
        assert modules.main is not None and modules.main.path == cat
        assert modules.in_default_scope(modules.main)
        libc = next(m for m in modules.modules if m.name == "libc.so.6")
        assert modules.is_system(libc)
        write = next(
            lo for lo, _, name in function_symbols(Path(libc.path), dynamic=True) if name == "write"
        )
        loc = Symbolizer(modules).resolve(libc.base + write)
        assert (loc.module, loc.offset, loc.function_offset) == (libc.path, write, 0)
        assert loc.function is not None and "write" in loc.function
    finally:
        proc.communicate(timeout=10)


# -- maps parsing and module bookkeeping ------------------------------------------------------

SYNTHETIC_MAPS = """\
55d0c8a00000-55d0c8a01000 r--p 00000000 08:01 1234  /opt/my app/bin/prog
55d0c8a01000-55d0c8a02000 r-xp 00001000 08:01 1234  /opt/my app/bin/prog
55d0c8a02000-55d0c8a04000 rw-p 00002000 08:01 1234  /opt/my app/bin/prog
55d0c9000000-55d0c9021000 rw-p 00000000 00:00 0  [heap]
7f0000000000-7f0000028000 r--p 00000000 08:01 99  /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000028000-7f000019d000 r-xp 00028000 08:01 99  /usr/lib/x86_64-linux-gnu/libc.so.6
7f000019d000-7f00001a0000 rw-p 00000000 00:00 0
7f0000200000-7f0000201000 r-xp 00000000 08:01 77  /home/u/build/libmine.so
7f0000300000-7f0000301000 r-xp 00000000 08:01 78  /home/u/build/libold.so (deleted)
7f0000500000-7f0000501000 r--p 00000000 08:01 80  /lib64/ld-linux-x86-64.so.2
7f0000501000-7f0000502000 r-xp 00001000 08:01 80  /lib64/ld-linux-x86-64.so.2
7f0000400000-7f0000500000 r--p 00000000 08:01 82  /usr/lib/locale/locale-archive
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0  [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]
"""


def no_elf(path: str) -> None:
    return None


def test_parse_maps_fields() -> None:
    mappings = parse_maps("garbage line\n" + SYNTHETIC_MAPS)
    assert len(mappings) == 14
    first = mappings[0]
    assert (first.start, first.end, first.perms, first.offset, first.inode) == (
        0x55D0C8A00000,
        0x55D0C8A01000,
        "r--p",
        0,
        1234,
    )
    assert first.path == "/opt/my app/bin/prog"  # spaces in paths survive
    assert mappings[6].path == "" and not mappings[6].is_file
    assert mappings[8].path == "/home/u/build/libold.so (deleted)"
    assert mappings[1].executable and not mappings[0].executable


def test_modules_grouped_found_and_classified() -> None:
    modules = ModuleMap.from_text(SYNTHETIC_MAPS, index_for=no_elf)
    names = [m.name for m in modules.modules]
    assert names == [
        "prog",
        "libc.so.6",
        "libmine.so",
        "libold.so (deleted)",
        "ld-linux-x86-64.so.2",
        "[vdso]",
        "[vsyscall]",
    ]
    prog = modules.modules[0]
    assert (prog.start, prog.end, prog.base) == (0x55D0C8A00000, 0x55D0C8A04000, 0x55D0C8A00000)
    assert modules.main == prog  # mapped first: the executable
    assert modules.find(0x55D0C8A01234) == prog
    assert modules.find(0x55D0C8A04000) is None  # end is exclusive
    assert modules.find(0x55D0C9000010) is None  # heap: no module
    assert modules.find(0x7F0000100000) == modules.modules[1]
    heap = modules.mapping_at(0x55D0C9000010)
    assert heap is not None and heap.path == "[heap]"
    assert modules.mapping_at(0x1000) is None
    scope = {m.name: modules.in_default_scope(m) for m in modules.modules}
    assert scope == {
        "prog": True,
        "libc.so.6": False,
        "libmine.so": True,
        "libold.so (deleted)": True,
        "ld-linux-x86-64.so.2": False,
        "[vdso]": False,
        "[vsyscall]": False,
    }


def test_system_paths() -> None:
    system = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib64/libz.so",
        "/usr/libexec/coreutils/libstdbuf.so",
        "/opt/glibc/lib/ld-linux-x86-64.so.2",
        "[vdso]",
        "/usr/lib/../lib/libc.so.6",
        "/usr/hppa-linux-gnu/lib/libc.so.6",  # Debian's cross sysroots, for programs under qemu-user
        "/usr/sparc64-linux-gnu/lib64/libm.so.6",
    ]
    user = [
        "/home/u/prog",
        "/usr/local/lib/libmine.so",
        "/usr/hppa-linux-gnu/include/x.so",
        "/usr/src/hppa-linux-gnu/lib/y.so",
        "/usr/bin/git",
        "/opt/lib64x/libfoo.so",
        "/library/x.so",
    ]
    assert all(is_system_path(p) for p in system)
    assert not any(is_system_path(p) for p in user)


def test_gdb_info_proc_mappings_table_becomes_maps_text() -> None:
    """qemu 9+'s stub serves the guest's mappings to `info proc mappings` (gdb 13's table)."""
    from ualdbg.symbols.maps import mappings_from_gdb_table

    table = (
        "process 1518\nMapped address spaces:\n\n"
        "\tStart Addr   End Addr       Size     Offset  Perms   objfile\n"
        "\t   0x10000    0x11000     0x1000        0x0  r-xp   /work/x/memalign\n"
        "\t   0x12000    0x33000    0x21000        0x0  rw-p   [heap]\n"
        "\t0x45038000 0x451f4000   0x1bc000        0x0  r-xp   /usr/hppa-linux-gnu/lib/libc.so.6\n"
        "\t0x45205000 0x45209000     0x4000        0x0  rw-p   \n"
    )
    text = mappings_from_gdb_table(table)
    assert text is not None
    maps = parse_maps(text)
    assert [(m.start, m.end, m.perms, m.path) for m in maps] == [
        (0x10000, 0x11000, "r-xp", "/work/x/memalign"),
        (0x12000, 0x33000, "rw-p", "[heap]"),
        (0x45038000, 0x451F4000, "r-xp", "/usr/hppa-linux-gnu/lib/libc.so.6"),
        (0x45205000, 0x45209000, "rw-p", ""),
    ]
    assert mappings_from_gdb_table("No current process: you must name one.\n") is None


def test_tiny_image_and_second_copy_grouping() -> None:
    text = (
        "00400000-00401000 r-xp 00000000 08:01 5  /home/u/tiny\n"
        "00600000-00601000 rw-p 00000000 08:01 5  /home/u/tiny\n"  # data page, offset 0 too
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 6  /home/u/libx.so\n"
        "7f0000001000-7f0000002000 rw-p 00001000 08:01 6  /home/u/libx.so\n"
        "7f1000000000-7f1000001000 r-xp 00000000 08:01 6  /home/u/libx.so\n"  # dlmopen copy
    )
    modules = ModuleMap.from_text(text, index_for=no_elf).modules
    assert [(m.name, m.start, m.end) for m in modules] == [
        ("tiny", 0x400000, 0x601000),
        ("libx.so", 0x7F0000000000, 0x7F0000002000),
        ("libx.so", 0x7F1000000000, 0x7F1000001000),
    ]


def test_main_found_through_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "prog").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = (
        f"7f0000000000-7f0000001000 r-xp 00000000 08:01 9  /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        f"7f1000000000-7f1000001000 r-xp 00000000 08:01 5  {tmp_path}/real/prog\n"
    )
    modules = ModuleMap.from_text(text, main=str(tmp_path / "link" / "prog"), index_for=no_elf)
    assert modules.main is not None and modules.main.name == "prog"


def test_main_module_is_never_system() -> None:
    text = "00400000-00401000 r-xp 00000000 08:01 5  /usr/lib/mytool/bin/tool\n"
    modules = ModuleMap.from_text(text, main="/usr/lib/mytool/bin/tool", index_for=no_elf)
    assert modules.main is not None and modules.in_default_scope(modules.main)


def test_refresh_on_miss_finds_dlopened_library() -> None:
    later = (
        SYNTHETIC_MAPS
        + "7f0000600000-7f0000602000 r-xp 00000000 08:01 81  /home/u/build/plugin.so\n"
    )
    modules = ModuleMap.from_text(SYNTHETIC_MAPS, reader=lambda: later, index_for=no_elf)
    symbolizer = Symbolizer(modules, index_for=no_elf)
    assert modules.find(0x7F0000600010, refresh=False) is None
    loc = symbolizer.resolve(0x7F0000600010)
    assert (loc.module, loc.offset) == ("/home/u/build/plugin.so", 0x10)
    assert modules.generation == 1
    assert symbolizer.resolve(0x1000) == SourceLoc(pc=0x1000)
    assert modules.generation == 1  # re-read, nothing changed


def test_jit_code_does_not_reread_maps() -> None:
    jit = "7f0000700000-7f0000701000 rwxp 00000000 00:00 0\n"
    reads = []

    def reader() -> str:
        reads.append(1)
        return SYNTHETIC_MAPS + jit

    modules = ModuleMap.from_text(SYNTHETIC_MAPS + jit, reader=reader, index_for=no_elf)
    assert modules.find(0x7F0000700010) is None and reads == []
    assert modules.find(0x7F0000900010) is None and reads == [1]  # unmapped: maybe new


def test_failing_reader_is_a_miss_not_an_error() -> None:
    def gone() -> str:
        raise FileNotFoundError("/proc/4242/maps")

    modules = ModuleMap.from_text(SYNTHETIC_MAPS, reader=gone, index_for=no_elf)
    assert Symbolizer(modules, index_for=no_elf).resolve(0x1000) == SourceLoc(pc=0x1000)


def test_unreadable_module_gives_offset_only() -> None:
    modules = ModuleMap.from_text(SYNTHETIC_MAPS, index_for=no_elf)
    loc = Symbolizer(modules).resolve(0x7F0000300010)  # "(deleted)": never opened
    assert loc == SourceLoc(
        pc=0x7F0000300010, module="/home/u/build/libold.so (deleted)", offset=0x10
    )
    assert loc.where() == "libold.so (deleted)+0x10"


# -- the per-file cache ---------------------------------------------------------------------


def test_index_built_once_per_file_version(builds: Builds, tmp_path: Path) -> None:
    copy = tmp_path / "prog"
    shutil.copy(builds.gcc("pie_o1", "-g", "-O1"), copy)
    first = elf_index(str(copy))
    assert first is not None and elf_index(str(copy)) is first
    shutil.copy(builds.gcc("no_dwarf", "-O1"), copy)
    os.utime(copy, ns=(1, 1))  # a rebuild in the same second must still be noticed
    second = elf_index(str(copy))
    assert second is not None and second is not first and second.dwarf is None
    (tmp_path / "text").write_text("not an ELF\n")
    assert elf_index(str(tmp_path / "text")) is None
    assert elf_index(str(tmp_path / "missing")) is None


def test_source_line_counts_newlines_only(tmp_path: Path) -> None:
    source = tmp_path / "weird.c"
    source.write_bytes(b"one\r\ntwo\x0cstill two\nthree\n")
    symbolizer = Symbolizer(ModuleMap())
    assert symbolizer.source_line(str(source), 2) == "two\x0cstill two"
    assert symbolizer.source_line(str(source), 3) == "three"
    assert symbolizer.source_line(str(source), 1) == "one"
    assert symbolizer.source_line(str(source), 99) is None
    assert symbolizer.source_line("relative/unknown.c", 1) is None
