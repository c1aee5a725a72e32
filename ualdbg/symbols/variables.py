"""The locals and parameters of one function, from DWARF: type name, size and natural alignment,
and where in the code each one has a memory address a debugger can take (`&NAME`): at the entry
(CFA-relative), after the prologue (frame-pointer-relative), at the start of its lexical block,
or at the first location-list range in memory."""
from __future__ import annotations

from collections.abc import Iterator

from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry, LocationExpr, LocationParser

from ualdbg.symbols.dwarfindex import DWARF_ERRORS, DwarfIndex, children, die_name

from ..lazyclass import dataclass

_QUALIFIERS = frozenset({"DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
                         "DW_TAG_atomic_type", "DW_TAG_immutable_type", "DW_TAG_packed_type"})
_BLOCKS = frozenset({"DW_TAG_lexical_block", "DW_TAG_try_block", "DW_TAG_catch_block"})
_DW_OP_addr, _DW_OP_fbreg, _DW_OP_bregx, _DW_OP_call_frame_cfa = 0x03, 0x91, 0x92, 0x9C
_NOT_MEMORY = frozenset({0x93, 0x9D, 0x9E, 0x9F, 0xA0, 0xA3, 0xF3})  # piece, bit_piece, implicit_value,
# stack_value, implicit_pointer, entry_value, GNU_entry_value: the value is not at an address


@dataclass(frozen=True)
class TypeInfo:
    name: str
    size: int | None
    align: int  # natural alignment: what an access of the type's scalars needs


@dataclass(frozen=True)
class Probe:
    """Where the variable's address can be taken: at a link-time `address` in its function (the
    first one reached), or `anywhere` (a static, whose link-time address `address` is)."""

    kind: str
    address: int | None = None


@dataclass(frozen=True)
class VariableInfo:
    function: str
    name: str
    kind: str  # local | parameter | static
    type: TypeInfo
    probe: Probe | None  # None: no memory location anywhere (a register, or optimised out)
    decl: str | None  # file:line of the declaration

    @property
    def ident(self) -> str:
        return f"{self.function}:{self.name}"


class VariableError(Exception):
    """The function or variable is not in the program's DWARF: one line for the user."""


def _pow2_divisor(n: int, cap: int = 16) -> int:
    a = 1
    while a < cap and n % (a * 2) == 0:
        a *= 2
    return a


class Types:
    def __init__(self, address_size: int) -> None:
        self.address_size = address_size
        self.cache: dict[int, TypeInfo] = {}
        self._named: dict[int, TypeInfo] = {}  # `named` answers: a struct's alignment left out

    def of(self, die: DIE | None, depth: int = 0, *, named: bool = False) -> TypeInfo:
        """The type's name, size and alignment. `named`: what a pointer to it needs, its name;
        a struct's members are then not read, so a pointer to a struct that points back (a
        linked list, sqlite3's structs) is no cycle, and the answer does not depend on which
        type was asked for first (before, the depth bound cut such cycles where it happened to
        meet them and kept `?` for whatever type it stopped at)."""
        if die is None:
            return TypeInfo("void", None, 1)
        key = die.offset
        if key in self.cache:
            return self.cache[key]
        if named:
            known = self._named.get(key)
            if known is None:
                known = self._named[key] = self._compute(die, depth, named=True)
            return known
        info = self._compute(die, depth)
        self.cache[key] = info
        return info

    def _target(self, die: DIE) -> DIE | None:
        return die.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in die.attributes else None

    def _compute(self, die: DIE, depth: int, *, named: bool = False) -> TypeInfo:
        if depth > 32:
            return TypeInfo("?", None, 1)
        attrs = die.attributes
        tag = die.tag
        name = _name(die)
        size = attrs["DW_AT_byte_size"].value if "DW_AT_byte_size" in attrs else None
        explicit = attrs["DW_AT_alignment"].value if "DW_AT_alignment" in attrs else None
        if tag in _QUALIFIERS:
            inner = self.of(self._target(die), depth + 1, named=named)
            word = {"DW_TAG_const_type": "const ", "DW_TAG_volatile_type": "volatile "}.get(tag, "")
            shown = name if tag == "DW_TAG_typedef" and name else f"{word}{inner.name}"
            return TypeInfo(shown, inner.size, max(inner.align, explicit or 1))
        if tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type", "DW_TAG_ptr_to_member_type"):
            inner = self.of(self._target(die), depth + 1, named=True) if "DW_AT_type" in attrs else TypeInfo("void", None, 1)
            n = size or self.address_size
            star = f"{inner.name}*" if inner.name.endswith("*") else f"{inner.name} *"
            return TypeInfo(star, n, max(_pow2_divisor(n), explicit or 1))
        if tag == "DW_TAG_array_type":
            elem = self.of(self._target(die), depth + 1, named=named)
            counts: list[int | None] = []
            for sub in children(die):
                if sub.tag != "DW_TAG_subrange_type":
                    continue
                a = sub.attributes
                if "DW_AT_count" in a and isinstance(a["DW_AT_count"].value, int):
                    counts.append(a["DW_AT_count"].value)
                elif "DW_AT_upper_bound" in a and isinstance(a["DW_AT_upper_bound"].value, int):
                    lower = a["DW_AT_lower_bound"].value if "DW_AT_lower_bound" in a else 0
                    counts.append(a["DW_AT_upper_bound"].value - lower + 1)
                else:
                    counts.append(None)
            total = size
            if total is None and elem.size is not None and counts and all(c is not None for c in counts):
                total = elem.size
                for c in counts:
                    total *= c or 0
            dims = "".join(f"[{'' if c is None else c}]" for c in counts) or "[]"
            return TypeInfo(f"{elem.name}{dims}", total, max(elem.align, explicit or 1))
        if tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
            word = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union", "DW_TAG_class_type": "class"}[tag]
            align = 1
            for member in () if named else children(die):
                if member.tag == "DW_TAG_member" and "DW_AT_type" in member.attributes:
                    if "DW_AT_data_bit_offset" in member.attributes or "DW_AT_bit_size" in member.attributes:
                        continue
                    align = max(align, self.of(self._target(member), depth + 1).align)
            if size is not None and size % align:
                align = _pow2_divisor(size)  # packed: its members are not naturally placed
            return TypeInfo(f"{word} {name or '<anonymous>'}", size, max(align, explicit or 1))
        if tag in ("DW_TAG_base_type", "DW_TAG_enumeration_type"):
            shown = name or ("enum <anonymous>" if tag == "DW_TAG_enumeration_type" else "?")
            if tag == "DW_TAG_enumeration_type" and name:
                shown = f"enum {name}"
            return TypeInfo(shown, size, max(_pow2_divisor(size) if size else 1, explicit or 1))
        return TypeInfo(name or str(tag).replace("DW_TAG_", ""), size, max(_pow2_divisor(size) if size else 1, explicit or 1))


