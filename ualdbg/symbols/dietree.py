"""The shape of .debug_info read straight from its bytes: each unit's DIEs as (offset, tag, end),
a DIE's children, and the chain of DIEs from a unit's top down to the one holding a byte offset.
What lets the data naming read one variable's or one function's DIEs without pyelftools parsing
the whole unit (issue 34); bounded, and moving forward only, on hostile input."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from functools import cached_property
from typing import Any

from elftools.common.exceptions import DWARFError
from elftools.dwarf.enums import ENUM_DW_FORM

from ualdbg.symbols.dwarfindex import DWARF_ERRORS

from ..lazyclass import dataclass

# One walk decodes at most this many DIEs (sqlite3's amalgamation has 140,000, CPython's
# biggest unit fewer): a hostile sibling chain or nesting cannot make it run away.
MAX_DIES = 2_000_000
MAX_DEPTH = 256  # nesting: a real one is tens

_FIXED = {
    "DW_FORM_data1": 1, "DW_FORM_ref1": 1, "DW_FORM_flag": 1, "DW_FORM_strx1": 1, "DW_FORM_addrx1": 1,
    "DW_FORM_data2": 2, "DW_FORM_ref2": 2, "DW_FORM_strx2": 2, "DW_FORM_addrx2": 2,
    "DW_FORM_strx3": 3, "DW_FORM_addrx3": 3,
    "DW_FORM_data4": 4, "DW_FORM_ref4": 4, "DW_FORM_strx4": 4, "DW_FORM_addrx4": 4, "DW_FORM_ref_sup4": 4,
    "DW_FORM_data8": 8, "DW_FORM_ref8": 8, "DW_FORM_ref_sig8": 8, "DW_FORM_ref_sup8": 8,
    "DW_FORM_data16": 16, "DW_FORM_flag_present": 0, "DW_FORM_implicit_const": 0,
}
_OFFSET_SIZED = frozenset({"DW_FORM_strp", "DW_FORM_line_strp", "DW_FORM_sec_offset", "DW_FORM_strp_sup",
                           "DW_FORM_GNU_ref_alt", "DW_FORM_GNU_strp_alt"})
_LEB = frozenset({"DW_FORM_udata", "DW_FORM_sdata", "DW_FORM_ref_udata", "DW_FORM_strx", "DW_FORM_addrx",
                  "DW_FORM_loclistx", "DW_FORM_rnglistx", "DW_FORM_GNU_addr_index", "DW_FORM_GNU_str_index"})
_BLOCK_PREFIX = {"DW_FORM_block1": 1, "DW_FORM_block2": 2, "DW_FORM_block4": 4}
_CONSTANT = frozenset({"DW_FORM_data1", "DW_FORM_data2", "DW_FORM_data4", "DW_FORM_data8", "DW_FORM_udata"})
_UNIT_REFS = {"DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8", "DW_FORM_ref_udata"}
_FORM_NAMES = {code: name for name, code in ENUM_DW_FORM.items()}

# Steps of an abbreviation's plan: skip N bytes, a LEB128, a C string, a block with an N-byte
# length, a block with a LEB128 length, an indirect form; and read the sibling reference.
_SKIP, _LEB128, _CSTR, _BLOCK, _BLOCK_LEB, _INDIRECT, _SIBLING = range(7)


class ShapeError(DWARFError):
    """The bytes are not DIEs as their abbreviations describe them (a hostile or cut file)."""


@dataclass(frozen=True)
class Node:
    """One DIE: where it starts, its tag, where its attributes end and where its subtree ends."""

    offset: int
    tag: str
    attrs_end: int
    end: int
    has_children: bool
    names: frozenset[str]  # its attributes' names (DW_AT_low_pc, ...), shared by its abbreviation


class _Abbrev:
    __slots__ = ("has_children", "names", "plan", "specs", "tag")

    def __init__(self, tag: str, has_children: bool, plan: list[tuple[int, Any]], specs: list[tuple[str, str]]) -> None:
        self.tag = tag
        self.has_children = has_children
        self.plan = plan
        self.specs = specs  # (attribute, form), in order
        self.names = frozenset(name for name, _ in specs)


class UnitShape:
    """The DIE tree of one unit, decoded on demand: children lists are cached per parent."""

    def __init__(self, data: bytes, cu: Any, little: bool) -> None:
        self.data = data
        self.cu = cu
        self.offset = cu.cu_offset
        self.end = min(cu.cu_offset + cu.size, len(data))
        self.top = cu.cu_die_offset
        self._order: Any = "little" if little else "big"
        self._offset_size = 8 if cu.structs.dwarf_format == 64 else 4
        self._address_size = cu["address_size"]
        self._version = cu["version"]
        self._abbrevs: dict[int, _Abbrev] = {}
        self._table = cu.get_abbrev_table()
        self._children: dict[int, tuple[list[Node], list[int]]] = {}
        self._top_node: Node | None = None
        self._nodes: dict[int, Node] = {}
        self._nested: list[int] | None = None

    # -- decoding ------------------------------------------------------------------------------

    def _abbrev(self, code: int) -> _Abbrev:
        found = self._abbrevs.get(code)
        if found is None:
            try:
                decl = self._table.get_abbrev(code)
            except DWARF_ERRORS as exc:
                raise ShapeError(f"no abbreviation {code} in the unit at {self.offset:#x}") from exc
            plan: list[tuple[int, Any]] = []
            for spec in decl["attr_spec"]:
                step = self._step(spec.form)
                if spec.name == "DW_AT_sibling" and spec.form in _UNIT_REFS | {"DW_FORM_ref_addr"}:
                    step = (_SIBLING, spec.form)
                if step[0] == _SKIP and plan and plan[-1][0] == _SKIP:
                    plan[-1] = (_SKIP, plan[-1][1] + step[1])  # one skip for a run of fixed sizes
                elif step != (_SKIP, 0):
                    plan.append(step)
            specs = [(str(spec.name), str(spec.form)) for spec in decl["attr_spec"]]
            found = self._abbrevs[code] = _Abbrev(str(decl["tag"]), decl.has_children(), plan, specs)
        return found

    def _step(self, form: str) -> tuple[int, Any]:
        if form in _FIXED:
            return _SKIP, _FIXED[form]
        if form in _OFFSET_SIZED:
            return _SKIP, self._offset_size
        if form == "DW_FORM_ref_addr":
            return _SKIP, self._offset_size if self._version >= 3 else self._address_size
        if form == "DW_FORM_addr":
            return _SKIP, self._address_size
        if form in _LEB:
            return _LEB128, None
        if form == "DW_FORM_string":
            return _CSTR, None
        if form in _BLOCK_PREFIX:
            return _BLOCK, _BLOCK_PREFIX[form]
        if form in ("DW_FORM_block", "DW_FORM_exprloc"):
            return _BLOCK_LEB, None
        if form == "DW_FORM_indirect":
            return _INDIRECT, None
        raise ShapeError(f"form {form} in the unit at {self.offset:#x}")

    def _leb(self, pos: int) -> tuple[int, int]:
        data, value, shift = self.data, 0, 0
        while True:
            if pos >= self.end:
                raise ShapeError(f"a LEB128 runs past the unit at {self.offset:#x}")
            byte = data[pos]
            pos += 1
            if shift < 70:
                value |= (byte & 0x7F) << shift
            elif byte & 0x7F:
                # Past 64 bits a value is no size, offset or code in its unit: keep it beyond
                # them all, not exact. Accumulated, a hostile run of 0xff bytes costs time in
                # the square of its length (400 KB: 26 s).
                value |= 1 << 70
            shift += 7
            if byte < 0x80:
                return value, pos

    def _skip(self, kind: int, arg: Any, pos: int) -> int:
        if kind == _SKIP:
            return pos + int(arg)
        if kind == _LEB128:
            return self._leb(pos)[1]
        if kind == _CSTR:
            end = self.data.find(b"\0", pos, self.end)
            if end < 0:
                raise ShapeError(f"a string runs past the unit at {self.offset:#x}")
            return end + 1
        if kind == _BLOCK:
            return pos + int(arg) + int.from_bytes(self.data[pos:pos + int(arg)], self._order)
        if kind == _BLOCK_LEB:
            n, pos = self._leb(pos)
            return pos + n
        # _INDIRECT: the form's code, then a value of that form
        code, pos = self._leb(pos)
        step = self._step(_FORM_NAMES.get(code, f"#{code}"))
        if step[0] == _INDIRECT:
            raise ShapeError(f"nested DW_FORM_indirect in the unit at {self.offset:#x}")
        return self._skip(step[0], step[1], pos)

    def _decode(self, pos: int) -> tuple[_Abbrev | None, int, int | None]:
        """(abbreviation or None for a null entry, end of the DIE's attributes, sibling offset)."""
        if pos >= self.end:
            raise ShapeError(f"a DIE at {pos:#x} past the unit at {self.offset:#x}")
        code = self.data[pos]
        if code < 0x80:
            pos += 1
        else:
            code, pos = self._leb(pos)
        if code == 0:
            return None, pos, None
        abbrev = self._abbrev(code)
        sibling = None
        for kind, arg in abbrev.plan:
            if kind == _SIBLING:
                size = 1 if arg == "DW_FORM_ref1" else 2 if arg == "DW_FORM_ref2" else 8 if arg == "DW_FORM_ref8" else 4
                if arg == "DW_FORM_ref_udata":
                    value, pos = self._leb(pos)
                    sibling = self.offset + value
                    continue
                if arg == "DW_FORM_ref_addr":
                    size = self._offset_size if self._version >= 3 else self._address_size
                value = int.from_bytes(self.data[pos:pos + size], self._order)
                sibling = value if arg == "DW_FORM_ref_addr" else self.offset + value
                pos += size
            else:
                pos = self._skip(kind, arg, pos)
        if pos > self.end:
            raise ShapeError(f"the DIE's attributes run past the unit at {self.offset:#x}")
        return abbrev, pos, sibling

    def _spend(self, budget: list[int]) -> None:
        """One DIE more of a walk's budget (a one-item list, shared by the walk's parts)."""
        budget[0] -= 1
        if budget[0] < 0:
            raise ShapeError(f"more than {MAX_DIES:,} DIEs in one walk of the unit at {self.offset:#x}")

    def _subtree_end(self, pos: int, budget: list[int]) -> int:
        """The offset after the children list that starts at `pos` (a linear scan)."""
        depth = 1
        while depth:
            self._spend(budget)
            abbrev, pos, _ = self._decode(pos)
            if abbrev is None:
                depth -= 1
            elif abbrev.has_children:
                depth += 1
                if depth > MAX_DEPTH:
                    raise ShapeError(f"DIEs nested deeper than {MAX_DEPTH} in the unit at {self.offset:#x}")
        return pos

    def code_span(self, node: Node) -> tuple[int, int] | None:
        """[low_pc, high_pc) of a DIE whose DW_AT_low_pc is an address and DW_AT_high_pc an
        address or a length, read from its bytes; None for any other (DW_AT_ranges, an indexed
        address): the caller asks pyelftools."""
        code, pos = self._leb(node.offset)
        low = high = None
        high_is_length = False
        for name, form in self._abbrev(code).specs:
            if name == "DW_AT_low_pc" and form == "DW_FORM_addr":
                low = int.from_bytes(self.data[pos:pos + self._address_size], self._order)
            elif name == "DW_AT_high_pc" and (form == "DW_FORM_addr" or form in _CONSTANT):
                size = self._address_size if form == "DW_FORM_addr" else _FIXED.get(form)
                if size is None:
                    high = self._leb(pos)[0]
                else:
                    high = int.from_bytes(self.data[pos:pos + size], self._order)
                high_is_length = form != "DW_FORM_addr"
            elif name in ("DW_AT_low_pc", "DW_AT_high_pc", "DW_AT_ranges"):
                return None
            step = self._step(form)
            pos = self._skip(step[0], step[1], pos)
        if low is None or high is None:
            return None
        return low, low + high if high_is_length else high

    def nested_functions(self) -> list[int]:
        """Offsets of the functions with code that sit inside another function with code (GNU
        C's nested functions, Fortran's contained procedures, a local class's methods): their
        code lies outside the function they sit in, so the top level does not lead to it. One
        linear scan of the unit, made once."""
        if self._nested is None:
            out: list[int] = []
            inside = [False]  # per open children list: whether it is inside a function with code
            pos, budget = self.top_node().attrs_end, [MAX_DIES]
            while inside and pos < self.end:
                self._spend(budget)
                if len(inside) > MAX_DEPTH:
                    raise ShapeError(f"DIEs nested deeper than {MAX_DEPTH} in the unit at {self.offset:#x}")
                abbrev, attrs_end, _ = self._decode(pos)
                if abbrev is None:
                    inside.pop()
                else:
                    function = abbrev.tag == "DW_TAG_subprogram" and bool(abbrev.names & _CODE_ATTRS)
                    if function and inside[-1]:
                        out.append(pos)
                    if abbrev.has_children:
                        inside.append(inside[-1] or function)
                pos = attrs_end
            self._nested = out
        return self._nested

    # -- the tree ------------------------------------------------------------------------------

    def top_node(self) -> Node:
        if self._top_node is None:
            abbrev, attrs_end, _ = self._decode(self.top)
            if abbrev is None:
                raise ShapeError(f"the unit at {self.offset:#x} has no top DIE")
            # The top DIE's subtree is the rest of the unit.
            self._top_node = Node(self.top, abbrev.tag, attrs_end, self.end if abbrev.has_children else attrs_end,
                                  abbrev.has_children, abbrev.names)
            self._nodes[self.top] = self._top_node
        return self._top_node

    def node(self, offset: int) -> Node | None:
        """The DIE at `offset`, if a walk met it (the top, and the children listed so far)."""
        if offset == self.top:
            return self.top_node()
        return self._nodes.get(offset)

    def children(self, node: Node) -> list[Node]:
        """The children of `node`, in order; a sibling reference that does not move forward
        inside the parent is ignored for a linear scan."""
        return self._kids(node)[0]

    def _kids(self, node: Node) -> tuple[list[Node], list[int]]:
        known = self._children.get(node.offset)
        if known is not None:
            return known
        out: list[Node] = []
        if not node.has_children:
            return out, []
        budget = [MAX_DIES]
        pos = node.attrs_end
        while True:
            self._spend(budget)
            abbrev, attrs_end, sibling = self._decode(pos)
            if abbrev is None:
                break
            if not abbrev.has_children:
                end = attrs_end
            elif sibling is not None and attrs_end < sibling <= node.end:
                end = sibling
            else:
                end = self._subtree_end(attrs_end, budget)
            child = Node(pos, abbrev.tag, attrs_end, end, abbrev.has_children, abbrev.names)
            out.append(child)
            self._nodes[pos] = child
            pos = end
        known = self._children[node.offset] = (out, [k.offset for k in out])
        return known

    def path_to(self, pos: int) -> list[Node]:
        """The DIEs from the unit's top down to the one whose attributes hold byte `pos`; empty
        when no DIE's attributes do (a null entry, the unit header)."""
        node = self.top_node()
        if not node.offset <= pos < node.end:
            return []
        path = [node]
        for _ in range(MAX_DEPTH):
            if pos < node.attrs_end:
                return path
            kids, offsets = self._kids(node)
            i = bisect_right(offsets, pos) - 1
            if i < 0 or pos >= kids[i].end:
                return []
            node = kids[i]
            path.append(node)
        return []


class DieTree:
    """The units of one .debug_info and their shapes, made on first use."""

    def __init__(self, dwarfinfo: Any) -> None:
        self.dwarfinfo = dwarfinfo
        self._shapes: dict[int, UnitShape] = {}

    @cached_property
    def data(self) -> bytes:
        """The whole .debug_info (pyelftools holds it in memory, decompressed)."""
        section = self.dwarfinfo.debug_info_sec
        if section is None:
            return b""
        stream = section.stream
        getvalue = getattr(stream, "getvalue", None)
        if getvalue is not None:
            return bytes(getvalue())
        stream.seek(0)
        return bytes(stream.read(section.size))

    @cached_property
    def unit_offsets(self) -> list[tuple[int, int]]:
        """(start, end) of every unit, in file order (headers only)."""
        out: list[tuple[int, int]] = []
        try:
            for cu in self.dwarfinfo.iter_CUs():
                if len(out) > MAX_DIES:
                    break
                out.append((cu.cu_offset, cu.cu_offset + cu.size))
        except DWARF_ERRORS:
            pass  # the units before the unreadable one
        return out

    def shape_at(self, pos: int) -> UnitShape | None:
        """The shape of the unit holding byte `pos` of .debug_info."""
        units = self.unit_offsets
        i = bisect_right(units, (pos, float("inf"))) - 1
        if i < 0 or pos >= units[i][1]:
            return None
        start = units[i][0]
        shape = self._shapes.get(start)
        if shape is None:
            try:
                cu = self.dwarfinfo.get_CU_at(start)
                shape = self._shapes[start] = UnitShape(self.data, cu, self.dwarfinfo.config.little_endian)
            except DWARF_ERRORS:
                return None
        return shape


_CODE_ATTRS = frozenset({"DW_AT_low_pc", "DW_AT_ranges"})  # what a DIE with code has (DwarfIndex.die_ranges)
_CONTAINERS = frozenset({"DW_TAG_namespace", "DW_TAG_module"})


@dataclass(frozen=True)
class Holder:
    """A child of a unit's top DIE (or of a namespace or module) that holds code: a function with
    an address range, or a namespace or module with such functions. `ranges`: the function's, or
    those of the namespace's own functions; `nested`: also those of the namespaces inside it."""

    offset: int
    tag: str
    ranges: tuple[tuple[int, int], ...]
    nested: tuple[tuple[int, int], ...]


class CodeHolders:
    """Which children of a unit's top DIE, and of the namespaces and modules in it, hold the code
    at an address: the way to the one function a PC is in without pyelftools reading the unit's
    top level (most of a big unit: sqlite3's amalgamation). Per parent, the list is made once from
    the unit's shape; pyelftools reads only the functions that have code. `ranges_of(die, cu)` is
    DwarfIndex.die_ranges."""

    def __init__(self, tree: DieTree, ranges_of: Callable[[Any, Any], list[tuple[int, int]]]) -> None:
        self.tree = tree
        self._ranges_of = ranges_of
        self._levels: dict[int, list[Holder] | None] = {}
        self._stabs: dict[tuple[int, bool], _Stab] = {}

    def holders(self, cu: Any, level: int) -> list[Holder] | None:
        """The code holders among the children of the DIE at `level` (the top or a namespace),
        in order; None when the unit's bytes cannot be read that way."""
        if level not in self._levels:
            try:
                self._levels[level] = self._read(cu, level, 0)
            except DWARF_ERRORS:
                self._levels[level] = None
        return self._levels[level]

    def _read(self, cu: Any, level: int, depth: int) -> list[Holder]:
        shape = self.tree.shape_at(cu.cu_die_offset)
        node = shape.node(level) if shape is not None else None
        if shape is None or node is None or depth > MAX_DEPTH:
            raise ShapeError(f"the DIE at {level:#x} is not in its unit's shape")

        def code(n: Node) -> list[tuple[int, int]]:
            if n.tag != "DW_TAG_subprogram" or not n.names & _CODE_ATTRS:
                return []  # a declaration or an abstract instance: no code of its own
            # From the bytes where they say it plainly: these ranges only choose which
            # functions are read, and include those die_ranges gives (it also drops the
            # linker's discarded code), so the answer is the same.
            span = shape.code_span(n)
            if span is not None:
                return [span] if span[0] < span[1] else []
            return self._ranges_of(cu.get_DIE_from_refaddr(n.offset), cu)

        out = []
        for child in shape.children(node):
            if child.tag == "DW_TAG_subprogram":
                ranges = code(child)
                nested = ranges
            elif child.tag in _CONTAINERS:
                ranges = [r for c in shape.children(child) for r in code(c)]
                inner = self._levels.get(child.offset)
                if inner is None:
                    inner = self._levels[child.offset] = self._read(cu, child.offset, depth + 1)
                nested = ranges + [r for h in inner if h.tag in _CONTAINERS for r in h.nested]
            else:
                continue
            if nested:
                out.append(Holder(child.offset, child.tag, tuple(ranges), tuple(nested)))
        return out

    def nested_holding(self, cu: Any, addr: int) -> bool | None:
        """Whether a function nested in another one (UnitShape.nested_functions) has code at
        `addr`; None: unknown."""
        try:
            shape = self.tree.shape_at(cu.cu_die_offset)
            if shape is None:
                return None
            for offset in shape.nested_functions():
                if any(lo <= addr < hi for lo, hi in self._ranges_of(cu.get_DIE_from_refaddr(offset), cu)):
                    return True
        except DWARF_ERRORS:
            return None
        return False

    def children_tagged(self, cu: Any, die: Any, tags: frozenset[str]) -> list[Any] | None:
        """The pyelftools DIEs of the children of `die` that have one of `tags`, in order, the
        others not read; None when the shape has not met `die`."""
        try:
            shape = self.tree.shape_at(cu.cu_die_offset)
            node = shape.node(die.offset) if shape is not None else None
            if shape is None or node is None:
                return None
            out = []
            for child in shape.children(node):
                if child.tag in tags:
                    found = cu.get_DIE_from_refaddr(child.offset)
                    found.set_parent(die)
                    out.append(found)
        except DWARF_ERRORS:
            return None
        return out

    def children_holding(self, cu: Any, level: Any, addr: int, *, nested: bool = True) -> list[Any] | None:
        """The pyelftools DIEs of the children of `level` (a DIE) whose code holds `addr`, in
        order; `nested=False`: a namespace counts by its own functions only. None: unknown."""
        key = (level.offset, nested)
        stab = self._stabs.get(key)
        if stab is None:
            found = self.holders(cu, level.offset)
            if found is None:
                return None
            stab = self._stabs[key] = _Stab([(lo, hi, i) for i, h in enumerate(found)
                                             for lo, hi in (h.nested if nested else h.ranges)])
        holders = self._levels[level.offset]
        assert holders is not None
        out = []
        for i in stab.holding(addr):
            die = cu.get_DIE_from_refaddr(holders[i].offset)
            die.set_parent(level)
            out.append(die)
        return out


class _Stab:
    """Intervals, each with an index; `holding(addr)`: the indexes of those holding `addr`, in
    increasing order (one bisection when the intervals do not overlap)."""

    def __init__(self, items: list[tuple[int, int, int]]) -> None:
        items = sorted(r for r in items if r[0] < r[1])
        self._starts = [lo for lo, _, _ in items]
        self._items = items
        self._reach: list[int] = []
        reach = 0
        for _, hi, _ in items:
            reach = max(reach, hi)
            self._reach.append(reach)

    def holding(self, addr: int) -> list[int]:
        found: set[int] = set()
        i = bisect_right(self._starts, addr) - 1
        while i >= 0 and self._reach[i] > addr:
            lo, hi, index = self._items[i]
            if addr < hi:
                found.add(index)
            i -= 1
        return sorted(found)
