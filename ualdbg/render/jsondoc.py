"""The versioned JSON document of a trace (ARCHITECTURE.md section 2): built from the
TraceResult every engine makes (core/result.py), read back for `ualdbg report`, grouped for
`--by line|function|module`."""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import IO, Any, Protocol, runtime_checkable

from ..ci.costfilter import absorb_json
from ..core.cost import classes_json
from ..core.result import Site, StepSummary, TraceResult

SCHEMA = 1


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def site_entry(site: Site) -> dict[str, Any]:
    loc = site.loc
    entry: dict[str, Any] = {
        "pc": _hex(loc.pc),
        "module": loc.module_name,
        "offset": _hex(loc.offset),
        "function": loc.function,
        "function_offset": _hex(loc.function_offset),
        "file": loc.file,
        "line": loc.line,
        "inlined_from": [{"function": f.function, "file": f.file, "line": f.line, **({"path": f.path} if f.path else {})}
                         for f in loc.inlined_from],
        "count": site.count,
        "sizes": sorted(site.sizes),
        "access": site.access.value if site.access else None,
    }
    if loc.path:  # optional key: the source file as the DWARF names it, absolute (ci/fingerprint.py reads it)
        entry["path"] = loc.path
    if site.data is not None:  # optional key (schema 1 stays compatible): what the first faulting VA is
        entry["data"] = site.data.to_json()
    if site.patched:  # the agent's hot-site patching (issue 21): optional keys too
        entry["patched"] = True
        entry["trapped"] = site.trapped
    if site.unpatchable is not None:
        entry["unpatchable"] = site.unpatchable
    if site.classes:  # what its accesses cost on x86 (issue 33): optional keys of schema 1
        entry["classes"] = classes_json(site.classes)
        entry["vector"] = site.vector
    return entry


def build_document(trace: TraceResult) -> dict[str, Any]:
    buf = trace.buffer
    prog = trace.program
    records = buf.table if buf.table is not None else [  # the agent's records are already a table
        {
            "seq": f.seq,
            "time": round(f.time, 6),
            "cpu": f.cpu,
            "pid": f.pid,
            "tid": f.tid,
            "pc": _hex(f.pc),
            "va": _hex(f.va),
            "size": f.size,
            "access": f.access.value if f.access else None,
            **({"class": f.cost} if f.cost is not None else {}),
        }
        for f in buf.records
    ]
    return {
        "schema": SCHEMA,
        "tool": "ualdbg",
        "version": trace.version,
        "engine": trace.engine,
        "debugger": trace.debugger,
        "arch": trace.arch,
        "program": {
            "path": prog.path,
            "args": list(prog.args),
            "pid": prog.pid,
            "exit_status": prog.exit_status,
            "exit_signal": prog.exit_signal,
        },
        "scope": trace.scope,
        "duration_s": round(buf.duration, 6),
        "faults_total": buf.total,
        "faults_ignored": buf.ignored,
        "ignored_by_module": dict(sorted(buf.ignored_by_module.items())),
        "buffer": {"capacity": buf.capacity, "recording": trace.recording},
        "sites": [site_entry(site) for site in trace.sites],
        "records": records,
        "records_dropped": trace.records_dropped,
        # What the engine knows it did not see (issue 29): an optional key of schema 1, always
        # written by this version (empty: nothing unseen that it knows of); docs/CI.md.
        "blind_spots": [b.to_json() for b in trace.blind_spots],
        **_step_section(trace.step),
    }


def _step_section(step: StepSummary | None) -> dict[str, Any]:
    """A debugger's step mode only (an optional key; schema 1 stays compatible): scope, policy
    and how many instructions were single-stepped, for the cost of a scope to be visible."""
    if step is None:
        return {}
    return {"step": {"scope": step.scope, "policy": step.policy, "steps": step.steps, "entries": step.entries,
                     "calls_run": step.calls_run}}