def _name(die: DIE) -> str | None:
    attr = die.attributes.get("DW_AT_name")
    if attr is None:
        return None
    v = attr.value
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)


def _is_memory(expr: list[int] | bytes) -> bool:
    if not expr:
        return False
    op = expr[0]
    first = op == _DW_OP_addr or op == _DW_OP_fbreg or op == _DW_OP_bregx or 0x70 <= op <= 0x8F
    return first and not any(b in _NOT_MEMORY for b in _ops(expr))


def _ops(expr: list[int] | bytes) -> Iterator[int]:
    """Opcodes of a simple expression: operands of the few ops that start location expressions
    are skipped, anything else is scanned byte by byte (conservative: may see an operand as an op)."""
    i = 0
    data = bytes(expr)
    while i < len(data):
        op = data[i]
        yield op
        i += 1
        if op == _DW_OP_addr:
            i += 8 if len(data) - i >= 8 else 4
        elif op in (_DW_OP_fbreg,) or 0x70 <= op <= 0x8F:
            while i < len(data) and data[i] & 0x80:
                i += 1
            i += 1
        elif op == _DW_OP_bregx:
            for _ in range(2):
                while i < len(data) and data[i] & 0x80:
                    i += 1
                i += 1
        else:
            return


class FunctionVariables:
    """The variables of one ELF's functions, looked up by function name."""

    def __init__(self, dwarf: DwarfIndex, address_size: int) -> None:
        self.dwarf = dwarf
        self.info = dwarf.dwarfinfo
        self.types = Types(address_size)
        self._cfa_based = False
        self._entry = self._body = 0
        self.locations: LocationParser | None
        try:
            self.locations = LocationParser(self.info.location_lists())
        except DWARF_ERRORS:
            self.locations = None

    def function(self, name: str) -> tuple[DIE, CompileUnit]:
        """The out-of-line definition of `name` (a DW_TAG_subprogram with code)."""
        try:
            for cu in self.info.iter_CUs():
                for die in children(cu.get_top_DIE()):
                    if die.tag != "DW_TAG_subprogram":
                        continue
                    if (_name(die) == name or die_name(die)[0] == name) and self.dwarf.die_ranges(die, cu):
                        return die, cu
        except DWARF_ERRORS as exc:
            raise VariableError(f"cannot read the DWARF of function {name}: {exc}") from None
        raise VariableError(f"no function {name!r} with code in the program's DWARF (is it built with -g, or inlined everywhere?)")

    def variables(self, function: str) -> list[VariableInfo]:
        """The locals and parameters of `function`; VariableError when its DWARF cannot be read
        (a hostile file: one line for the user, never a parser's exception)."""
        try:
            return self._variables(function)
        except DWARF_ERRORS as exc:
            raise VariableError(f"cannot read the DWARF of function {function} ({type(exc).__name__}: "
                                f"{str(exc)[:100]})") from None

    def _variables(self, function: str) -> list[VariableInfo]:
        die, cu = self.function(function)
        out: list[VariableInfo] = []
        ranges = self.dwarf.die_ranges(die, cu)
        low = min(lo for lo, _ in ranges)
        high = max(hi for _, hi in ranges)
        fb = die.attributes.get("DW_AT_frame_base")
        self._cfa_based = fb is not None and fb.form == "DW_FORM_exprloc" and list(fb.value) == [_DW_OP_call_frame_cfa]
        self._entry = low
        self._body = self._body_start(cu, low, high)
        self._collect(die, cu, function, None, out)
        return out

    def _body_start(self, cu: CompileUnit, low: int, high: int) -> int:
        """The first statement after the prologue: the first is_stmt row of the line table
        whose line differs from the entry's. A frame-pointer-relative address (DW_OP_breg5/6,
        as gcc emits for a realigned frame) is valid from there on, not at the entry, where
        the frame pointer is still the caller's (gdb's own `break FUNC` can land on the entry
        at -O1)."""
        try:
            program = self.info.line_program_for_CU(cu)
            entries = program.get_entries() if program is not None else []
        except DWARF_ERRORS:
            return low
        rows = sorted((e.state.address, e.state.line) for e in entries
                      if e.state is not None and not e.state.end_sequence and e.state.is_stmt and low <= e.state.address < high)
        if not rows:
            return low
        first_line = next((line for addr, line in rows if addr == low), rows[0][1])
        return next((addr for addr, line in rows if addr > low and line != first_line), low)

    def variable(self, function: str, name: str) -> VariableInfo:
        found = [v for v in self.variables(function) if v.name == name]
        if not found:
            known = ", ".join(sorted({v.name for v in self.variables(function)})) or "none"
            raise VariableError(f"{function} has no local or parameter {name!r} in DWARF (it has: {known})")
        return found[0]  # the outermost: a shadowing inner declaration comes later in DIE order

    def _collect(self, die: DIE, cu: CompileUnit, function: str, block_start: int | None, out: list[VariableInfo]) -> None:
        for child in children(die):
            tag = child.tag
            if tag in _BLOCKS:
                ranges = self.dwarf.die_ranges(child, cu)
                start = min(lo for lo, _ in ranges) if ranges else block_start
                self._collect(child, cu, function, start, out)
            elif tag in ("DW_TAG_variable", "DW_TAG_formal_parameter"):
                var = self._variable(child, cu, function, block_start)
                if var is not None:
                    out.append(var)

    def _variable(self, die: DIE, cu: CompileUnit, function: str, block_start: int | None) -> VariableInfo | None:
        origin = die
        if "DW_AT_abstract_origin" in die.attributes:
            origin = die.get_DIE_from_attribute("DW_AT_abstract_origin")
        name = _name(origin)
        if name is None or ("DW_AT_declaration" in die.attributes and "DW_AT_location" not in die.attributes):
            return None
        tdie = origin.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in origin.attributes else None
        type_info = self.types.of(tdie)
        kind = "parameter" if die.tag == "DW_TAG_formal_parameter" else "local"
        probe = self._probe(die, cu, block_start)
        if probe is not None and probe.kind == "anywhere":
            kind = "static"
        decl = None
        if "DW_AT_decl_line" in origin.attributes:
            decl = f"line {origin.attributes['DW_AT_decl_line'].value}"
        return VariableInfo(function, name, kind, type_info, probe, decl)

    def _probe(self, die: DIE, cu: CompileUnit, block_start: int | None) -> Probe | None:
        attr = die.attributes.get("DW_AT_location")
        if attr is None or self.locations is None:
            return None
        try:
            loc = self.locations.parse_from_attribute(attr, cu["version"], die)
        except DWARF_ERRORS:
            return None
        if isinstance(loc, LocationExpr):
            expr = loc.loc_expr
            if not _is_memory(expr):
                return None
            if expr[0] == _DW_OP_addr:
                size = self.types.address_size
                return Probe("anywhere", int.from_bytes(bytes(expr[1:1 + size]), "little"))
            # One expression for the whole scope. Relative to the CFA it is right at every PC
            # (the debugger has the CFI); relative to a register, only once the prologue has
            # set that register up.
            start = self._entry if expr[0] == _DW_OP_fbreg and self._cfa_based else self._body
            return Probe("address", max(start, block_start or 0))
        base = _cu_base(cu)
        starts = []
        for entry in loc:
            if isinstance(entry, BaseAddressEntry):
                base = entry.base_address
            elif isinstance(entry, LocationEntry) and _is_memory(entry.loc_expr):
                begin = entry.begin_offset if entry.is_absolute else entry.begin_offset + base
                end = entry.end_offset if entry.is_absolute else entry.end_offset + base
                if end > begin:
                    starts.append(begin)
        return Probe("address", min(starts)) if starts else None


def _cu_base(cu: CompileUnit) -> int:
    top = cu.get_top_DIE().attributes
    return top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0

