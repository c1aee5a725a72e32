"""Baselines: the sites a project has accepted, so that `check --baseline` fails only on new ones.
A site's key survives a rebuild: module + function + source line, or, without a line, the
instruction's bytes (addresses and offsets move with every change of code before them)."""
from __future__ import annotations

import json
import os
from typing import Any

FORMAT = "ualdbg-baseline"
VERSION = 1


class BaselineError(Exception):
    """A baseline file that cannot be read: one line."""


def _insn_bytes(site: dict[str, Any], module_paths: dict[str, str], arch: str) -> str | None:
    """The bytes of the instruction at the site, read from its module's file (None if unknown)."""
    path = module_paths.get(site.get("module") or "")
    offset = site.get("offset")
    if not path or not offset:
        return None
    try:
        from elftools.elf.elffile import ELFFile

        vaddr = int(offset, 16)
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


def module_paths(doc: dict[str, Any]) -> dict[str, str]:
    """Module name -> file, as far as the document tells (the program itself, and processes')."""
    out: dict[str, str] = {}
    for entry in [doc.get("program") or {}, *(doc.get("processes") or [])]:
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and path:
            out.setdefault(os.path.basename(path), path)
    return out


def site_key(site: dict[str, Any], paths: dict[str, str] | None = None, arch: str = "x86_64") -> str:
    module = site.get("module") or "?"
    function = site.get("function") or ""
    if site.get("file") and site.get("line"):
        return f"{module}|{function}|{os.path.basename(site['file'])}:{site['line']}"
    code = _insn_bytes(site, paths or {}, arch)
    if code:
        return f"{module}|{function}|insn:{code}"
    if function:
        return f"{module}|{function}+{site.get('function_offset')}"
    return f"{module}+{site.get('offset')}"


def fingerprint(key: str) -> str:
    """A stable, short fingerprint of a site key (SARIF partialFingerprints)."""
    import hashlib  # here, not at every start of the shell (issue 34)

    # surrogatepass: a name that was not UTF-8 (DWARF read with surrogateescape, a JSON "\udcff")
    # hashes too; for any other key the bytes, and so the fingerprint, are the same as before.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def keys_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    paths, arch = module_paths(doc), str(doc.get("arch") or "x86_64")
    out: dict[str, dict[str, Any]] = {}
    for site in doc.get("sites") or []:
        out.setdefault(site_key(site, paths, arch), site)
    return out


def build(doc: dict[str, Any]) -> dict[str, Any]:
    from .gate import baseline_where

    sites = [{"key": k, "where": baseline_where(s), "count": s.get("count", 0)} for k, s in sorted(keys_of(doc).items())]
    return {"format": FORMAT, "version": VERSION, "program": (doc.get("program") or {}).get("path"), "sites": sites}


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


def new_sites(doc: dict[str, Any], known: set[str]) -> list[dict[str, Any]]:
    return [s for k, s in keys_of(doc).items() if k not in known]
