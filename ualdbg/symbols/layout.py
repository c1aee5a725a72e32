"""Data layout from DWARF: what lies at a byte offset inside a type (`.status[1]+0`), member
offsets, array dimensions, declaration file:line, and the small DWARF expression evaluator
that turns a variable's location into an address or a value for one stopped frame."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from elftools.dwarf.die import DIE
from elftools.dwarf.dwarf_expr import DWARFExprOp, DWARFExprParser

from ualdbg.symbols.dwarfindex import DWARF_ERRORS, DwarfIndex, Unit, children, parent
from ualdbg.symbols.variables import TypeInfo, Types

from ..lazyclass import dataclass

QUALIFIERS = frozenset({"DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
                        "DW_TAG_atomic_type", "DW_TAG_immutable_type", "DW_TAG_packed_type"})
AGGREGATES = frozenset({"DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"})
POINTERS = frozenset({"DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type"})
# DWARF register numbers of x86-64 (System V psABI, figure 3.36)
X86_64_REGS = ("rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
               "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip")
_FORTRAN = frozenset({0x0007, 0x0008, 0x000E, 0x0022, 0x0023, 0x002D, 0x002E})  # DW_LANG_Fortran77..Fortran23


def text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def name_of(die: DIE) -> str | None:
    attr = die.attributes.get("DW_AT_name")
    return None if attr is None else text(attr.value)


def ref(die: DIE, attr: str) -> DIE | None:
    if attr not in die.attributes:
        return None
    try:
        return die.get_DIE_from_attribute(attr)
    except DWARF_ERRORS:
        return None


def origin(die: DIE) -> DIE:
    """The DIE that carries the name and type: the abstract origin or the specification."""
    for _ in range(4):
        nxt = ref(die, "DW_AT_abstract_origin") or ref(die, "DW_AT_specification")
        if nxt is None:
            return die
        die = nxt
    return die


def strip(die: DIE | None) -> DIE | None:
    for _ in range(16):
        if die is None or die.tag not in QUALIFIERS:
            return die
        die = ref(die, "DW_AT_type")
    return die


def is_fortran(cu: Any) -> bool:
    top = cu.get_top_DIE().attributes
    return "DW_AT_language" in top and top["DW_AT_language"].value in _FORTRAN


def member_offset(member: DIE) -> int | None:
    attr = member.attributes.get("DW_AT_data_member_location")
    if attr is None:
        up = parent(member)
        return 0 if up is not None and up.tag == "DW_TAG_union_type" else None
    if isinstance(attr.value, int):
        return attr.value
    value = list(attr.value)
    if value and value[0] == 0x23:  # DW_OP_plus_uconst ULEB
        n, shift = 0, 0
        for b in value[1:]:
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        return n
    return None


def array_dims(die: DIE) -> list[tuple[int, int | None]]:
    """(lower bound, element count or None) per dimension, as declared."""
    dims: list[tuple[int, int | None]] = []
    fortran = is_fortran(die.cu)
    for sub in children(die):
        if sub.tag != "DW_TAG_subrange_type":
            continue
        a = sub.attributes
        lower = a["DW_AT_lower_bound"].value if "DW_AT_lower_bound" in a else (1 if fortran else 0)
        lower = lower if isinstance(lower, int) else 0
        count: int | None = None
        if "DW_AT_count" in a and isinstance(a["DW_AT_count"].value, int) and a["DW_AT_count"].form != "DW_FORM_ref4":
            count = a["DW_AT_count"].value
        elif "DW_AT_upper_bound" in a and a["DW_AT_upper_bound"].form.startswith(("DW_FORM_data", "DW_FORM_sdata", "DW_FORM_udata", "DW_FORM_implicit")):
            count = a["DW_AT_upper_bound"].value - lower + 1
        dims.append((lower, count))
    return dims or [(0, None)]


@dataclass(frozen=True)
class Member:
    """The innermost named place at an offset inside a type."""

    path: str  # ".status[1]" (appended to a variable's name), "->seq" for a pointer's target
    offset: int  # bytes past the start of that innermost element or member
    type: str  # type of the innermost element or member
    size: int | None  # its size
    struct: str | None  # the innermost struct or union crossed, e.g. "struct app_hdr"
    member: str | None  # its member holding the offset
    member_offset: int | None  # that member's offset in the struct
    member_align: int | None  # the alignment its type needs
    packed: bool  # the struct places some member off its type's alignment


class Layouts:
    """Type sizes, alignments and offset paths for one ELF's DWARF, cached per type DIE."""

    def __init__(self, address_size: int = 8) -> None:
        self.types = Types(address_size)
        self._packed: dict[int, bool] = {}

    def info(self, die: DIE | None, *, named: bool = False) -> TypeInfo:
        """The type's name, size and alignment. `named` (Types.of's): a struct's members are not
        read, so its alignment may be less, but its name and size are the same: what tells
        whether an address is inside a value of the type."""
        got = self.types.of(die, named=named)
        arr = strip(die)
        if arr is not None and arr.tag == "DW_TAG_array_type":
            # Counted here, not by Types: Fortran bounds start at 1 when DWARF omits the lower
            # bound, and bounds known only at run time (a dummy array x(len)) are DIE references
            # or expressions, not counts.
            elem = self.info(ref(arr, "DW_AT_type"), named=named)
            counts = [c for _, c in array_dims(arr)]
            dims = "".join(f"[{'' if c is None else c}]" for c in counts)
            size: int | None = None
            if elem.size is not None and all(c is not None for c in counts):
                size = elem.size
                for c in counts:
                    size *= c or 0
            elif "DW_AT_byte_size" in arr.attributes:
                size = arr.attributes["DW_AT_byte_size"].value
            return TypeInfo(f"{elem.name}{dims}" if arr is die else got.name, size, max(elem.align, got.align))
        return got

    def packed(self, die: DIE) -> bool:
        """Whether a struct places a member at an offset not a multiple of its type's alignment
        (what `__attribute__((packed))` or `#pragma pack` does to a layout that needs it)."""
        if die.offset not in self._packed:
            self._packed[die.offset] = any(True for _ in self.misplaced(die))
        return self._packed[die.offset]

    def misplaced(self, die: DIE) -> list[tuple[DIE, int, TypeInfo]]:
        out = []
        for m in children(die):
            if m.tag != "DW_TAG_member" or "DW_AT_bit_size" in m.attributes or "DW_AT_data_bit_offset" in m.attributes:
                continue
            off = member_offset(m)
            t = self.info(ref(m, "DW_AT_type"))
            if off is not None and t.align > 1 and off % t.align:
                out.append((m, off, t))
        return out

    def place(self, type_die: DIE | None, offset: int, sep: str = ".") -> Member:
        """What lies `offset` bytes into a value of this type: `[3].field[2]` and the rest."""
        path = ""
        die = strip(type_die)
        struct = member = None
        member_off: int | None = None
        member_align: int | None = None
        packed = False
        first = True
        for _ in range(32):
            if die is None:
                break
            if die.tag == "DW_TAG_array_type":
                elem = ref(die, "DW_AT_type")
                esize = self.info(elem).size
                if not esize:
                    break
                dims = array_dims(die)
                flat = offset // esize
                idx: list[int] = []
                for _lower, count in reversed(dims) if not is_fortran(die.cu) else dims:
                    if count:
                        idx.append(flat % count)
                        flat //= count
                    else:
                        idx.append(flat)
                        flat = 0
                if not is_fortran(die.cu):
                    idx.reverse()
                path += "".join(f"[{i}]" for i in idx)
                offset %= esize
                die = strip(elem)
            elif die.tag in AGGREGATES:
                hit = None
                for m in children(die):
                    if m.tag != "DW_TAG_member" or "DW_AT_bit_size" in m.attributes:
                        continue
                    off = member_offset(m)
                    size = self.info(ref(m, "DW_AT_type")).size
                    if off is not None and size and off <= offset < off + size:
                        hit = (m, off)
                        break
                if hit is None:
                    break
                m, off = hit
                struct = self.info(die).name
                member = name_of(m) or "<anonymous>"
                member_off, member_align = off, self.info(ref(m, "DW_AT_type")).align
                packed = self.packed(die)
                path += (sep if first else ".") + member
                offset -= off
                die = strip(ref(m, "DW_AT_type"))
            else:
                break
            first = False
        leaf = self.info(die) if die is not None else None
        return Member(path, offset, leaf.name if leaf is not None else "?", leaf.size if leaf is not None else None,
                      struct, member, member_off, member_align, packed)