def load_document(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not a ualdbg JSON trace ({exc.msg} at line {exc.lineno})") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ValueError(f"{path} is not a ualdbg JSON trace ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("tool") != "ualdbg":
        raise ValueError(f"{path} is not a ualdbg JSON trace")
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} has schema {doc.get('schema')!r}; this ualdbg reads schema {SCHEMA}")
    problem = shape_problem(doc) or _data_problem(doc)
    if problem:
        raise ValueError(f"{path} is not a well-formed ualdbg JSON trace: {problem}")
    return doc


_DATA_STR = ("text", "kind", "path", "name", "type", "element_type", "container", "mapping", "member", "struct", "function")
_VIA_STR = ("path", "type", "pointer", "function", "struct", "member")


def _data_problem(doc: dict[str, Any]) -> str | None:
    """The optional `data` of each site (what the faulting address is): the fields the renderers
    and the fix advice read must have their types; the advice itself must be computable."""
    from ..core.advice import advise

    for i, site in enumerate(doc["sites"]):
        data = site.get("data")
        if data is None:
            continue
        via = data.get("via")
        if via is not None and not isinstance(via, dict):
            return f"sites[{i}].data.via is not an object"
        for obj, keys, where in ((data, _DATA_STR, "data"), (via or {}, _VIA_STR, "data.via")):
            for key in keys:
                if key in obj and not isinstance(obj[key], (str, type(None))):
                    return f"sites[{i}].{where}.{key} is not text"
            for key in ("size", "element_size", "target_align", "mapping_offset"):
                if key in obj and obj[key] is not None and (not isinstance(obj[key], int) or isinstance(obj[key], bool)):
                    return f"sites[{i}].{where}.{key} is not a number"
            for key in ("va", "start"):
                if key in obj and not (obj[key] is None or (isinstance(obj[key], str) and _hex_ok(obj[key]))):
                    return f"sites[{i}].{where}.{key} is not a hex address"
        if via and not all(isinstance(via.get(k), str) for k in ("path", "type", "pointer", "function")):
            return f"sites[{i}].data.via lacks its path, type, pointer or function"
        try:
            advise(site)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError):
            return f"sites[{i}].data has fields the fix advice cannot read"
    return None


_SITE_TYPES: dict[str, tuple[type, ...]] = {
    "pc": (str,), "module": (str, type(None)), "offset": (str, type(None)), "function": (str, type(None)),
    "function_offset": (str, type(None)), "file": (str, type(None)), "line": (int, type(None)), "count": (int,),
    "sizes": (list,), "access": (str, type(None)), "inlined_from": (list,),
}
# The optional keys of an inline frame, and a site's `path` (ci/fingerprint.py reads them).
_FRAME_TYPES: dict[str, tuple[type, ...]] = {
    "function": (str, type(None)), "file": (str, type(None)), "line": (int, type(None)), "path": (str, type(None)),
}
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "seq": (int,), "time": (int, float), "pc": (str,), "va": (str, type(None)), "size": (int, type(None)),
    "access": (str, type(None)), "tid": (int, type(None)), "pid": (int, type(None)), "cpu": (int, type(None)),
}


def _hex_ok(v: Any) -> bool:
    if v is None:
        return True
    try:
        int(v, 16)
        return True
    except (TypeError, ValueError):
        return False


_TOP_TYPES: dict[str, tuple[type, ...]] = {
    "version": (str,), "engine": (str, type(None)), "debugger": (str, type(None)), "arch": (str, type(None)),
    "scope": (str, type(None)), "duration_s": (int, float, type(None)), "records_dropped": (int,),
    "ignored_by_module": (dict,), "buffer": (dict,), "processes": (list,), "notes": (list,), "merged": (int,),
    "partial": (bool,), "interrupted_by": (str, type(None)), "runs": (list,), "step": (dict, type(None)),
    "agent": (dict, type(None)), "blind_spots": (list,),
}
_PROGRAM_TYPES: dict[str, tuple[type, ...]] = {
    "path": (str, type(None)), "args": (list,), "pid": (int, type(None)), "exit_status": (int, type(None)),
    "exit_signal": (int, type(None)),
}


def _typed(where: str, obj: dict[str, Any], types: dict[str, tuple[type, ...]]) -> str | None:
    for name, allowed in types.items():
        if name in obj:
            value = obj[name]
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                return f"{where}{name} has the wrong type"
    return None


