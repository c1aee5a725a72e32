"""Fix advice per site, by the class of its data (docs/CLI.md, "Which data, and how to fix it"):
a packed member read or written through its struct is legal C, so the advice is its layout; a
variable ualdbg can name gets alignas (or a COMMON layout); heap and mapped-file data get the
offset rule of their block or format; data read many times and never written meanwhile is copied
once. Where no fix that a reviewer would accept follows from what is known (a stack slot no
variable names, argv/environment strings, a local that is only a view of its caller's buffer),
there is no advice. Chosen from the site's `data`, its counts and the run's records."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..lazyclass import dataclass
from .dataref import Via
from .model import AccessKind

if TYPE_CHECKING:
    from .dataref import DataRef
    from .result import Site, TraceResult

MEMCPY, ALIGN, COPY_ONCE, LAYOUT = "memcpy", "align", "copy-once", "layout"
HOT_COUNT = 100  # accesses at a site before copying its data once is worth the copy
HOT_REUSE = 4.0  # reads per distinct address before copying once pays (one copy, N aligned reads)
MALLOC_ALIGN = 16  # glibc's malloc returns blocks aligned to 16 on x86-64 (2 * sizeof(size_t))


@dataclass(frozen=True)
class Advice:
    remedy: str  # memcpy | align | copy-once | layout
    text: str

    def to_json(self) -> dict[str, str]:
        return {"remedy": self.remedy, "text": self.text}


def _times(n: int) -> str:
    return f"{n} access{'es' if n != 1 else ''}"


def _packed_layout(packed: DataRef | Via, data: DataRef, via: Via | None, width: int | None,
                   count: int, access: AccessKind | None) -> Advice:
    """A member of a packed struct reached through the struct (`h->seq`, `recs[i].value`): legal
    C, the compiler knows the member is packed (on a strict CPU it splits the access into bytes
    where it can); the fix worth a review is the layout."""
    where = (via.path if via is not None else None) or data.path or packed.member
    struct, member = packed.struct or "struct", packed.member
    member_align, off = (packed.member_align, packed.member_offset) if isinstance(packed, Via) else (None, None)
    need = member_align or width or 8
    verb = {AccessKind.WRITE: "written", AccessKind.READ: "read"}.get(access, "accessed") if access else "accessed"
    head = (f"{where} is a member of packed {struct}, {verb} through the struct: legal, but costs {count} "
            f"trap{'s' if count != 1 else ''} on strict CPUs (where the compiler cannot split it into bytes) and "
            f"{_times(count)} across alignment here.")
    if off is not None and off % need == 0:
        return Advice(LAYOUT, f"{head} {member} is at offset {off} of {struct}, a multiple of {need}: the struct itself "
                              f"starts off its alignment; place it at an offset of its buffer that is a multiple of "
                              f"{need} (as Linux's NET_IP_ALIGN shifts a received frame by 2)")
    at = f" (offset {off})" if off is not None else ""
    return Advice(LAYOUT, f"{head} Fix the layout: put {member}{at} at an offset that is a multiple of {need} "
                          f"(members largest first, or explicit padding), or drop packed where {struct} is not a "
                          f"wire or file format")


def _heap(data: DataRef, width: int, here: str) -> Advice | None:
    va = data.va
    if va % width == 0:
        return None
    if data.start and data.size:  # the block is known (a debugger read the heap)
        where = f"the {width}-byte data is at offset {va - data.start} of its {data.size}-byte malloc'd block"
    else:  # [heap], or an anonymous mapping (mmap'd: page-aligned; a thread's arena: malloc's rule)
        what = "malloc'd memory" if data.kind == "heap" else "mmap'd or arena memory"
        where = (f"{what} at {va % MALLOC_ALIGN} mod {MALLOC_ALIGN}: its blocks start {MALLOC_ALIGN}-byte aligned (or "
                 f"more), so the {width}-byte data is at an offset of {va % width} mod {width} into its block")
    return Advice(ALIGN, f"{where}: keep {width}-byte data at offsets that are multiples of {width} in the block (no "
                         f"odd offset such as malloc()+1), or, where the block is a byte stream, read it with memcpy "
                         f"into a local of the type; {here}")


def _file(data: DataRef, width: int, here: str) -> Advice | None:
    off = data.mapping_offset
    if off is None or off % width == 0:
        return None
    return Advice(MEMCPY, f"the data is at offset {off} of the mapped file {data.mapping} ({off % width} mod "
                          f"{width}): the program cannot align a file's contents, so read it with memcpy into a local "
                          f"(or an unaligned-safe accessor); where you own the format, put {width}-byte fields at "
                          f"offsets that are multiples of {width}; {here}")


def advise(site: Site, vas: Sequence[int] | None = None, *, read_only: bool | None = None) -> Advice | None:
    """Advice for one site of a trace; `vas` are the VAs of its kept records, and `read_only`
    whether they hold every fault of the site and no recorded write touched its data between its
    first and last record (advice_by_pc works it out; None: not known, no copy-once)."""
    data = site.data
    via = data.via if data is not None else None
    count = site.count
    width = max(site.sizes) if site.sizes else None
    access = site.access
    here = f"{_times(count)} here"
    packed = via if via is not None and via.packed else (data if data is not None and data.packed else None)
    if data is not None and packed is not None and packed.member:
        if packed is via or via is None or via.struct:
            return _packed_layout(packed, data, via, width, count, access)
        # the member's address taken and dereferenced through a plain scalar pointer: the
        # compiler no longer knows it is packed (gcc's -Waddress-of-packed-member)
        return Advice(MEMCPY, f"{data.path} is a member of packed {packed.struct} reached through the "
                              f"scalar pointer {via.pointer} ({via.type}), which loses the packed "
                              f"attribute: copy it out with memcpy, or access it through the struct; {here}")
    if vas and count >= HOT_COUNT and access is AccessKind.READ and read_only:
        distinct = len(set(vas))
        reuse = len(vas) / distinct if distinct else 0.0
        if reuse >= HOT_REUSE:
            return Advice(COPY_ONCE, f"each address is read {reuse:.0f} times ({len(vas)} reads of {distinct} address"
                                     f"{'es' if distinct != 1 else ''}) and nothing wrote it meanwhile: copy the data "
                                     f"once to an aligned buffer and read it there; pays from about {HOT_REUSE:.0f} "
                                     f"reads per copy, {here}")
    if data is None:
        return None
    if via is not None and via.pointer_misaligned and via.struct:
        return Advice(MEMCPY, f"{via.path} reads {via.struct} through {via.pointer}, which is not "
                              f"{via.target_align}-byte aligned: copy the field out with memcpy (or an unaligned-safe "
                              f"accessor), or place the struct at an aligned offset of its buffer; {here}")
    kind = data.kind
    if kind == "common":
        view = f" through the {width}-byte view {via.path} in {via.function}" if via is not None and via.path and width else ""
        return Advice(ALIGN, f"{data.path} of {data.container} is accessed off its alignment{view}: fix the "
                             f"COMMON layout (largest members first, or pad so {data.name} starts at a multiple of "
                             f"{width or 8}), or declare it with the type the routines use; {here}")
    if kind in ("global", "static", "local") and (data.storage or "frame") == "frame":
        # (a local whose DWARF location is not in its frame, an optimised inline helper's const
        # local that is a view of its caller's buffer, cannot be given alignas: no advice)
        elem = data.element_type or data.type or "?"
        esize = data.element_size
        need = width or 8
        mod = f"{data.va % need} mod {need}"
        if esize == 1 and width and width > 1:
            return Advice(MEMCPY, f"{data.path} is a byte of {data.name} accessed {width} bytes at a time at {mod}: "
                                  f"copy the value out with memcpy (or an unaligned-safe accessor) or keep such fields at "
                                  f"offsets that are multiples of {width}; {here}")
        what = f"{elem} elements accessed {width} bytes wide" if esize and width and esize < width else elem
        return Advice(ALIGN, f"{data.path} ({what}) is at {mod}: align it with alignas({need}) / "
                             f"__attribute__((aligned({need}))) on the variable or member; {here}")
    if via is not None and via.pointer_misaligned:
        return Advice(ALIGN, f"{via.pointer} ({via.type}) is not {via.target_align}-byte aligned: align the "
                             f"buffer it points into (aligned_alloc, alignas, no odd byte offset); {here}")
    if width and width > 1 and (kind == "heap" or (kind == "anonymous" and data.mapping == "")):
        return _heap(data, width, here)
    if width and width > 1 and kind == "file":
        return _file(data, width, here)
    if width and width > 1 and kind in ("argv", "environ"):
        return Advice(MEMCPY, f"{data.path or kind} is in the {kind} strings, which the kernel packs one after "
                              f"another at no alignment (where they fall moves with every string above them): copy "
                              f"the bytes out with memcpy into a local of the type (or parse the text) instead of "
                              f"reading them through a wider pointer; {here}")
    return None


def vas_by_pc(result: TraceResult) -> Mapping[int, list[int]]:
    """The VAs of a trace's kept records, by PC, in record order (records without one left out)."""
    records = result.records
    if hasattr(records, "vas_by_pc"):  # a record table (ualdbg/engines/records.py): no object per record
        return records.vas_by_pc()  # type: ignore[no-any-return]
    vas: dict[int, list[int]] = {}
    for rec in records:
        if rec.va is not None:
            vas.setdefault(rec.pc, []).append(rec.va)
    return vas


