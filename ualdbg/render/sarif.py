"""SARIF 2.1.0 for code scanning: one result per unaligned-access site, located by the DWARF
line of its PC, and the invocation: ualdbg's exit status, whether the run was whole (not
interrupted, nothing unseen), and a notification for each part it did not see (issue 29)."""
from __future__ import annotations

import json
import os
from typing import IO, Any

from ..ci.fingerprint import fingerprint, keyed_sites
from ..core.advice import advice_by_pc, vas_by_pc
from ..core.cost import INSIDE, SPLIT_LOCK, classes_json
from ..core.document import blind_json, data_json
from ..core.model import AccessKind
from ..core.result import TraceResult
from .formats import Context

RULE_ID = "ualdbg/unaligned-access"


def invocation(result: TraceResult, exit_code: int | None = None) -> dict[str, Any]:
    """How the run went, as SARIF's invocation object: `exitCode` (ualdbg's own status, when the
    caller knows it: `check`), `executionSuccessful` false for a partial run (interrupted) or an
    incomplete one (blind spots), each such part as a toolExecutionNotification, and the
    program's own end in properties."""
    prog = result.program
    spots = result.blind_spots
    partial = result.partial
    notes = []
    if partial:
        notes.append({"level": "warning", "descriptor": {"id": "ualdbg/partial-run"},
                      "message": {"text": f"interrupted by {result.interrupted_by or 'a signal'}: the trace is partial"}})
    for b in spots:
        notes.append({"level": "warning", "descriptor": {"id": f"ualdbg/blind-spot/{b.kind}"},
                      "message": {"text": str(b.text or b.kind)},
                      "properties": {k: v for k, v in blind_json(b).items() if k != "text"}})
    out: dict[str, Any] = {
        "executionSuccessful": not partial and not spots,
        "toolExecutionNotifications": notes,
        "properties": {"partial": partial, "incomplete": bool(spots), "blindSpots": len(spots),
                       "programExitStatus": prog.exit_status, "programExitSignal": prog.exit_signal,
                       "faultsTotal": result.faults_total},
    }
    if exit_code is not None:
        out["exitCode"] = exit_code
    return out


def sarif_level(classes: dict[str, int] | None) -> str:
    """A site's level by what its accesses cost (issue 33): a split lock is an error, a line or
    page split (or a trap on a strict CPU, or a class not known) a warning, the rest (inside a
    line: almost free on x86) a note; a site without classes stays a warning, as before."""
    if not classes:
        return "warning"
    have = {c for c, n in classes.items() if n}
    if SPLIT_LOCK in have:
        return "error"
    return "note" if have <= {INSIDE} else "warning"


def _accesses(access: AccessKind | None, n: int) -> str:
    """`read`, `3 writes`' noun: `reads`, `read-writes`, `accesses` (not "reades")."""
    word = access.value if access else "access"
    return word if n == 1 else word + ("es" if word.endswith("ss") else "s")


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def build_sarif(trace: TraceResult, *, srcroot: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    root = os.path.abspath(srcroot or os.getcwd())
    results = []
    advice = advice_by_pc(trace)
    keys = {id(k.site): k.key for k in keyed_sites(trace)}
    first_va = {pc: vas[0] for pc, vas in vas_by_pc(trace).items() if vas}
    for s in trace.sites:
        loc = s.loc
        va = first_va.get(s.pc)
        pc = f"{s.pc:#x}"
        sizes = "/".join(str(x) for x in sorted(s.sizes)) or "?"
        where = f"{loc.function}+{_hex(loc.function_offset)}" if loc.function else (loc.module_name or pc)
        text = (f"{s.count} unaligned {sizes}-byte {_accesses(s.access, s.count)}"
                f" at PC {pc} ({where})"
                + (f", e.g. virtual address {va:#x}" if va is not None else ""))
        data, fix = s.data, advice.get(s.pc)
        if data is not None:  # what the data is and the fix that fits (issue 9)
            text += f". Data: {data.text or 'unknown'}" + (f", via {data.via.path}" if data.via is not None else "")
        if fix:
            text += f". Fix ({fix.remedy}): {fix.text}"
        classes = classes_json(s.classes) if s.classes else None
        if classes:  # what it costs on x86 (issue 33)
            text += ". Cost: " + ", ".join(f"{n} {c}" for c, n in classes.items()) + (" (vector)" if s.vector else "")
        result: dict[str, Any] = {
            "ruleId": RULE_ID,
            "level": sarif_level(classes),
            "message": {"text": text},
            # The baseline's key (ci/fingerprint.py: module, the inline chain's functions and line
            # texts, an occurrence index): stable across rebuilds, runs and edits elsewhere, so
            # code scanning tracks one site as one alert, and no two sites as one.
            "partialFingerprints": {"ualdbgSite/v2": fingerprint(keys[id(s)])},
            "properties": {"count": s.count, "pc": pc, "module": loc.module_name, "offset": _hex(loc.offset),
                           **({"classes": classes, "vector": s.vector} if classes else {}),
                           **({"data": data_json(data)} if data is not None else {}),
                           **({"advice": fix.to_json()} if fix else {})},
        }
        if loc.file and loc.line:
            path = loc.file
            if os.path.isabs(path):
                rel = os.path.relpath(path, root)
                path = rel if not rel.startswith("..") else path
            uri = path if not os.path.isabs(path) else "file://" + path
            result["locations"] = [{
                "physicalLocation": {
                    "artifactLocation": {"uri": uri, **({"uriBaseId": "%SRCROOT%"} if not os.path.isabs(path) else {})},
                    "region": {"startLine": loc.line},
                }
            }]
        results.append(result)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ualdbg",
                "version": trace.version,
                "informationUri": "https://github.com/ualdbg/ualdbg",
                "rules": [{
                    "id": RULE_ID,
                    "name": "UnalignedAccess",
                    "shortDescription": {"text": "Unaligned memory access"},
                    "fullDescription": {"text": "The program accessed memory at an address that is not a multiple of the access size: it traps on strict-alignment CPUs and costs cycles on x86."},
                    "defaultConfiguration": {"level": "warning"},
                }],
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": "file://" + root.rstrip("/") + "/"}},
            "invocations": [invocation(trace, exit_code)],
            "results": results,
        }],
    }


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    """The `sarif` format (render/formats.py): with `check`'s exit status when it is known."""
    out.write(json.dumps(build_sarif(result, srcroot=context.srcroot, exit_code=context.exit_code), indent=2) + "\n")
