"""The versioned JSON document of a trace, schema 1 (docs/ARCHITECTURE.md; its keys in docs/CI.md):
the one picture of core/result.py's TraceResult, and the only module that knows its keys. Two
doors: `build_document` (TraceResult -> JSON) and `load_document` (JSON -> TraceResult), which
checks the shape first (`shape_problem`) and then what must hold between the figures
(`invariant_problem`); `write_document` writes the JSON as text. No other function of ualdbg
takes the document as a dict (tests/unit/test_document_doors.py)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import IO, Any, Protocol, runtime_checkable

from .cost import classes_json
from .dataref import DataRef, Touched, Via
from .errors import UaldbgError
from .model import AccessKind, InlineFrame, SourceLoc
from .result import BlindSpot, ProgramInfo, Record, Run, Site, TraceResult
from .sections import (
    AgentSummary,
    AttachState,
    NativeStep,
    OutOfScope,
    Patching,
    Process,
    SteppedScope,
    StepSummary,
)

SCHEMA = 1
Document = dict[str, Any]  # the JSON document of a trace, as json.load gives it


class DocumentError(UaldbgError, ValueError):
    """A document ualdbg cannot read: one line saying what is wrong with it."""


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def _int(v: str | None) -> int | None:
    return None if v is None else int(v, 16)


# -- TraceResult -> JSON ------------------------------------------------------------------------


@runtime_checkable
class JsonLines(Protocol):
    """Records that write their own JSON lines (engines/records.py: RecordTable): the document
    holds them as they are, and write_document streams them."""

    def __len__(self) -> int: ...
    def json_chunks(self, indent: str) -> Iterator[str]: ...


def build_document(result: TraceResult) -> Document:
    """The document of a trace. Its keys come in one order: the counts, the sites and records, the
    blind spots, then the sections the run has (step, processes, agent, notes, partial, attached),
    a merge's own last (ci/merge.py: sites, records, processes, runs, merged). The notes of a
    debugger's run, which an attach adds, follow `attached`."""
    doc: Document = {
        "schema": SCHEMA,
        "tool": "ualdbg",
        "version": result.version,
        "engine": result.engine,
        "debugger": result.debugger,
        "arch": result.arch,
        "program": _program_json(result.program),
        "scope": result.scope,
        "duration_s": result.duration,
        "faults_total": result.faults_total,
        "faults_ignored": result.faults_ignored,
        "ignored_by_module": dict(result.ignored_by_module),
        "buffer": {"capacity": result.capacity, "recording": result.recording},
        "sites": [site_json(s) for s in result.sites],
        "records": result.records if isinstance(result.records, JsonLines) else [record_json(r) for r in result.records],
        "records_dropped": result.records_dropped,
        # What the engine knows it did not see (issue 29): an optional key of schema 1, always
        # written by this version (empty: nothing unseen that it knows of); docs/CI.md.
        "blind_spots": [blind_json(b) for b in result.blind_spots],
    }
    if result.step is not None:  # optional keys (schema 1 stays compatible) from here on
        doc["step"] = _step_json(result.step)
    if result.processes is not None:
        doc["processes"] = [_process_json(p) for p in result.processes]
    if result.agent is not None:
        doc["agent"] = _agent_json(result.agent)
    engine_notes = result.agent is not None or result.step is not None
    if result.notes is not None and engine_notes:
        doc["notes"] = list(result.notes)
    if result.partial:
        doc["partial"], doc["interrupted_by"] = True, result.interrupted_by
    if result.attached is not None:
        doc["attached"] = _attached_json(result.attached)
    if result.notes is not None and not engine_notes:
        doc["notes"] = list(result.notes)
    if result.merged is not None:
        for key in ("sites", "records", "processes"):
            doc[key] = doc.pop(key, [])
        doc["runs"] = [{"file": r.file, "program": _program_json(r.program), "engine": r.engine,
                        "faults_total": r.faults_total, "duration_s": r.duration} for r in result.runs or []]
        doc["merged"] = result.merged
    if result.fail_on is not None:  # report --fail-on: the classes this document keeps (ci/costfilter.py)
        doc["fail_on"] = result.fail_on
    return doc


