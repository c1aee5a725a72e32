"""SARIF 2.1.0 for code scanning: one result per unaligned-access site, located by the DWARF
line of its PC, and the invocation: ualdbg's exit status, whether the run was whole (not
interrupted, nothing unseen), and a notification for each part it did not see (issue 29)."""
from __future__ import annotations

import json
import os
from typing import IO, Any

from ..core.document import blind_json, data_json
from ..core.result import TraceResult
from .findings import findings, relative
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


def build_sarif(trace: TraceResult, *, srcroot: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    root = os.path.abspath(srcroot or os.getcwd())
    results = []
    for f in findings(trace, Context(srcroot=root)):
        s, loc = f.site, f.site.loc
        data = s.data
        result: dict[str, Any] = {
            "ruleId": RULE_ID,
            "level": f.level,
            "message": {"text": f.message},
            # The baseline's key (ci/fingerprint.py: module, the inline chain's functions and line
            # texts, an occurrence index): stable across rebuilds, runs and edits elsewhere, so
            # code scanning tracks one site as one alert, and no two sites as one.
            "partialFingerprints": {"ualdbgSite/v2": f.key},
            "properties": {"count": s.count, "pc": f"{s.pc:#x}", "module": loc.module_name, "offset": None if loc.offset is None else f"{loc.offset:#x}",
                           **({"classes": f.classes, "vector": s.vector} if f.classes else {}),
                           **({"data": data_json(data)} if data is not None else {}),
                           **({"advice": f.advice.to_json()} if f.advice else {})},
        }
        if loc.file and loc.line:
            path = loc.file
            if os.path.isabs(path):
                path = relative(path, root)
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
