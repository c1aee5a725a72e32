"""What a report for code review or CI says of each site: where it is (a source path relative to
the root, a line), what it is (one line, with its data, fix and cost), how bad (SARIF's level, by
its cost class), the key that follows it across runs and edits (ci/fingerprint.py) and, with a
baseline, whether it is new. SARIF, JUnit XML, GitLab Code Quality and GitHub's annotations are
views of these (docs/CI.md, "Formats CI systems read")."""
from __future__ import annotations

import os

from ..ci.fingerprint import fingerprint, keyed_sites
from ..core.advice import Advice, advice_by_pc, vas_by_pc
from ..core.cost import INSIDE, SPLIT_LOCK, classes_json
from ..core.model import AccessKind
from ..core.result import Site, TraceResult
from ..lazyclass import dataclass
from .formats import Context


@dataclass(frozen=True)
class Finding:
    site: Site
    key: str  # the site's fingerprint: SARIF's partialFingerprints, GitLab's fingerprint
    level: str  # "error", "warning" or "note", as SARIF's levels
    title: str  # one short line: "3 unaligned 8-byte reads in bump"
    message: str  # what, where, the data, the fix and the cost
    path: str | None  # the source file, relative to the root when it lies under it (None: no line)
    line: int | None
    module: str  # the module's file, relative to the root when under it, else its name
    classes: dict[str, int] | None  # the cost classes' counts (issue 33), None where not known
    advice: Advice | None
    new: bool | None  # with a baseline: a site it does not have; None: no baseline given


def relative(path: str, root: str) -> str:
    """`path` relative to `root` when it lies under it, else as it is."""
    if os.path.isabs(path):
        rel = os.path.relpath(path, root)
        if not rel.startswith(".."):
            return rel
    return path


def sarif_level(classes: dict[str, int] | None) -> str:
    """A site's level by what its accesses cost (issue 33): a split lock is an error, a line or
    page split (or a trap on a strict CPU, or a class not known) a warning, the rest (inside a
    line: almost free on x86) a note; a site without classes stays a warning."""
    if not classes:
        return "warning"
    have = {c for c, n in classes.items() if n}
    if SPLIT_LOCK in have:
        return "error"
    return "note" if have <= {INSIDE} else "warning"


def accesses(access: AccessKind | None, n: int) -> str:
    """`read`, `3 writes`' noun: `reads`, `read-writes`, `accesses` (not "reades")."""
    word = access.value if access else "access"
    return word if n == 1 else word + ("es" if word.endswith("ss") else "s")


def _module(path: str | None, root: str) -> str | None:
    if not path:
        return None
    rel = relative(path, root)
    return None if os.path.isabs(rel) else rel


def findings(result: TraceResult, context: Context) -> list[Finding]:
    """One finding per site, in the trace's order."""
    root = os.path.abspath(context.srcroot or os.getcwd())
    advice = advice_by_pc(result)
    keys = {id(k.site): k.key for k in keyed_sites(result)}
    first_va = {pc: vas[0] for pc, vas in vas_by_pc(result).items() if vas}
    new_pcs = None if context.new_sites is None else {s.pc for s in context.new_sites}
    out: list[Finding] = []
    for s in result.sites:
        loc = s.loc
        va = first_va.get(s.pc)
        sizes = "/".join(str(x) for x in sorted(s.sizes)) or "?"
        where = f"{loc.function}+{loc.function_offset or 0:#x}" if loc.function else (loc.module_name or f"{s.pc:#x}")
        what = f"{s.count} unaligned {sizes}-byte {accesses(s.access, s.count)}"
        text = f"{what} at PC {s.pc:#x} ({where})" + (f", e.g. virtual address {va:#x}" if va is not None else "")
        data, fix = s.data, advice.get(s.pc)
        if data is not None:  # what the data is and the fix that fits (issue 9)
            text += f". Data: {data.text or 'unknown'}" + (f", via {data.via.path}" if data.via is not None else "")
        if fix:
            text += f". Fix ({fix.remedy}): {fix.text}"
        classes = classes_json(s.classes) if s.classes else None
        if classes:  # what it costs on x86 (issue 33)
            text += ". Cost: " + ", ".join(f"{n} {c}" for c, n in classes.items()) + (" (vector)" if s.vector else "")
        source = loc.path or loc.file  # absolute where the DWARF gave a directory
        out.append(Finding(
            site=s, key=fingerprint(keys[id(s)]), level=sarif_level(classes),
            title=f"{what} in {loc.function or loc.module_name or hex(s.pc)}", message=text,
            path=relative(source, root) if source and loc.line else None, line=loc.line if source else None,
            module=_module(loc.module, root) or loc.module_name or "unknown", classes=classes, advice=fix,
            new=None if new_pcs is None else s.pc in new_pcs))
    return out