def _program_json(p: ProgramInfo) -> dict[str, Any]:
    return {"path": p.path, "args": list(p.args), "pid": p.pid, "exit_status": p.exit_status, "exit_signal": p.exit_signal}


def site_json(site: Site) -> dict[str, Any]:
    """One site of the document (the baseline and SARIF name sites by these fields too)."""
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
        entry["data"] = data_json(site.data)
    if site.patched:  # the agent's hot-site patching (issue 21): optional keys too
        entry["patched"] = True
        entry["trapped"] = site.trapped
    if site.unpatchable is not None:
        entry["unpatchable"] = site.unpatchable
    if site.classes:  # what its accesses cost on x86 (issue 33): optional keys of schema 1
        entry["classes"] = classes_json(site.classes)
        entry["vector"] = site.vector
    return entry


def data_json(data: DataRef) -> dict[str, Any]:
    """A site's `data`: the fields that are set, addresses in hex, the VA and the pointer last."""
    out: dict[str, Any] = {}
    for f in fields(data):
        value = getattr(data, f.name)
        if value is None or f.name in ("via", "va") or (f.name == "packed" and not value):
            continue
        out[f.name] = f"{value:#x}" if f.name == "start" else asdict(value) if f.name == "touched" else value
    out["va"] = f"{data.va:#x}"
    if data.via is not None:
        out["via"] = {f.name: getattr(data.via, f.name) for f in fields(data.via)
                      if getattr(data.via, f.name) is not None and getattr(data.via, f.name) is not False}
    return out


def record_json(r: Record) -> dict[str, Any]:
    """One record of the document (engines/records.py's C writer writes the same text)."""
    out = {"seq": r.seq, "time": r.time, "cpu": r.cpu, "pid": r.pid, "tid": r.tid, "pc": f"{r.pc:#x}",
           "va": None if r.va is None else f"{r.va:#x}", "size": r.size, "access": r.access.value if r.access else None}
    if r.cost is not None:  # its cost class (issue 33): an optional key of schema 1
        out["class"] = r.cost
    if r.run is not None:
        out["run"] = r.run
    return out


def blind_json(b: BlindSpot) -> dict[str, Any]:
    """One blind spot of the document (SARIF's notifications carry the same fields)."""
    out: dict[str, Any] = {"kind": b.kind, "count": b.count, "text": b.text}
    for key in ("threads", "seconds", "pid", "path", "run"):
        value = getattr(b, key)
        if value is not None:
            out[key] = round(value, 6) if isinstance(value, float) else value
    return out


def _step_json(step: StepSummary | NativeStep) -> dict[str, Any]:
    if isinstance(step, StepSummary):
        return {"scope": step.scope, "policy": step.policy, "steps": step.steps, "entries": step.entries,
                "calls_run": step.calls_run}
    scope = step.scope
    return {"scope": {"kind": scope.kind, "label": scope.label, "ranges": [[f"{lo:#x}", f"{hi:#x}"] for lo, hi in scope.ranges],
                      "entries": scope.entries},
            "policy": step.policy, "armed_at": step.armed_at, "tracer_cpu": step.tracer_cpu,
            "seconds_in_scope": step.seconds_in_scope, "instructions_stepped": step.instructions_stepped,
            "scope_entries": step.scope_entries, "unmodelled_executions": step.unmodelled_executions,
            "decoded_on_demand": step.decoded_on_demand, "int3_steps_displaced": step.int3_steps_displaced,
            "int3_steps_stopping_others": step.int3_steps_stopping_others}


def _process_json(p: Process) -> dict[str, Any]:
    out = {"pid": p.pid, "ppid": p.ppid, "image": p.image, "path": p.path, "args": list(p.args),
           "faults_total": p.faults_total, "faults_ignored": p.faults_ignored, "armed": p.armed, "end": p.end,
           "note": p.note}
    if p.run is not None:
        out["run"] = p.run
    return out


