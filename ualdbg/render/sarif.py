"""SARIF 2.1.0 for code scanning: one result per unaligned-access site, located by the DWARF
line of its PC."""
from __future__ import annotations

import os
from typing import Any

from ..ci.baseline import fingerprint, module_paths, site_key
from ..core.advice import advice_by_pc, vas_by_pc

RULE_ID = "ualdbg/unaligned-access"


def build_sarif(doc: dict[str, Any], *, srcroot: str | None = None) -> dict[str, Any]:
    root = os.path.abspath(srcroot or os.getcwd())
    results = []
    advice = advice_by_pc(doc)
    paths, arch = module_paths(doc), str(doc.get("arch") or "x86_64")
    first_va = {pc: vas[0] for pc, vas in vas_by_pc(doc).items() if vas}
    for s in doc["sites"]:
        va = first_va.get(s["pc"])
        sizes = "/".join(str(x) for x in s["sizes"]) or "?"
        where = f"{s['function']}+{s['function_offset']}" if s.get("function") else (s.get("module") or s["pc"])
        text = (f"{s['count']} unaligned {sizes}-byte {s['access'] or 'access'}"
                f"{'es' if s['count'] != 1 else ''} at PC {s['pc']} ({where})"
                + (f", e.g. virtual address {va}" if va else ""))
        data, fix = s.get("data"), advice.get(s["pc"])
        if data:  # what the data is and the fix that fits (issue 9)
            text += f". Data: {data.get('text') or 'unknown'}" + (f", via {data['via'].get('path')}" if data.get("via") else "")
        if fix:
            text += f". Fix ({fix.remedy}): {fix.text}"
        result: dict[str, Any] = {
            "ruleId": RULE_ID,
            "level": "warning",
            "message": {"text": text},
            # The baseline's key (module, function, line; or the instruction's bytes): stable across
            # rebuilds and runs, so code scanning tracks one site as one alert.
            "partialFingerprints": {"ualdbgSite/v1": fingerprint(site_key(s, paths, arch))},
            "properties": {"count": s["count"], "pc": s["pc"], "module": s["module"], "offset": s["offset"],
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
            "results": results,
        }],
    }
