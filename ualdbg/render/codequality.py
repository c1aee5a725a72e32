"""The `gitlab` format (render/formats.py): GitLab's Code Quality report
(`artifacts:reports:codequality`), the subset of Code Climate's issue format GitLab reads: one
issue per site with its description, check name, fingerprint (GitLab tells new from fixed issues
by it between a merge request and its target), severity and location."""
from __future__ import annotations

import json
from typing import IO, Any

from ..core.result import TraceResult
from .findings import findings
from .formats import Context

# SARIF's levels on GitLab's scale (info, minor, major, critical, blocker).
SEVERITY = {"error": "critical", "warning": "major", "note": "minor"}


def build_codequality(result: TraceResult, context: Context) -> list[dict[str, Any]]:
    issues = []
    for f in findings(result, context):
        # GitLab needs a relative path: a site without a source line is placed at its module, line 1.
        path, line = (f.path, f.line) if f.path and f.line and not f.path.startswith("/") else (f.module, 1)
        issues.append({
            "type": "issue",
            "check_name": "ualdbg/unaligned-access",
            "description": f.message,
            "categories": ["Performance", "Bug Risk"],
            "fingerprint": f.key,
            "severity": SEVERITY[f.level],
            "location": {"path": path, "lines": {"begin": line}},
        })
    return issues


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    out.write(json.dumps(build_codequality(result, context), indent=2) + "\n")