def _agent_json(a: AgentSummary) -> dict[str, Any]:
    oos, patch = a.out_of_scope, a.patching
    out: dict[str, Any] = {
        "library": a.library,
        "environment_added": dict(a.environment_added),
        "follow_children": a.follow_children,
        "armed_at": a.armed_at,
        "out_of_scope": {"traps": oos.traps, "routine_calls_run_unarmed": oos.routine_calls_run_unarmed,
                         "skipping": oos.skipping},
        "emulated": a.emulated,
        "single_stepped": a.single_stepped,
        "threads": a.threads,
        "threads_started_with_sigbus_blocked": a.threads_started_with_sigbus_blocked,
        "sites_dropped": a.sites_dropped,
        "patching": {"after_traps": patch.after_traps, "sites_patched": patch.sites_patched,
                     "faults_counted_by_patches": patch.faults_counted_by_patches,
                     "unpatchable": dict(patch.unpatchable),
                     "faults_in_scope_without_record": patch.faults_in_scope_without_record},
    }
    if patch.note is not None:
        out["patching"]["note"] = patch.note
    if patch.code_maps is not None:
        out["patching"]["code_maps"] = dict(patch.code_maps)
    if a.injected:
        out["injected"] = True
    return out


def _attached_json(a: AttachState) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": a.pid, "detached": a.detached, "ended_by": a.ended_by, "engine": a.engine}
    if a.engine == "agent":
        out.update(threads_armed=a.threads_armed, agent_left=a.agent_left, stopped_s=dict(a.stopped_s))
    return out


# -- JSON -> text -------------------------------------------------------------------------------

_LONG_LISTS = ("records",)
_CHUNK = 16384  # records per write


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


def write_document(doc: Document, out: IO[str]) -> None:
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


# -- JSON -> TraceResult ------------------------------------------------------------------------


