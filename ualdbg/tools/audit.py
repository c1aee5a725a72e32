"""`ualdbg audit`: the static alignment audit of one ELF, from its DWARF alone (the program is
not run): struct/union members placed off their type's alignment (packed layouts), variables at
fixed addresses not aligned for their type, COMMON blocks with their member offsets; and, given
a trace, which findings a run actually hit and how often."""
from __future__ import annotations

import os
from dataclasses import field
from typing import Any

from elftools.dwarf.die import DIE

from ..core.dataref import DataRef
from ..core.errors import UaldbgError
from ..core.programfile import elf_file_problem
from ..core.result import TraceResult
from ..lazyclass import dataclass
from ..symbols.data import GlobalVar, ModuleData, module_data
from ..symbols.dwarfindex import DWARF_ERRORS, unit_dies
from ..symbols.elfindex import ElfIndex, elf_index
from ..symbols.layout import AGGREGATES, decl_pos, name_of, ref

VIEW = 8  # the wide view a COMMON member is checked against (REAL*8, INTEGER*8, a pointer)


class AuditError(UaldbgError):
    """The file cannot be audited (missing, not ELF): one line for the user."""


@dataclass
class Finding:
    kind: str  # packed-member | misaligned-variable | common-member
    what: str  # "struct app_hdr.seq", "COMMON /data/ r2", "global counter"
    type: str
    offset: int | None  # in the struct or COMMON block; None for a variable
    address: int | None  # link-time, for variables and COMMON members
    align: int  # what the member's or variable's type needs (8 for a COMMON view)
    size: int | None
    file: str | None
    line: int | None
    struct: str | None = None
    member: str | None = None
    variable: str | None = None
    common: str | None = None
    hits: int = 0
    sites: list[str] = field(default_factory=list)

    @property
    def declared(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else "?"

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None and k not in ("hits", "sites")}
        if self.address is not None:
            out["address"] = f"{self.address:#x}"
        return out


@dataclass
class CommonBlock:
    name: str
    symbol: str | None
    address: int
    size: int
    file: str | None
    line: int | None
    members: list[dict[str, Any]]


@dataclass
class AuditResult:
    path: str
    module: str
    has_dwarf: bool
    findings: list[Finding]
    commons: list[CommonBlock]
    structs_checked: int
    variables_checked: int
    data_symbols: list[GlobalVar]
    missing: list[str]
    trace: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": 1,
            "tool": "ualdbg",
            "kind": "audit",
            "path": self.path,
            "dwarf": self.has_dwarf,
            "checked": {"structs": self.structs_checked, "variables": self.variables_checked,
                        "data_symbols": len(self.data_symbols)},
            "findings": [],
            "commons": [
                {"name": c.name, "symbol": c.symbol, "address": f"{c.address:#x}", "size": c.size, "file": c.file,
                 "line": c.line, "members": c.members}
                for c in self.commons
            ],
            "missing": self.missing,
        }
        for f in self.findings:
            entry = f.to_json()
            if self.trace is not None:
                entry["hits"] = f.hits
                entry["sites"] = f.sites
            doc["findings"].append(entry)
        if not self.has_dwarf:
            doc["symbols"] = [{"name": s.name, "address": f"{s.start:#x}", "size": s.size, "kind": s.kind,
                               "mod8": s.start % 8} for s in self.data_symbols]
        if self.trace is not None:
            doc["trace"] = self.trace
        return doc


def _load(path: str) -> ElfIndex:
    problem = elf_file_problem(path, path, not_elf="not an ELF file (ualdbg audits executables, shared libraries and objects)")
    if problem:
        raise AuditError(problem)
    index = elf_index(path)
    if index is None:
        raise AuditError(f"{path}: an ELF file pyelftools cannot read")
    return index


def audit(path: str) -> AuditResult:
    """Audit one ELF file; raises AuditError on files that cannot be audited, among them
    truncated or hostile ones whose headers or DWARF pyelftools cannot parse (one line)."""
    index = _load(path)
    try:
        return _audit(path, index)
    except DWARF_ERRORS as exc:
        raise AuditError(f"{path}: a corrupt ELF or DWARF file ({type(exc).__name__}: {str(exc)[:100]})") from None


def _audit(path: str, index: ElfIndex) -> AuditResult:
    md = module_data(index)
    has_dwarf = index.dwarf is not None
    findings: list[Finding] = []
    missing: list[str] = []
    structs = 0
    if has_dwarf:
        try:
            structs = _packed_members(md, findings)
        except DWARF_ERRORS as exc:
            missing.append(f"part of the DWARF could not be read ({type(exc).__name__}): struct findings may be incomplete")
    else:
        missing.append("no DWARF (.debug_info, nor a separate debug file): struct and union layouts, variable types and "
                       "COMMON member offsets are unknown; only the symbol table's data objects are listed (rebuild with -g)")
    variables = md.dwarf_vars if has_dwarf else []
    commons: dict[str, list[GlobalVar]] = {}
    for var in variables:
        if var.kind == "common" and var.container:
            commons.setdefault(var.container, []).append(var)
            continue
        die = md.die(var.die_offset) if var.die_offset is not None else None
        tinfo = md.layouts.info(_type_of(die)) if die is not None else None
        if tinfo is not None and tinfo.align > 1 and var.start % tinfo.align:
            findings.append(Finding("misaligned-variable", f"{var.kind} {var.name}", tinfo.name, None, var.start,
                                    tinfo.align, tinfo.size, var.file, var.line, variable=var.name))
    blocks = [_common(md, name, members, findings) for name, members in sorted(commons.items())]
    # The linker's and the C runtime's own objects (__abi_tag, _DYNAMIC, ...) are not the program's.
    symbols = [] if has_dwarf else [s for s in md.symbols if s.size and not s.name.startswith("_")]
    if not has_dwarf and not symbols:
        missing.append("no data symbols either (.symtab stripped): nothing to audit")
    findings.sort(key=lambda f: (f.kind, f.file or "", f.line or 0, f.what))
    return AuditResult(path=os.path.abspath(path), module=os.path.basename(path), has_dwarf=has_dwarf, findings=findings,
                       commons=blocks, structs_checked=structs, variables_checked=len(variables), data_symbols=symbols,
                       missing=missing)


