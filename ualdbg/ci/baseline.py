"""Baselines: the sites a project has accepted, so that `check --baseline` fails only on new ones.
A site's key is its fingerprint (ci/fingerprint.py): module, each inline frame's function and the
text of its line, an occurrence index; it survives rebuilds and edits elsewhere in the file."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..core.errors import UaldbgError
from ..core.result import Site, TraceResult
from .costfilter import site_selected_count
from .fingerprint import INSN, LINE, OFFSET, Keyed, keyed_sites, kinds_of

FORMAT = "ualdbg-baseline"
# 2: keys by the text of each inline frame's line (issue 31); 1 keyed by file:line, which moved
# with every edit above a site: read no more, the error says how to write a new one.
VERSION = 2


class BaselineError(UaldbgError):
    """A baseline file that cannot be read: one line."""


def keys_of(result: TraceResult) -> dict[str, Site]:
    """Every site of the trace by its key (ci/fingerprint.py): none shares one."""
    return {k.key: k.site for k in keyed_sites(result)}


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def where(site: Site) -> str:
    """A site for a person, as a baseline and the gate's verdict name it: file:line, and for an
    inlined helper the real function's line that called it (a new call of a helper is a new site:
    issue 31); else function+offset, else module+offset."""
    loc = site.loc
    if loc.file and loc.line:
        chain = loc.inlined_from
        if chain and chain[-1].file and chain[-1].line:
            return f"{loc.file}:{loc.line} ({loc.function} inlined into {chain[-1].function} at {chain[-1].file}:{chain[-1].line})"
        return f"{loc.file}:{loc.line}"
    if loc.function:
        return f"{loc.function}+{_hex(loc.function_offset)}"
    return f"{loc.module_name}+{_hex(loc.offset)}"


def _selected(result: TraceResult, fail_on: str) -> list[tuple[Keyed, int]]:
    """The sites that count under `fail_on` (ci/costfilter.py), each with the key it has in the
    whole document (keyed before filtering: a sibling of another class that drops out must not
    shift an occurrence index) and its count of accesses that count."""
    out = []
    for k in keyed_sites(result):
        n = site_selected_count(k.site, fail_on)
        if n:
            out.append((k, n))
    return out


def build(result: TraceResult, fail_on: str = "any") -> dict[str, Any]:
    chosen = sorted(_selected(result, fail_on), key=lambda kn: kn[0].key)
    keyed = [k for k, _n in chosen]
    sites = [{"key": k.key, "kind": k.kind, "where": where(k.site), "count": n} for k, n in chosen]
    out: dict[str, Any] = {"format": FORMAT, "version": VERSION, "program": result.program.path,
           "keys": kinds_of(keyed), "sites": sites}
    weak = weak_note(keyed)
    if weak:
        out["note"] = weak
    return out


def weak_note(keyed: list[Keyed]) -> str | None:
    """What a baseline's weaker keys do not survive (None: every key is a source key)."""
    kinds = kinds_of(keyed)
    lines, code = kinds.get(LINE, 0), kinds.get(INSN, 0) + kinds.get(OFFSET, 0)
    parts = []
    if lines:
        parts.append(f"{lines} site{'s' if lines != 1 else ''} keyed by file:line (their source was not "
                     "readable where the baseline was made): an edit above them changes their keys")
    if code:
        parts.append(f"{code} site{'s' if code != 1 else ''} without a source line keyed by their instruction "
                     "(bytes, or function+offset): a change of the instruction changes their keys")
    return "; ".join(parts) or None


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
    if data.get("version") == 1:
        raise BaselineError(f"{path} is a baseline of version 1 (keys by file:line, which move with every edit); "
                            f"write it again: ualdbg check --update-baseline --baseline {path} -- PROG ARGS")
    if data.get("version") != VERSION:
        raise BaselineError(f"{path} is a baseline of version {data.get('version')!r}; this ualdbg reads version {VERSION}")
    sites = data.get("sites")
    if not isinstance(sites, list) or not all(isinstance(s, dict) and isinstance(s.get("key"), str) for s in sites):
        raise BaselineError(f"{path}: its sites are not a list of {{\"key\": ...}}")
    return {s["key"] for s in sites}


def new_sites(result: TraceResult, known: set[str], fail_on: str = "any") -> list[Site]:
    """The sites that count under `fail_on` and that the baseline does not have, hottest first."""
    return [replace(k.site, count=n) for k, n in sorted(_selected(result, fail_on), key=lambda kn: -kn[1])
            if k.key not in known]