def read_document(path: str) -> TraceResult:
    """The trace a JSON file holds (`ualdbg report`, a batch debugger's output). DocumentError:
    one line saying why it cannot be read."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise DocumentError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path} is not a ualdbg JSON trace ({exc.msg} at line {exc.lineno})") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise DocumentError(f"{path} is not a ualdbg JSON trace ({type(exc).__name__})") from None
    return load_document(doc, path)


def load_document(doc: Document, name: str = "the document") -> TraceResult:
    """The TraceResult a document pictures; DocumentError (one line naming `name`) for anything
    that is not a well-formed schema-1 trace."""
    if not isinstance(doc, dict) or doc.get("tool") != "ualdbg":
        raise DocumentError(f"{name} is not a ualdbg JSON trace")
    if doc.get("schema") != SCHEMA:
        raise DocumentError(f"{name} has schema {doc.get('schema')!r}; this ualdbg reads schema {SCHEMA}")
    problem = shape_problem(doc)
    if problem:
        raise DocumentError(f"{name} is not a well-formed ualdbg JSON trace: {problem}")
    buffer = doc.get("buffer") or {}
    step = doc.get("step")
    result = TraceResult(
        engine=doc.get("engine"), debugger=doc.get("debugger"), arch=doc.get("arch"), version=doc.get("version", ""),
        program=_program(doc["program"]), scope=doc.get("scope"), duration=doc.get("duration_s"),
        faults_total=doc["faults_total"], faults_ignored=doc["faults_ignored"],
        ignored_by_module=dict(doc.get("ignored_by_module", {})), capacity=buffer.get("capacity"),
        recording=bool(buffer.get("recording", False)), sites=[_site(s) for s in doc["sites"]],
        records=[_record(r) for r in doc["records"]], records_dropped=doc.get("records_dropped", 0),
        blind_spots=[_blind(b) for b in doc.get("blind_spots", [])],
        step=None if step is None else _step(step),
        processes=None if "processes" not in doc else [_process(p) for p in doc["processes"]],
        agent=None if doc.get("agent") is None else _agent(doc["agent"]),
        notes=None if "notes" not in doc else list(doc["notes"]),
        partial=bool(doc.get("partial")), interrupted_by=doc.get("interrupted_by"),
        attached=None if doc.get("attached") is None else _attached(doc["attached"]),
        runs=None if "runs" not in doc else [_run(r) for r in doc["runs"]], merged=doc.get("merged"),
        fail_on=doc.get("fail_on"))
    problem = invariant_problem(result)
    if problem:
        raise DocumentError(f"{name} is not a well-formed ualdbg JSON trace: {problem}")
    return result


def invariant_problem(result: TraceResult) -> str | None:
    """What does not add up in a trace whose shape is right (None: nothing). The place for
    what must hold between its figures. Each fault in scope is counted at exactly one site (issue
    31), so the sites' counts add up to faults_total. Faults no site counts are outside it (a blind
    spot's `uncounted-faults` were never in faults_total); faults without a record are inside it
    (a patched site's count is exact, its records are not)."""
    counts = [s.count for s in result.sites]
    if any(n < 0 for n in counts):
        return "a site has a negative count"
    if sum(counts) != result.faults_total:
        return f"its sites count {sum(counts):,} faults but faults_total is {result.faults_total:,}"
    return None


def _program(p: dict[str, Any]) -> ProgramInfo:
    return ProgramInfo(p.get("path"), list(p.get("args", [])), p.get("pid"), p.get("exit_status"), p.get("exit_signal"))


def _site(s: dict[str, Any]) -> Site:
    frames = tuple(InlineFrame(f.get("function") or "?", f.get("file"), f.get("line"), f.get("path"))
                   for f in s["inlined_from"])
    loc = SourceLoc(pc=int(s["pc"], 16), module=s["module"], offset=_int(s["offset"]), function=s["function"],
                    function_offset=_int(s["function_offset"]), file=s["file"], line=s["line"], inlined_from=frames,
                    path=s.get("path"))
    return Site(loc, s["count"], set(s["sizes"]), None if s["access"] is None else AccessKind(s["access"]),
                None if s.get("data") is None else _data(s["data"]), bool(s.get("patched", False)), s.get("trapped"),
                s.get("unpatchable"), dict(s.get("classes", {})), bool(s.get("vector", False)))


_DATA_FIELDS = {f.name for f in fields(DataRef)} - {"via", "va", "start", "touched"}
_VIA_FIELDS = {f.name for f in fields(Via)}


def _data(d: dict[str, Any]) -> DataRef:
    via = d.get("via")
    touched = d.get("touched")
    return DataRef(**{k: v for k, v in d.items() if k in _DATA_FIELDS}, va=int(d["va"], 16), start=_int(d.get("start")),
                   touched=None if touched is None else Touched(**{k: touched[k] for k in _TOUCHED_TYPES}),
                   via=None if via is None else Via(**{k: v for k, v in via.items() if k in _VIA_FIELDS}))


def _record(r: dict[str, Any]) -> Record:
    return Record(r["seq"], r["time"], r["cpu"], r["pid"], r["tid"], int(r["pc"], 16), _int(r["va"]), r["size"],
                  None if r["access"] is None else AccessKind(r["access"]), r.get("run"), r.get("class"))


def _blind(b: dict[str, Any]) -> BlindSpot:
    return BlindSpot(b["kind"], b["text"], b["count"], b.get("threads"), b.get("seconds"), b.get("pid"), b.get("path"),
                     b.get("run"))


def _step(s: dict[str, Any]) -> StepSummary | NativeStep:
    scope = s.get("scope")
    if not isinstance(scope, dict):
        return StepSummary(scope or "", s.get("policy", ""), s.get("steps", 0), s.get("entries", 0), s.get("calls_run", 0))
    return NativeStep(
        SteppedScope(scope.get("kind", ""), scope.get("label", ""),
                  tuple((int(lo, 16), int(hi, 16)) for lo, hi in scope.get("ranges", [])), scope.get("entries", 0)),
        s.get("policy", ""), s.get("armed_at", ""), s.get("tracer_cpu"), s.get("seconds_in_scope", 0.0),
        s.get("instructions_stepped", 0), s.get("scope_entries", 0), s.get("unmodelled_executions", 0),
        s.get("decoded_on_demand", 0), s.get("int3_steps_displaced", 0), s.get("int3_steps_stopping_others", 0))


def _process(p: dict[str, Any]) -> Process:
    return Process(p.get("pid"), p.get("ppid"), p.get("image"), p.get("path"), list(p.get("args", [])),
                   p.get("faults_total", 0), p.get("faults_ignored", 0), p.get("armed"), p.get("end"), p.get("note"),
                   p.get("run"))


def _agent(a: dict[str, Any]) -> AgentSummary:
    oos, patch = a.get("out_of_scope") or {}, a.get("patching") or {}
    return AgentSummary(
        library=a.get("library", ""), environment_added=dict(a.get("environment_added", {})),
        follow_children=a.get("follow_children", True), armed_at=a.get("armed_at", "main"),
        out_of_scope=OutOfScope(oos.get("traps", 0), oos.get("routine_calls_run_unarmed", 0), oos.get("skipping", False)),
        emulated=a.get("emulated", 0), single_stepped=a.get("single_stepped", 0), threads=a.get("threads", 0),
        threads_started_with_sigbus_blocked=a.get("threads_started_with_sigbus_blocked", 0),
        sites_dropped=a.get("sites_dropped", 0),
        patching=Patching(patch.get("after_traps", 0), patch.get("sites_patched", 0),
                          patch.get("faults_counted_by_patches", 0), dict(patch.get("unpatchable", {})),
                          patch.get("faults_in_scope_without_record", 0), patch.get("note"),
                          _counts(patch["code_maps"]) if "code_maps" in patch else None),
        injected=bool(a.get("injected", False)))


def _counts(d: dict[str, Any]) -> dict[str, int]:
    """The integer entries of a document's dict of counts (others are not counts: left out)."""
    return {str(k): v for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)}


