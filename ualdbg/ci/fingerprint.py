"""What names a site across runs and across edits (issue 31). An instruction key joins the sites of
several runs of one build (`report --merge`); a fingerprint, as code scanning's, follows a site
through edits elsewhere (baselines, SARIF partialFingerprints): docs/CI.md, "Baselines"."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import Any

from ..core.result import Site, TraceResult
from ..lazyclass import dataclass

# What a fingerprint was made of, strongest first (a baseline says which it holds).
TEXT = "source"  # each frame's function and a hash of its line's text: survives edits elsewhere
LINE = "line"  # the source was not readable: each frame's function and file:line (moves with edits)
INSN = "instruction"  # no line at all: the function and the instruction's bytes
OFFSET = "offset"  # not even the bytes: function+offset or module+offset (moves with any change)
KINDS = (TEXT, LINE, INSN, OFFSET)
MAX_SOURCE = 64 << 20  # bytes of one source file read for its lines' text; a larger file is unreadable


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def instruction_key(site: Site) -> tuple[Any, ...]:
    """One instruction of one build, whichever run saw it: its module and offset (the PC when it
    is in no module), its function, file:line and inline chain. Two PCs on one line (`*p += 3`:
    the read and the write) are two keys; the same code in two processes or runs is one."""
    loc = site.loc
    where = loc.offset if loc.module_name and loc.offset is not None else loc.pc
    chain = tuple((f.function, f.file, f.line) for f in loc.inlined_from)
    return (loc.module_name, where, loc.function, loc.file, loc.line, chain)


def module_paths(result: TraceResult) -> dict[str, str]:
    """Module name -> file, as far as the trace tells (the program itself, and processes')."""
    out: dict[str, str] = {}
    for path in [result.program.path, *(p.path for p in result.processes or [])]:
        if path:
            out.setdefault(os.path.basename(path), path)
    return out


def insn_bytes(site: Site, paths: dict[str, str], arch: str) -> str | None:
    """The bytes of the instruction at the site, read from its module's file (None if unknown)."""
    path = paths.get(site.loc.module_name or "")
    vaddr = site.loc.offset
    if not path or vaddr is None:
        return None
    try:
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:
            elf = ELFFile(f)
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_filesz"]:
                    f.seek(seg["p_offset"] + vaddr - seg["p_vaddr"])
                    code = f.read(16)
                    break
            else:
                return None
    except Exception:  # any unreadable or odd file: the key falls back to function+offset
        return None
    length = 4
    if arch in ("x86_64", "i386", "i686"):
        import capstone

        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if arch == "x86_64" else capstone.CS_MODE_32)
        insn = next(md.disasm(code, vaddr), None)
        if insn is None:
            return None
        length = insn.size
    return code[:length].hex()


class SourceTexts:
    """Source files read once each, as the compilers count lines ("\\n" only: splitlines() would
    also split on form feeds and lone CRs and shift every line after them)."""

    def __init__(self) -> None:
        self._files: dict[str, list[str] | None] = {}

    def line(self, path: str | None, line: int | None) -> str | None:
        if not path or not os.path.isabs(path) or not line or line < 1:
            return None
        if path not in self._files:
            self._files[path] = self._read(path)
        lines = self._files[path]
        return lines[line - 1] if lines is not None and line <= len(lines) else None

    @staticmethod
    def _read(path: str) -> list[str] | None:
        """A regular file of at most MAX_SOURCE bytes (a JSON given to `report` may name
        /dev/zero or a FIFO: never a hang), opened without blocking on a FIFO swapped in."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE:
                    return None
                data = f.read(MAX_SOURCE + 1)
            except OSError:
                return None
        return data.decode("utf-8", "surrogateescape").split("\n")


def _digest(text: str, n: int) -> str:
    import hashlib  # here, not at every start of the shell (issue 34)

    # surrogatepass: a name that was not UTF-8 (DWARF read with surrogateescape, a JSON "\udcff")
    # hashes too.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def normalised(text: str) -> str:
    """A line's text with every blank removed: re-indenting or re-spacing it keeps its key."""
    return "".join(text.split())


def _frames(site: Site) -> list[tuple[str, str | None, str | None, int | None]]:
    """The inline chain from the faulting line out to the real function: (function, file, path,
    line) of each frame, the innermost first (the site's own function and line)."""
    loc = site.loc
    out = [(loc.function or "", loc.file, loc.path or loc.file, loc.line)]
    for f in loc.inlined_from:
        out.append((f.function or "", f.file, f.path or f.file, f.line))
    return out


def chain_key(site: Site, texts: SourceTexts, paths: dict[str, str], arch: str) -> tuple[str, str]:
    """The site's key before its occurrence index, and the kind of key it is."""
    loc = site.loc
    module = loc.module_name or "?"
    if loc.file and loc.line:
        parts, kind = [], TEXT
        for function, file, path, line in _frames(site):
            text = texts.line(path, line)
            if text is None:  # unreadable source: its file:line, which moves with edits above it
                kind = LINE
                parts.append(f"{function}@{os.path.basename(file or '?')}:{line}")
            else:
                parts.append(f"{function}@{_digest(normalised(text), 16)}")
        return f"{module}|{';'.join(parts)}", kind
    function = loc.function or ""
    code = insn_bytes(site, paths, arch)
    if code:
        return f"{module}|{function}|insn:{code}", INSN
    if function:
        return f"{module}|{function}+{_hex(loc.function_offset)}", OFFSET
    return f"{module}+{_hex(loc.offset)}", OFFSET


@dataclass(frozen=True)
class Keyed:
    """A site of a trace with its key (chain and occurrence index) and what the key is made of."""

    key: str
    kind: str
    site: Site


def _place(site: Site) -> int:
    return site.loc.offset if site.loc.offset is not None else site.loc.pc


def keyed_sites(result: TraceResult) -> list[Keyed]:
    """Every site of the trace with its fingerprint key: its chain key and `#n`, its occurrence
    among the sites with that chain in address order (two faulting PCs on one line, one line
    inlined twice into one statement), so that no two sites share a key."""
    paths, arch = module_paths(result), str(result.arch or "x86_64")
    texts = SourceTexts()
    chained = [(chain_key(s, texts, paths, arch), s) for s in result.sites]
    seen: dict[str, int] = {}
    out = []
    for (chain, kind), site in sorted(chained, key=lambda cs: (cs[0][0], _place(cs[1]))):
        n = seen.get(chain, 0)
        seen[chain] = n + 1
        out.append(Keyed(f"{chain}#{n}", kind, site))
    return out


def fingerprint(key: str) -> str:
    """A stable, short fingerprint of a site key (SARIF partialFingerprints)."""
    return _digest(key, 32)


def kinds_of(keyed: Iterable[Keyed]) -> dict[str, int]:
    """How many keys of each kind (docs/CI.md: what a weaker key survives)."""
    out: dict[str, int] = {}
    for k in keyed:
        out[k.kind] = out.get(k.kind, 0) + 1
    return out
