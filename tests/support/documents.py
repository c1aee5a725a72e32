"""The trace document's round trip (issue 30): every JSON trace a test leaves in its tmp_path is
read into a TraceResult and built back, and must come back as the same text (the same keys, in
the same order, with the same values). Documents that ualdbg refuses (a test's bad input) are
not traces ualdbg wrote, and are left alone."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ualdbg.core.document import DocumentError, build_document, load_document

LARGEST = 64 << 20  # bytes: larger files are a benchmark's, not a document a test checks


def is_trace(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("tool") == "ualdbg" and "faults_total" in doc and "sites" in doc


def round_trip_problem(doc: dict[str, Any]) -> str | None:
    """What differs between a document and build_document(load_document(it)); None: nothing.
    DocumentError for a document ualdbg cannot read."""
    again = build_document(load_document(doc))
    if json.dumps(again) == json.dumps(doc):
        return None
    keys = [k for k in {*doc, *again} if json.dumps(doc.get(k)) != json.dumps(again.get(k))]
    if not keys and list(doc) != list(again):
        return f"the keys come in another order: {list(doc)} != {list(again)}"
    return "; ".join(f"{k}: {json.dumps(doc.get(k))[:300]} != {json.dumps(again.get(k))[:300]}" for k in sorted(keys))


def check_folder(folder: Path) -> list[str]:
    """The round-trip problems of the traces under `folder`, one line per document."""
    problems = []
    for path in sorted(folder.rglob("*.json")):
        try:
            if not path.is_file() or path.stat().st_size > LARGEST:
                continue
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):  # a hostile input a test made (a 100,000-deep array)
            continue
        if not is_trace(doc):
            continue
        try:
            problem = round_trip_problem(doc)
        except DocumentError:
            continue  # a bad input a test made on purpose
        if problem:
            problems.append(f"{path}: {problem}")
    return problems