def _attached(a: dict[str, Any]) -> AttachState:
    return AttachState(a["pid"], a["detached"], a.get("ended_by"), a.get("engine", ""), a.get("threads_armed"),
                       a.get("agent_left"), dict(a.get("stopped_s", {})))


def _run(r: dict[str, Any]) -> Run:
    return Run(r.get("file", ""), _program(r.get("program") or {}), r.get("engine"), r.get("faults_total", 0),
               r.get("duration_s"))


# -- the shape ----------------------------------------------------------------------------------

_DATA_STR = ("text", "kind", "path", "name", "type", "element_type", "container", "mapping", "member", "struct",
             "function", "module", "file", "storage")
_TOUCHED_TYPES: dict[str, tuple[type, ...]] = {
    "first": (str,), "last": (str,), "low": (str,), "high": (str,), "distinct": (int,), "records": (int,),
}
_DATA_INT = ("size", "element_size", "target_align", "mapping_offset", "offset", "line", "tid", "frame",
             "member_offset", "member_align")
_VIA_STR = ("path", "type", "pointer", "function", "struct", "member")
_N = (int, float)
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
    "seq": (int,), "time": _N, "pc": (str,), "va": (str, type(None)), "size": (int, type(None)),
    "access": (str, type(None)), "tid": (int, type(None)), "pid": (int, type(None)), "cpu": (int, type(None)),
}
_TOP_TYPES: dict[str, tuple[type, ...]] = {
    "version": (str,), "engine": (str, type(None)), "debugger": (str, type(None)), "arch": (str, type(None)),
    "scope": (str, type(None)), "duration_s": (*_N, type(None)), "records_dropped": (int,),
    "ignored_by_module": (dict,), "buffer": (dict,), "processes": (list,), "notes": (list,), "merged": (int,),
    "partial": (bool,), "interrupted_by": (str, type(None)), "runs": (list,), "step": (dict, type(None)),
    "agent": (dict, type(None)), "blind_spots": (list,), "attached": (dict, type(None)), "fail_on": (str,),
}
_PROGRAM_TYPES: dict[str, tuple[type, ...]] = {
    "path": (str, type(None)), "args": (list,), "pid": (int, type(None)), "exit_status": (int, type(None)),
    "exit_signal": (int, type(None)),
}
_PROCESS_TYPES: dict[str, tuple[type, ...]] = {
    **_PROGRAM_TYPES, "faults_total": (int,), "faults_ignored": (int,), "ppid": (int, type(None)),
    "image": (int, type(None)), "armed": (bool, type(None)), "end": (str, type(None)), "note": (str, type(None)),
    "run": (int, type(None)),
}
_BLIND_TYPES: dict[str, tuple[type, ...]] = {
    "threads": (int, type(None)), "seconds": (*_N, type(None)), "pid": (int, type(None)), "path": (str, type(None)),
    "run": (int, type(None)),
}
_BUFFER_TYPES: dict[str, tuple[type, ...]] = {"capacity": (int, type(None)), "recording": (bool,)}
_STEP_TYPES: dict[str, tuple[type, ...]] = {
    "scope": (str, dict), "policy": (str,), "steps": (int,), "entries": (int,), "calls_run": (int,),
    "armed_at": (str,), "tracer_cpu": (int, type(None)), "seconds_in_scope": _N, "instructions_stepped": (int,),
    "scope_entries": (int,), "unmodelled_executions": (int,), "decoded_on_demand": (int,),
    "int3_steps_displaced": (int,), "int3_steps_stopping_others": (int,),
}
_STEP_SCOPE_TYPES: dict[str, tuple[type, ...]] = {"kind": (str,), "label": (str,), "ranges": (list,), "entries": (int,)}
_AGENT_TYPES: dict[str, tuple[type, ...]] = {
    "library": (str,), "environment_added": (dict,), "follow_children": (bool,), "armed_at": (str,),
    "out_of_scope": (dict,), "emulated": (int,), "single_stepped": (int,), "threads": (int,),
    "threads_started_with_sigbus_blocked": (int,), "sites_dropped": (int,), "patching": (dict,), "injected": (bool,),
}
_OUT_OF_SCOPE_TYPES: dict[str, tuple[type, ...]] = {"traps": (int,), "routine_calls_run_unarmed": (int,), "skipping": (bool,)}
_PATCHING_TYPES: dict[str, tuple[type, ...]] = {
    "after_traps": (int,), "sites_patched": (int,), "faults_counted_by_patches": (int,), "unpatchable": (dict,),
    "faults_in_scope_without_record": (int,), "note": (str,), "code_maps": (dict,),
}
_ATTACHED_TYPES: dict[str, tuple[type, ...]] = {
    "pid": (int,), "detached": (bool,), "ended_by": (str, type(None)), "engine": (str,),
    "threads_armed": (int, type(None)), "agent_left": (str, type(None)), "stopped_s": (dict,),
}
_RUN_TYPES: dict[str, tuple[type, ...]] = {
    "file": (str,), "program": (dict,), "engine": (str, type(None)), "faults_total": (int,), "duration_s": (*_N, type(None)),
}
_ACCESSES = {a.value for a in AccessKind}