def shape_problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with a schema-1 document's shape (None: renderers and merges can trust it)."""
    if not isinstance(doc.get("program"), dict):
        return "no program object"
    problem = _typed("", doc, _TOP_TYPES) or _typed("program.", doc["program"], _PROGRAM_TYPES)
    if problem:
        return problem
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
               for k, v in doc.get("ignored_by_module", {}).items()):
        return "ignored_by_module is not a table of counts"
    if not all(isinstance(p, dict) for p in doc.get("processes", [])) or not all(isinstance(n, str) for n in doc.get("notes", [])):
        return "processes or notes have the wrong shape"
    for i, p in enumerate(doc.get("processes", [])):
        problem = _typed(f"processes[{i}].", p, {**_PROGRAM_TYPES, "faults_total": (int,), "faults_ignored": (int,)})
        if problem:
            return problem
    if not all(isinstance(a, str) for a in doc["program"].get("args", [])):
        return "program.args are not strings"
    for key in ("faults_total", "faults_ignored"):
        if not isinstance(doc.get(key), int) or isinstance(doc.get(key), bool) or doc[key] < 0:
            return f"{key} is not a count"
    for key, types in (("sites", _SITE_TYPES), ("records", _RECORD_TYPES)):
        items = doc.get(key)
        if not isinstance(items, list):
            return f"{key} is not a list"
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                return f"{key}[{i}] is not an object"
            for name, allowed in types.items():
                if name in item and (not isinstance(item[name], allowed) or isinstance(item[name], bool)):
                    return f"{key}[{i}].{name} has the wrong type"
            for name in ("pc", "offset", "function_offset", "va"):
                if name in item and not _hex_ok(item[name]):
                    return f"{key}[{i}].{name} is not a hex address"
            missing = [name for name in types if name not in item]
            if missing:  # schema 1 has every one of them (ARCHITECTURE.md)
                return f"{key}[{i}] has no {', '.join(missing)}"
            if key == "sites":
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in item.get("sizes", [])):
                    return f"sites[{i}].sizes are not sizes"
                if not all(isinstance(f, dict) for f in item.get("inlined_from", [])):
                    return f"sites[{i}].inlined_from is not a list of frames"
                for j, frame in enumerate([item, *item.get("inlined_from", [])]):
                    where = f"sites[{i}]." + (f"inlined_from[{j - 1}]." if j else "")
                    problem = _typed(where, frame, _FRAME_TYPES if j else {"path": _FRAME_TYPES["path"]})
                    if problem:
                        return problem
                if "data" in item and not isinstance(item["data"], dict):
                    return f"sites[{i}].data is not an object"
                classes = item.get("classes", {})
                if not isinstance(classes, dict) or not all(
                        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                        for k, v in classes.items()):
                    return f"sites[{i}].classes is not a table of counts"
            elif "class" in item and not isinstance(item["class"], str):
                return f"records[{i}].class is not a cost class"
    if "records_dropped" in doc and not isinstance(doc["records_dropped"], int):
        return "records_dropped is not a count"
    problem = _sites_add_up(doc)
    if problem:
        return problem
    for i, b in enumerate(doc.get("blind_spots", [])):
        if not isinstance(b, dict) or not isinstance(b.get("kind"), str) or not isinstance(b.get("text"), str) \
                or not isinstance(b.get("count"), int) or isinstance(b.get("count"), bool):
            return f"blind_spots[{i}] is not a blind spot (kind, count, text)"
    return None


def _sites_add_up(doc: dict[str, Any]) -> str | None:
    """The invariant of every document ualdbg writes (issue 31): each fault in scope is counted
    at exactly one site, so the sites' counts add up to faults_total. Faults no site counts are
    outside it (a blind spot's `uncounted-faults` were never in faults_total); faults without a
    record are inside it (a patched site's count is exact, its records are not)."""
    counts = [s["count"] for s in doc["sites"]]
    if any(n < 0 for n in counts):
        return "a site has a negative count"
    if sum(counts) != doc["faults_total"]:
        return f"its sites count {sum(counts):,} faults but faults_total is {doc['faults_total']:,}"
    return None


