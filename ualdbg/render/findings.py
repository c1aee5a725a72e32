"""What a CI system shows of a trace: one finding per site, with where it is (a source path
relative to the root, a line), what it is in one line, how bad (SARIF's level), the key that
follows it across runs and edits (the baseline's and SARIF's fingerprint) and, with a baseline,
whether it is new. SARIF, JUnit XML, GitLab Code Quality and GitHub's annotations are views of
these (docs/CI.md, "Formats CI systems read")."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..ci.baseline import fingerprint, module_paths, site_key
from ..core.advice import advice_by_pc, vas_by_pc
from ..core.result import Site, TraceResult
from .formats import Context


@dataclass(frozen=True)
class Finding:
    site: Site
    key: str  # the site's stable key: SARIF's partialFingerprints, GitLab's fingerprint
    level: str  # "error", "warning" or "note", as SARIF's levels
    title: str  # one short line: "3 unaligned 8-byte reads in bump"
    message: str  # what, where, the data and the fix
    path: str | None  # the source file, relative to the root when it lies under it
    line: int | None
    module: str  # the module's file, relative to the root when under it, else its name
    new: bool | None  # with a baseline: a site it does not have; None: no baseline given


def relative(path: str, root: str) -> str:
    """`path` relative to `root` when it lies under it, else as it is."""
    if os.path.isabs(path):
        rel = os.path.relpath(path, root)
        if not rel.startswith(".."):
            return rel
    return path


def _module(path: str | None, root: str) -> str | None:
    if not path:
        return None
    rel = relative(path, root)
    return None if os.path.isabs(rel) else rel


def level(site: Site) -> str:
    """SARIF's level of a site (its cost class decides where the trace has classes)."""
    return "warning"


def accesses(site: Site) -> str:
    """`3 unaligned 8-byte reads`."""
    sizes = "/".join(str(x) for x in sorted(site.sizes)) or "?"
    kind = site.access.value if site.access else "access"
    many = site.count != 1
    return f"{site.count:,} unaligned {sizes}-byte {kind}{('es' if kind == 'access' else 's') if many else ''}"


def findings(result: TraceResult, context: Context) -> list[Finding]:
    """One finding per site, in the trace's order."""
    root = os.path.abspath(context.srcroot or os.getcwd())
    advice = advice_by_pc(result)
    paths, arch = module_paths(result), str(result.arch or "x86_64")
    first_va = {pc: vas[0] for pc, vas in vas_by_pc(result).items() if vas}
    new_pcs = None if context.new_sites is None else {s.pc for s in context.new_sites}
    out: list[Finding] = []
    seen: dict[str, int] = {}
    for site in result.sites:
        loc = site.loc
        va = first_va.get(site.pc)
        text = f"{accesses(site)} at PC {site.pc:#x} ({loc.where()})" + (f", e.g. virtual address {va:#x}" if va is not None else "")
        data, fix = site.data, advice.get(site.pc)
        if data is not None:
            text += f". Data: {data.text or 'unknown'}" + (f", via {data.via.path}" if data.via is not None else "")
        if fix:
            text += f". Fix ({fix.remedy}): {fix.text}"
        place = loc.function or loc.module_name or f"{site.pc:#x}"
        key = fingerprint(site_key(site, paths, arch))
        n = seen[key] = seen.get(key, 0) + 1
        if n > 1:  # a second site with one key (two PCs on one line): CI systems want them apart
            key = fingerprint(f"{key}#{n}")
        out.append(Finding(
            site=site, key=key, level=level(site),
            title=f"{accesses(site)} in {place}", message=text,
            path=relative(loc.file, root) if loc.file and loc.line else None, line=loc.line if loc.file else None,
            module=_module(loc.module, root) or loc.module_name or "unknown",
            new=None if new_pcs is None else site.pc in new_pcs))
    return out