def _hex_ok(v: Any) -> bool:
    if v is None:
        return True
    try:
        int(v, 16)
        return True
    except (TypeError, ValueError):
        return False


def _typed(where: str, obj: dict[str, Any], types: dict[str, tuple[type, ...]]) -> str | None:
    for name, allowed in types.items():
        if name in obj:
            value = obj[name]
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                return f"{where}{name} has the wrong type"
    return None


def _table(where: str, obj: Any, value_type: type | tuple[type, ...]) -> str | None:
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, value_type) and not isinstance(v, bool)
                                            for k, v in obj.items()):
        return f"{where} is not a table"
    return None


def shape_problem(doc: Document) -> str | None:
    """What is wrong with a schema-1 document's shape (None: load_document can read every field
    it has, and the renderers, the advice and the merge can trust them)."""
    if not isinstance(doc.get("program"), dict):
        return "no program object"
    problem = (_typed("", doc, _TOP_TYPES) or _typed("program.", doc["program"], _PROGRAM_TYPES)
               or _typed("buffer.", doc.get("buffer", {}), _BUFFER_TYPES))
    if problem:
        return problem
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
               for k, v in doc.get("ignored_by_module", {}).items()):
        return "ignored_by_module is not a table of counts"
    if not all(isinstance(p, dict) for p in doc.get("processes", [])) or not all(isinstance(n, str) for n in doc.get("notes", [])):
        return "processes or notes have the wrong shape"
    for i, p in enumerate(doc.get("processes", [])):
        problem = _typed(f"processes[{i}].", p, _PROCESS_TYPES) or _strings(f"processes[{i}].args", p.get("args", []))
        if problem:
            return problem
    if not all(isinstance(a, str) for a in doc["program"].get("args", [])):
        return "program.args are not strings"
    for key in ("faults_total", "faults_ignored"):
        if not isinstance(doc.get(key), int) or isinstance(doc.get(key), bool) or doc[key] < 0:
            return f"{key} is not a count"
    for key, types in (("sites", _SITE_TYPES), ("records", _RECORD_TYPES)):
        problem = _items_problem(key, doc.get(key), types)
        if problem:
            return problem
    if "records_dropped" in doc and not isinstance(doc["records_dropped"], int):
        return "records_dropped is not a count"
    for i, b in enumerate(doc.get("blind_spots", [])):
        if not isinstance(b, dict) or not isinstance(b.get("kind"), str) or not isinstance(b.get("text"), str) \
                or not isinstance(b.get("count"), int) or isinstance(b.get("count"), bool):
            return f"blind_spots[{i}] is not a blind spot (kind, count, text)"
        problem = _typed(f"blind_spots[{i}].", b, _BLIND_TYPES)
        if problem:
            return problem
    return _sections_problem(doc.get("step"), doc.get("agent"), doc.get("attached"), doc.get("runs", []))