_LONG_LISTS = ("records",)
_CHUNK = 16384  # records per write


@runtime_checkable
class JsonLines(Protocol):
    """A long list that writes its own JSON lines (ualdbg/engines/records.py: RecordTable)."""

    def __len__(self) -> int: ...
    def json_chunks(self, indent: str) -> Iterator[str]: ...


def _long(value: Any) -> bool:
    """A long list written one item per line: a list, or a table that writes its own lines."""
    return isinstance(value, (list, JsonLines))


def _lines(value: Any) -> Iterator[str]:
    """The items of a long list, each indented by 4 and on one line, joined by ",\n", in pieces
    (a table writes them itself: ualdbg/engines/records.py, RecordTable.json_chunks)."""
    if isinstance(value, JsonLines):
        yield from value.json_chunks("    ")
        return
    for lo in range(0, len(value), _CHUNK):
        text = ",\n".join("    " + json.dumps(item) for item in value[lo:lo + _CHUNK])
        yield text if lo == 0 else ",\n" + text


def write_text(doc: dict[str, Any], out: IO[str]) -> None:
    """Write the document as JSON text, indented by 2, with each record of a long list (the
    trace's records) on one line: the same JSON as json.dumps(doc, indent=2) means, written by
    the C encoder (or the record table's own writer) for the part that has one object per
    fault, and streamed: the records are never one string (json's indenting encoder is pure
    Python, ~20 us per record)."""
    lists = {key: doc[key] for key in _LONG_LISTS if _long(doc.get(key)) and len(doc[key])}
    empty: dict[str, list[Any]] = {key: [] for key in _LONG_LISTS if _long(doc.get(key)) and not len(doc[key])}
    if not lists:
        out.write(json.dumps({k: (empty[k] if k in empty else v) for k, v in doc.items()}, indent=2) + "\n")
        return
    marks = {key: json.dumps(f"@@ualdbg-{key}-{id(value)}@@") for key, value in lists.items()}
    text = json.dumps({k: (json.loads(marks[k]) if k in marks else empty[k] if k in empty else v)
                       for k, v in doc.items()}, indent=2)
    at = {key: text.index(mark) for key, mark in marks.items()}
    pos = 0
    for key in sorted(lists, key=at.__getitem__):
        out.write(text[pos:at[key]])
        out.write("[\n")
        for piece in _lines(lists[key]):
            out.write(piece)
        out.write("\n  ]")
        pos = at[key] + len(marks[key])
    out.write(text[pos:] + "\n")


def to_text(doc: dict[str, Any]) -> str:
    """The document as write_text writes it, as one string."""
    out = io.StringIO()
    write_text(doc, out)
    return out.getvalue()


def dump(doc: dict[str, Any], path: str) -> None:
    if path == "-":
        import sys

        write_text(doc, sys.stdout)
        sys.stdout.flush()
        return
    from ..core.files import write_atomic

    write_atomic(path, lambda f: write_text(doc, f))  # whole or not at all, never through a planted link


GROUPS = ("pc", "line", "function", "module")


def group_sites(sites: list[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """Aggregate per-PC sites by line, function or module (counts add, sizes union)."""
    if by == "pc":
        return sites

    def key(s: dict[str, Any]) -> tuple[Any, ...]:
        if by == "line":
            return (s["module"], s["file"], s["line"]) if s["line"] else (s["module"], s["pc"])
        if by == "function":
            return (s["module"], s["function"] or s["pc"])
        return (s["module"],)

    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in sites:
        k = key(s)
        g = groups.get(k)
        if g is None:
            g = groups[k] = dict(s, pcs=[s["pc"]], sizes=list(s["sizes"]))
            continue
        g["count"] += s["count"]
        absorb_json(g, s)
        g["pcs"].append(s["pc"])
        g["sizes"] = sorted(set(g["sizes"]) | set(s["sizes"]))
        if g["access"] != s["access"]:
            g["access"] = "read-write" if g["access"] and s["access"] else (g["access"] or s["access"])
    return sorted(groups.values(), key=lambda g: -g["count"])
