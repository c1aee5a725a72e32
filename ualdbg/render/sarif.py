"""SARIF 2.1.0 for code scanning: one result per unaligned-access site, located by the DWARF
line of its PC, and the invocation: ualdbg's exit status, whether the run was whole (not
interrupted, nothing unseen), and a notification for each part it did not see (issue 29)."""
from __future__ import annotations

import os
from typing import Any

from ..ci.fingerprint import fingerprint, keyed_sites
from ..core.advice import advice_by_pc, vas_by_pc
from ..core.cost import INSIDE, SPLIT_LOCK

RULE_ID = "ualdbg/unaligned-access"


def invocation(doc: dict[str, Any], exit_code: int | None = None) -> dict[str, Any]:
    """How the run went, as SARIF's invocation object: `exitCode` (ualdbg's own status, when the
    caller knows it: `check`), `executionSuccessful` false for a partial run (interrupted) or an
    incomplete one (blind spots), each such part as a toolExecutionNotification, and the
    program's own end in properties."""
    prog: dict[str, Any] = doc["program"] if isinstance(doc.get("program"), dict) else {}
    spots = [b for b in doc.get("blind_spots") or [] if isinstance(b, dict)]
    partial = bool(doc.get("partial"))
    notes = []
    if partial:
        notes.append({"level": "warning", "descriptor": {"id": "ualdbg/partial-run"},
                      "message": {"text": f"interrupted by {doc.get('interrupted_by') or 'a signal'}: the trace is partial"}})
    for b in spots:
        notes.append({"level": "warning", "descriptor": {"id": f"ualdbg/blind-spot/{b.get('kind')}"},
                      "message": {"text": str(b.get("text") or b.get("kind"))},
                      "properties": {k: v for k, v in b.items() if k != "text"}})
    out: dict[str, Any] = {
        "executionSuccessful": not partial and not spots,
        "toolExecutionNotifications": notes,
        "properties": {"partial": partial, "incomplete": bool(spots), "blindSpots": len(spots),
                       "programExitStatus": prog.get("exit_status"), "programExitSignal": prog.get("exit_signal"),
                       "faultsTotal": doc.get("faults_total")},
    }
    if exit_code is not None:
        out["exitCode"] = exit_code
    return out


def sarif_level(classes: dict[str, Any] | None) -> str:
    """A site's level by what its accesses cost (issue 33): a split lock is an error, a line or
    page split (or a trap on a strict CPU, or a class not known) a warning, the rest (inside a
    line: almost free on x86) a note; a site without classes stays a warning, as before."""
    if not classes:
        return "warning"
    have = {c for c, n in classes.items() if n}
    if SPLIT_LOCK in have:
        return "error"
    return "note" if have <= {INSIDE} else "warning"


def _accesses(access: str | None, n: int) -> str:
    """`read`, `3 writes`' noun: `reads`, `read-writes`, `accesses` (not "reades")."""
    word = access or "access"
    return word if n == 1 else word + ("es" if word.endswith("ss") else "s")


def build_sarif(doc: dict[str, Any], *, srcroot: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    root = os.path.abspath(srcroot or os.getcwd())
    results = []
    advice = advice_by_pc(doc)
    keys = {id(k.site): k.key for k in keyed_sites(doc)}
    first_va = {pc: vas[0] for pc, vas in vas_by_pc(doc).items() if vas}
    for s in doc["sites"]:
        va = first_va.get(s["pc"])
        sizes = "/".join(str(x) for x in s["sizes"]) or "?"
        where = f"{s['function']}+{s['function_offset']}" if s.get("function") else (s.get("module") or s["pc"])
        text = (f"{s['count']} unaligned {sizes}-byte {_accesses(s['access'], s['count'])}"
                f" at PC {s['pc']} ({where})"
                + (f", e.g. virtual address {va}" if va else ""))
        data, fix = s.get("data"), advice.get(s["pc"])
        if data:  # what the data is and the fix that fits (issue 9)
            text += f". Data: {data.get('text') or 'unknown'}" + (f", via {data['via'].get('path')}" if data.get("via") else "")
        if fix:
            text += f". Fix ({fix.remedy}): {fix.text}"
        classes = s.get("classes") if isinstance(s.get("classes"), dict) else None
        if classes:  # what it costs on x86 (issue 33)
            text += ". Cost: " + ", ".join(f"{n} {c}" for c, n in classes.items()) + (" (vector)" if s.get("vector") else "")
        result: dict[str, Any] = {
            "ruleId": RULE_ID,
            "level": sarif_level(classes),
            "message": {"text": text},
            # The baseline's key (ci/fingerprint.py: module, the inline chain's functions and line
            # texts, an occurrence index): stable across rebuilds, runs and edits elsewhere, so
            # code scanning tracks one site as one alert, and no two sites as one.
            "partialFingerprints": {"ualdbgSite/v2": fingerprint(keys[id(s)])},
            "properties": {"count": s["count"], "pc": s["pc"], "module": s["module"], "offset": s["offset"],
                           **({"classes": classes, "vector": bool(s.get("vector"))} if classes else {}),
                           **({"data": s["data"]} if s.get("data") else {}), **({"advice": fix.to_json()} if fix else {})},
        }
        if s.get("file") and s.get("line"):
            path = s["file"]
            if os.path.isabs(path):
                rel = os.path.relpath(path, root)
                path = rel if not rel.startswith("..") else path
            uri = path if not os.path.isabs(path) else "file://" + path
            result["locations"] = [{
                "physicalLocation": {
                    "artifactLocation": {"uri": uri, **({"uriBaseId": "%SRCROOT%"} if not os.path.isabs(path) else {})},
                    "region": {"startLine": s["line"]},
                }
            }]
        results.append(result)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ualdbg",
                "version": doc.get("version", "0"),
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
            "invocations": [invocation(doc, exit_code)],
            "results": results,
        }],
    }
