"""What the data at a faulting address is (`DataRef`: a variable and the element or member the
address is in, a stack, the heap, a mapping) and the pointer in scope it was reached through
(`Via`). symbols/data.py finds them; a site of the TraceResult keeps its first fault's; render/,
the fix advice and the audit read them; core/document.py writes and loads them."""
from __future__ import annotations

from ..lazyclass import dataclass


@dataclass(frozen=True)
class Via:
    """The pointer in scope at the PC that the accessed address is reached through."""

    pointer: str  # the variable's name, e.g. "app"
    type: str  # "const struct app_hdr *"
    path: str  # "app->seq+0", "status[1]+0"
    function: str  # the function (or inlined helper) whose variable it is
    struct: str | None = None
    member: str | None = None
    member_offset: int | None = None
    member_align: int | None = None
    packed: bool = False  # the struct places members off their alignment
    target_align: int | None = None  # alignment the pointed-to type needs
    pointer_misaligned: bool = False  # the pointer itself is off that alignment


@dataclass(frozen=True)
class Touched:
    """The range of data a site's records touched (engines/agent.py): the lowest and highest
    address, each named as the site's data is (`table[0].stamp+0`), and how many distinct
    addresses in how many records."""

    first: str
    last: str
    low: str
    high: str
    distinct: int
    records: int


@dataclass(frozen=True)
class DataRef:
    """What the data at one VA is. `kind`: global | static | common | local | parameter | symbol
    (symbol table only) | image (a module's data without a symbol) | argv | environ (their strings
    on the main stack) | stack | heap | anonymous | file | unknown."""

    kind: str
    text: str  # one line for people: "r2[0]+0 in COMMON /data/ (common_block.f90:20)"
    va: int
    name: str | None = None  # the variable or symbol
    path: str | None = None  # name plus the element/member path: "req.status[1]"
    offset: int | None = None  # bytes into that element or member
    type: str | None = None  # the variable's type
    element_type: str | None = None  # the type at `path`
    element_size: int | None = None
    container: str | None = None  # "COMMON /data/", the function of a local or static
    module: str | None = None
    file: str | None = None  # declaration
    line: int | None = None
    tid: int | None = None  # stack of this thread
    frame: int | None = None  # a local's frame: 0 the faulting one, 1 its caller, ...
    start: int | None = None  # where the variable starts (runtime VA) and its size in bytes
    size: int | None = None
    mapping: str | None = None  # the /proc/PID/maps line's path, "" for anonymous
    mapping_offset: int | None = None  # VA - mapping start (+ file offset for files)
    struct: str | None = None  # innermost struct crossed and its member holding the VA
    member: str | None = None
    packed: bool = False
    # A local's storage: "frame" (its DWARF location is off the frame base, CFA, rsp or rbp: a slot
    # of its own that alignas can move), else "elsewhere" (optimised code describing a local by
    # the memory it was loaded from, e.g. an inlined helper's const local that is its caller's buffer)
    storage: str | None = None
    touched: Touched | None = None  # the range of data its site's records touched
    via: Via | None = None