def _type_of(die: DIE | None) -> DIE | None:
    if die is None:
        return None
    from ..symbols.layout import origin

    return ref(origin(die), "DW_AT_type") or ref(die, "DW_AT_type")


def _packed_members(md: ModuleData, findings: list[Finding]) -> int:
    """Members off their type's alignment, once per struct definition (a header's struct is
    described again in every unit that includes it)."""
    dwarf = md.dwarf
    assert dwarf is not None
    seen: set[tuple[Any, ...]] = set()
    checked = 0
    for cu in dwarf.dwarfinfo.iter_CUs():
        for die in unit_dies(cu):
            if die.tag not in AGGREGATES or "DW_AT_declaration" in die.attributes or "DW_AT_byte_size" not in die.attributes:
                continue
            info = md.layouts.info(die)
            file, line = decl_pos(dwarf, die, md.units)
            key = (info.name, file, line, info.size)
            if key in seen:
                continue
            seen.add(key)
            checked += 1
            for member, off, tinfo in md.layouts.misplaced(die):
                mname = name_of(member) or "<anonymous>"
                mfile, mline = decl_pos(dwarf, member, md.units)
                findings.append(Finding("packed-member", f"{info.name}.{mname}", tinfo.name, off, None, tinfo.align,
                                        tinfo.size, mfile or file, mline or line, struct=info.name, member=mname))
    return checked


def _common(md: ModuleData, name: str, members: list[GlobalVar], findings: list[Finding]) -> CommonBlock:
    start = min(m.start for m in members)
    end = max(m.start + m.size for m in members)
    block = name.removeprefix("COMMON /").removesuffix("/")
    symbol = next((s for s in md.symbols if s.start == start), None)
    rows = []
    file, line = md.common_decl.get(name, (None, None))
    for m in sorted(members, key=lambda m: m.start):
        off = m.start - start
        flagged = off % VIEW != 0
        rows.append({"name": m.name, "offset": off, "type": m.type, "size": m.size, "file": m.file, "line": m.line,
                     "misaligns_8_byte_view": flagged})
        if flagged:
            findings.append(Finding("common-member", f"{name} {m.name}", m.type or "?", off, m.start, VIEW, m.size,
                                    m.file, m.line, variable=m.name, common=block))
    return CommonBlock(block, symbol.name if symbol else None, start, end - start, file, line, rows)


# --------------------------------------------------------------------------------------------
# Which findings a run hit


def match_trace(result: AuditResult, trace: TraceResult) -> None:
    """Count, per finding, the faults of the trace's sites whose data it explains: a packed
    member reached through a pointer or inside a variable, a COMMON member, a misaligned
    variable. Sites of other modules or without `data` are left out and counted."""
    unmatched: list[dict[str, Any]] = []
    no_data = 0
    matched = 0
    for site in trace.sites:
        data = site.data
        where = f"{site.loc.file}:{site.loc.line}" if site.loc.file and site.loc.line else f"{site.pc:#x}"
        if data is None:
            no_data += site.count
            continue
        hit = [f for f in result.findings if _explains(f, data, result.module)]
        for f in hit:
            f.hits += site.count
            if where not in f.sites:
                f.sites.append(where)
        if hit:
            matched += site.count
        else:
            via = data.via
            text = data.text + (f", via {via.path} ({via.type})" if via is not None else "")
            unmatched.append({"site": where, "count": site.count, "data": text})
    result.trace = {"program": trace.program.path, "faults_total": trace.faults_total,
                    "faults_explained": matched, "faults_without_data": no_data, "unexplained": unmatched}


def _explains(f: Finding, data: DataRef, module: str) -> bool:
    if f.kind == "packed-member":
        return any(d is not None and d.struct == f.struct and d.member == f.member for d in (data, data.via))
    if data.module not in (None, module):
        return False
    if f.kind == "common-member":
        return data.kind == "common" and data.name == f.variable and data.container == f"COMMON /{f.common}/"
    return data.kind in ("global", "static") and data.name == f.variable and data.line == f.line


def exit_status(result: AuditResult) -> int:
    """0: no finding; 1: findings (with --trace: findings the run hit); 2 is for errors."""
    if result.trace is not None:
        return 1 if any(f.hits for f in result.findings) else 0
    return 1 if result.findings else 0