def _strings(where: str, items: list[Any]) -> str | None:
    return None if all(isinstance(a, str) for a in items) else f"{where} are not strings"


def _items_problem(key: str, items: Any, types: dict[str, tuple[type, ...]]) -> str | None:
    """The sites or the records: every one an object with every key of schema 1, typed."""
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
        if item["access"] is not None and item["access"] not in _ACCESSES:
            return f"{key}[{i}].access is not read, write or read-write"
        problem = (_site_problem(i, item) if key == "sites"
                   else _typed(f"records[{i}].", item, {"run": (int, type(None))}) or _record_class_problem(i, item))
        if problem:
            return problem
    return None


def _record_class_problem(i: int, item: dict[str, Any]) -> str | None:
    return f"records[{i}].class is not a cost class" if "class" in item and not isinstance(item["class"], str) else None


def _site_problem(i: int, item: dict[str, Any]) -> str | None:
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in item.get("sizes", [])):
        return f"sites[{i}].sizes are not sizes"
    if not all(isinstance(f, dict) for f in item.get("inlined_from", [])):
        return f"sites[{i}].inlined_from is not a list of frames"
    problem = _typed(f"sites[{i}].", item, {"patched": (bool,), "trapped": (int, type(None)),
                                             "unpatchable": (str, type(None)), "vector": (bool,)})
    if problem:
        return problem
    for j, frame in enumerate([item, *item.get("inlined_from", [])]):
        where = f"sites[{i}]." + (f"inlined_from[{j - 1}]." if j else "")
        problem = _typed(where, frame, _FRAME_TYPES if j else {"path": _FRAME_TYPES["path"]})
        if problem:
            return problem
    classes = item.get("classes", {})
    if not isinstance(classes, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                and v >= 0 for k, v in classes.items()):
        return f"sites[{i}].classes is not a table of counts"
    if "data" in item and item["data"] is not None:
        if not isinstance(item["data"], dict):
            return f"sites[{i}].data is not an object"
        return _data_problem(f"sites[{i}].data", item["data"])
    return None