def decl_pos(dwarf: DwarfIndex, die: DIE, units: dict[int, Unit]) -> tuple[str | None, int | None]:
    """Declaration file and line of a DIE (through its origin), as the DWARF names the file."""
    src = die if "DW_AT_decl_line" in die.attributes else origin(die)
    a = src.attributes
    if "DW_AT_decl_line" not in a:
        return None, None
    line = a["DW_AT_decl_line"].value
    if "DW_AT_decl_file" not in a:
        return None, line
    cu = src.cu
    unit = units.get(cu.cu_offset)
    if unit is None:
        unit = units[cu.cu_offset] = Unit(dwarf, cu)  # type: ignore[arg-type]
    try:
        pos = unit.pos(a["DW_AT_decl_file"].value, line)
    except DWARF_ERRORS:
        pos = None
    return (pos.file if pos is not None else None), line


class Unreadable(Exception):
    """The location cannot be computed from what is known (a register or memory not available)."""


@dataclass(frozen=True)
class Location:
    """Where a variable is for one frame: at `address` in memory, or its `value` (a register or
    a computed value, DW_OP_stack_value)."""

    address: int | None = None
    value: int | None = None


def dwarf_reg(regs: Mapping[str, int], n: int) -> int:
    """The value of DWARF register `n` (x86-64 numbering)."""
    if n >= len(X86_64_REGS):
        raise Unreadable(f"DWARF register {n}")
    try:
        return regs[X86_64_REGS[n]]
    except KeyError:
        raise Unreadable(X86_64_REGS[n]) from None