def complete_records(site: Site, result: TraceResult, kept: int) -> bool:
    """Whether the trace keeps a record of every fault of the site (not patched after its first
    traps, no record dropped from the ring)."""
    return not result.records_dropped and not site.patched and kept == site.count


_WRITES = (AccessKind.WRITE, AccessKind.READ_WRITE)
_Access = tuple[int, int, int, int, "AccessKind | None"]  # seq, pc, va, size, access


def _accesses(result: TraceResult) -> list[_Access]:
    """(seq, pc, va, size, access) of every kept record with a VA, read once per trace."""
    return [(r.seq, r.pc, r.va, r.size or 1, r.access) for r in result.records if r.va]


def _read_only(site: Site, result: TraceResult, accesses: list[_Access]) -> bool:
    """No recorded write (of any site) touched the site's addresses between its first and last
    record. A write of the same data as wide as the read is misaligned too, so it trapped and has
    its record, unless a site that writes was patched or the ring dropped records: then not known."""
    if any(s.access in _WRITES and s.patched for s in result.sites):
        return False
    mine = [a for a in accesses if a[1] == site.pc]
    if not mine:
        return False
    first, last = min(a[0] for a in mine), max(a[0] for a in mine)
    spans = sorted({(a[2], a[3]) for a in mine})
    lo, hi = spans[0][0], max(va + n for va, n in spans)
    for seq, _pc, va, size, access in accesses:
        if access not in _WRITES or not first <= seq <= last or va >= hi or va + size <= lo:
            continue
        if any(va < a + n and va + size > a for a, n in spans):
            return False
    return True


def advice_by_pc(result: TraceResult) -> dict[int, Advice]:
    """Advice for every site of a trace that has some, by PC."""
    vas = vas_by_pc(result)
    out = {}
    accesses: list[_Access] | None = None
    for site in result.sites:
        kept = vas.get(site.pc)
        read_only = None
        if kept and site.access is AccessKind.READ and site.count >= HOT_COUNT \
                and complete_records(site, result, len(kept)):
            accesses = _accesses(result) if accesses is None else accesses
            read_only = _read_only(site, result, accesses)
        a = advise(site, kept, read_only=read_only)
        if a is not None:
            out[site.pc] = a
    return out
