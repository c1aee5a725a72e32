"""The `junit` format (render/formats.py): JUnit XML, which every CI system reads as test results
(Jenkins, GitLab's `artifacts:reports:junit`, GitHub actions that publish test results). One test
case per site: it fails when it is new (with `--baseline`: not in it; without one: every site is
new); a site the baseline has passes. One more test case says whether the run was whole."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import IO

from ..core.result import TraceResult
from .findings import Finding, findings
from .formats import Context

# Characters XML 1.0 cannot hold at all, even escaped: a hostile name's control bytes are shown
# as \xNN instead (the console escapes them the same way).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(s: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def _name(f: Finding, taken: set[str]) -> str:
    """A test's name, stable across builds (no address): `file.c:12 in bump`, or the function and
    module where there is no line; a second site of one line adds its place in the module."""
    loc = f.site.loc
    base = f"{f.path}:{f.line} in {loc.function or '?'}" if f.path else f"{loc.function or '?'} in {loc.module_name or '?'}"
    name = base if base not in taken else f"{base} ({loc.module_name}+{loc.offset or 0:#x})"
    taken.add(name)
    return name


def build_junit(result: TraceResult, context: Context) -> ET.Element:
    program = result.program.path or "the program"
    found = findings(result, context)
    suite = ET.Element("testsuite", name=_text(f"ualdbg: unaligned accesses in {program}"))
    props = ET.SubElement(suite, "properties")
    for key, value in (("faults_total", result.faults_total), ("sites", len(result.sites)),
                       ("engine", result.engine or ""), ("baseline", "no" if context.new_sites is None else "yes")):
        ET.SubElement(props, "property", name=key, value=_text(str(value)))
    failures = errors = 0
    taken: set[str] = set()
    for f in found:
        case = ET.SubElement(suite, "testcase", name=_text(_name(f, taken)),
                             classname=_text(f"ualdbg.{f.site.loc.module_name or 'unknown'}"))
        if f.path:
            case.set("file", _text(f.path))
            case.set("line", str(f.line))
        if f.new is False:
            ET.SubElement(case, "system-out").text = _text(f"known in the baseline: {f.message}")
            continue
        failures += 1
        failure = ET.SubElement(case, "failure", type="ualdbg/unaligned-access", message=_text(f.title))
        failure.text = _text(f.message)
    whole = ET.SubElement(suite, "testcase", name="the whole run was seen", classname="ualdbg.run")
    unseen = [b.text for b in result.blind_spots]
    if result.partial:
        unseen.insert(0, f"interrupted by {result.interrupted_by or 'a signal'}: the trace is partial")
    if unseen:
        errors += 1
        err = ET.SubElement(whole, "error", type="ualdbg/incomplete", message=_text(unseen[0]))
        err.text = _text("\n".join(unseen))
    tests = len(found) + 1
    for element in (suite,):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", "0")
        if result.duration is not None:
            element.set("time", f"{result.duration:.6f}")
    root = ET.Element("testsuites", name="ualdbg", tests=str(tests), failures=str(failures), errors=str(errors))
    root.append(suite)
    return root


def write(result: TraceResult, out: IO[str], context: Context) -> None:
    root = build_junit(result, context)
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode") + "\n")