class ParsedExprs(DWARFExprParser):
    """pyelftools' expression parser, parsing each expression once: a frame's variables are
    evaluated again for each site in the function and each address named there (the pointer a
    fault went through, the local it is, the lowest and highest address its records touched),
    and pyelftools builds a whole new parser, dispatch table and all, for every DW_OP_entry_value
    it meets (a third of the naming of CPython's sites went to parsing). The operations are
    shared: the evaluator only reads them."""

    def __init__(self, structs: Any) -> None:
        super().__init__(structs)
        self._parsed: dict[bytes, list[DWARFExprOp]] = {}

    def parse_expr(self, expr: bytes | Iterable[int]) -> list[DWARFExprOp]:
        key = bytes(expr)
        ops = self._parsed.get(key)
        if ops is None:
            ops = self._parsed[key] = super().parse_expr(key)
        return ops


class Evaluator:
    """Evaluates the location expressions gcc and gfortran emit for one frame: registers, CFA,
    frame base, constants, arithmetic; memory only through `read_memory` when given."""

    def __init__(self, parser: DWARFExprParser, regs: Mapping[str, int], *, bias: int = 0,
                 cfa: int | Callable[[], int | None] | None = None, frame_base: list[int] | None = None,
                 read_memory: Callable[[int, int], bytes] | None = None) -> None:
        """`cfa`: the frame's CFA, or what computes it at its first use (frame_cfa)."""
        self.parser = parser
        self.regs, self.bias, self.cfa, self.read_memory = regs, bias, cfa, read_memory
        self.frame_base = frame_base

    def frame_cfa(self) -> int | None:
        """The CFA, computed when first needed if given as a function: finding it parses the
        function's FDE, and a third of the frames named in sqlite3's and CPython's check never
        need it (their variables are in registers or at register offsets)."""
        if callable(self.cfa):
            self.cfa = self.cfa()
        return self.cfa

    def reg(self, n: int) -> int:
        return dwarf_reg(self.regs, n)

    def _fbreg_base(self) -> int:
        if self.frame_base is None:
            raise Unreadable("frame base")
        loc = self.evaluate(self.frame_base)
        if loc.address is not None:
            return loc.address
        if loc.value is not None:
            return loc.value
        raise Unreadable("frame base")

    def evaluate(self, expr: list[int] | bytes) -> Location:
        stack: list[int] = []
        register_value: int | None = None
        for op in self.parser.parse_expr(expr):
            name, args = op.op_name, op.args
            if name == "DW_OP_addr":
                stack.append(args[0] + self.bias)
            elif name.startswith("DW_OP_lit"):
                stack.append(int(name[9:]))
            elif name.startswith("DW_OP_const"):
                stack.append(args[0])
            elif name.startswith("DW_OP_breg"):
                n = args[0] if name == "DW_OP_bregx" else int(name[10:])
                stack.append(self.reg(n) + (args[-1]))
            elif name.startswith("DW_OP_reg"):
                n = args[0] if name == "DW_OP_regx" else int(name[9:])
                register_value = self.reg(n)
            elif name == "DW_OP_fbreg":
                stack.append(self._fbreg_base() + args[0])
            elif name == "DW_OP_call_frame_cfa":
                cfa = self.frame_cfa()
                if cfa is None:
                    raise Unreadable("CFA")
                stack.append(cfa)
            elif name == "DW_OP_plus_uconst":
                stack.append(stack.pop() + args[0])
            elif name in ("DW_OP_plus", "DW_OP_minus", "DW_OP_and", "DW_OP_mul"):
                b, a = stack.pop(), stack.pop()
                stack.append({"DW_OP_plus": a + b, "DW_OP_minus": a - b, "DW_OP_and": a & b, "DW_OP_mul": a * b}[name])
            elif name == "DW_OP_neg":
                stack.append(-stack.pop())
            elif name == "DW_OP_dup":
                stack.append(stack[-1])
            elif name == "DW_OP_deref":
                if self.read_memory is None:
                    raise Unreadable("memory")
                try:
                    stack.append(int.from_bytes(self.read_memory(stack.pop(), 8), "little"))
                except Exception as exc:
                    raise Unreadable("memory") from exc
            elif name == "DW_OP_stack_value":
                return Location(value=stack[-1] & 0xFFFFFFFFFFFFFFFF)
            else:  # entry_value, pieces, implicit pointers, TLS: not a plain address
                raise Unreadable(name)
        if register_value is not None:
            return Location(value=register_value)
        if not stack:
            raise Unreadable("empty expression")
        return Location(address=stack[-1] & 0xFFFFFFFFFFFFFFFF)
