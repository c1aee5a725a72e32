"""Baselines: the sites a project has accepted, so that `check --baseline` fails only on new ones.
A site's key survives a rebuild: module + function + source line, or, without a line, the
instruction's bytes (addresses and offsets move with every change of code before them)."""
from __future__ import annotations

import json
import os
from typing import Any

from ..core.errors import UaldbgError
from ..core.result import Site, TraceResult

FORMAT = "ualdbg-baseline"
VERSION = 1


class BaselineError(UaldbgError):
    """A baseline file that cannot be read: one line."""


def _insn_bytes(site: Site, module_paths: dict[str, str], arch: str) -> str | None:
    """The bytes of the instruction at the site, read from its module's file (None if unknown)."""
    path = module_paths.get(site.loc.module_name or "")
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


def module_paths(result: TraceResult) -> dict[str, str]:
    """Module name -> file, as far as the trace tells (the program itself, and processes')."""
    out: dict[str, str] = {}
    for path in [result.program.path, *(p.path for p in result.processes or [])]:
        if path:
            out.setdefault(os.path.basename(path), path)
    return out


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def site_key(site: Site, paths: dict[str, str] | None = None, arch: str = "x86_64") -> str:
    loc = site.loc
    module = loc.module_name or "?"
    function = loc.function or ""
    if loc.file and loc.line:
        return f"{module}|{function}|{os.path.basename(loc.file)}:{loc.line}"
    code = _insn_bytes(site, paths or {}, arch)
    if code:
        return f"{module}|{function}|insn:{code}"
    if function:
        return f"{module}|{function}+{_hex(loc.function_offset)}"
    return f"{module}+{_hex(loc.offset)}"


def fingerprint(key: str) -> str:
    """A stable, short fingerprint of a site key (SARIF partialFingerprints)."""
    import hashlib  # here, not at every start of the shell (issue 34)

    # surrogatepass: a name that was not UTF-8 (DWARF read with surrogateescape, a JSON "\udcff")
    # hashes too; for any other key the bytes, and so the fingerprint, are the same as before.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def keys_of(result: TraceResult) -> dict[str, Site]:
    paths, arch = module_paths(result), str(result.arch or "x86_64")
    out: dict[str, Site] = {}
    for site in result.sites:
        out.setdefault(site_key(site, paths, arch), site)
    return out


def where(site: Site) -> str:
    """A site for a person, as a baseline and the gate's verdict name it: file:line, else
    function+offset, else module+offset."""
    loc = site.loc
    if loc.file and loc.line:
        return f"{loc.file}:{loc.line}"
    if loc.function:
        return f"{loc.function}+{_hex(loc.function_offset)}"
    return f"{loc.module_name}+{_hex(loc.offset)}"


def build(result: TraceResult) -> dict[str, Any]:
    sites = [{"key": k, "where": where(s), "count": s.count} for k, s in sorted(keys_of(result).items())]
    return {"format": FORMAT, "version": VERSION, "program": result.program.path, "sites": sites}


def load(path: str) -> set[str]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BaselineError(f"{path} is not a ualdbg baseline ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BaselineError(f"{path} is not a ualdbg baseline (write one with --update-baseline)")
    if data.get("version") != VERSION:
        raise BaselineError(f"{path} is a baseline of version {data.get('version')!r}; this ualdbg reads version {VERSION}")
    sites = data.get("sites")
    if not isinstance(sites, list) or not all(isinstance(s, dict) and isinstance(s.get("key"), str) for s in sites):
        raise BaselineError(f"{path}: its sites are not a list of {{\"key\": ...}}")
    return {s["key"] for s in sites}


def new_sites(result: TraceResult, known: set[str]) -> list[Site]:
    return [s for k, s in keys_of(result).items() if k not in known]