def _data_problem(where: str, data: dict[str, Any]) -> str | None:
    """A site's `data` (what the faulting address is): the fields the renderers, the fix advice
    and the audit read must have their types."""
    via = data.get("via")
    if via is not None and not isinstance(via, dict):
        return f"{where}.via is not an object"
    for obj, keys, at in ((data, _DATA_STR, where), (via or {}, _VIA_STR, f"{where}.via")):
        for key in keys:
            if key in obj and not isinstance(obj[key], (str, type(None))):
                return f"{at}.{key} is not text"
        for key in _DATA_INT:
            if key in obj and obj[key] is not None and (not isinstance(obj[key], int) or isinstance(obj[key], bool)):
                return f"{at}.{key} is not a number"
        for key in ("va", "start"):
            if key in obj and not (obj[key] is None or (isinstance(obj[key], str) and _hex_ok(obj[key]))):
                return f"{at}.{key} is not a hex address"
        for key in ("packed", "pointer_misaligned"):
            if key in obj and not isinstance(obj[key], bool):
                return f"{at}.{key} is not true or false"
    if not isinstance(data.get("va"), str):
        return f"{where} has no va"
    touched = data.get("touched")
    if touched is not None and (not isinstance(touched, dict) or any(k not in touched for k in _TOUCHED_TYPES)
                                or _typed("", touched, _TOUCHED_TYPES)):
        return f"{where}.touched is not a range touched (first, last, low, high, distinct, records)"
    if via and not all(isinstance(via.get(k), str) for k in ("path", "type", "pointer", "function")):
        return f"{where}.via lacks its path, type, pointer or function"
    return None


def _sections_problem(step: Any, agent: Any, attached: Any, runs: list[Any]) -> str | None:
    """The optional sections: a step engine's, the agent's, an attach's, a merge's runs."""
    if step is not None:
        problem = _typed("step.", step, _STEP_TYPES)
        scope = step.get("scope")
        if problem is None and isinstance(scope, dict):
            problem = _typed("step.scope.", scope, _STEP_SCOPE_TYPES)
            ranges = scope.get("ranges", [])
            if problem is None and not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) and _hex_ok(x) for x in r)
                                           for r in ranges):
                problem = "step.scope.ranges are not address ranges"
        if problem:
            return problem
    if agent is not None:
        problem = (_typed("agent.", agent, _AGENT_TYPES)
                   or _typed("agent.out_of_scope.", agent.get("out_of_scope", {}), _OUT_OF_SCOPE_TYPES)
                   or _typed("agent.patching.", agent.get("patching", {}), _PATCHING_TYPES)
                   or _table("agent.environment_added", agent.get("environment_added", {}), str)
                   or _table("agent.patching.unpatchable", agent.get("patching", {}).get("unpatchable", {}), int))
        if problem:
            return problem
    if attached is not None:
        problem = _typed("attached.", attached, _ATTACHED_TYPES) or _table("attached.stopped_s", attached.get("stopped_s", {}), _N)
        if problem:
            return problem
        if not isinstance(attached.get("pid"), int) or not isinstance(attached.get("detached"), bool):
            return "attached has no pid or detached"
    for i, r in enumerate(runs):
        if not isinstance(r, dict):
            return f"runs[{i}] is not an object"
        problem = (_typed(f"runs[{i}].", r, _RUN_TYPES) or _typed(f"runs[{i}].program.", r.get("program", {}), _PROGRAM_TYPES)
                   or _strings(f"runs[{i}].program.args", r.get("program", {}).get("args", [])))
        if problem:
            return problem
    return None
