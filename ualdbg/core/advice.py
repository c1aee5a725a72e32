"""Fix advice per site (the OpenVMS remedies): copy a packed member out with memcpy or an
unaligned-safe accessor; align a variable ualdbg can name (or fix the COMMON layout); copy a
small datum read many times once into an aligned buffer. Chosen from the site's `data` and
counts, with the count that makes the fix worth doing."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .model import AccessKind

if TYPE_CHECKING:
    from .result import Site, TraceResult

MEMCPY, ALIGN, COPY_ONCE = "memcpy", "align", "copy-once"
HOT_COUNT = 100  # accesses at a site before copying its data once is worth the copy
HOT_REUSE = 4.0  # reads per distinct address before copying once pays (one copy, N aligned reads)


@dataclass(frozen=True)
class Advice:
    remedy: str  # memcpy | align | copy-once
    text: str

    def to_json(self) -> dict[str, str]:
        return {"remedy": self.remedy, "text": self.text}


def _times(n: int) -> str:
    return f"{n} access{'es' if n != 1 else ''}"


def advise(site: Site, vas: Sequence[int] | None = None) -> Advice | None:
    """Advice for one site of a trace; `vas` are the VAs of its kept records."""
    data = site.data
    via = data.via if data is not None else None
    count = site.count
    width = max(site.sizes) if site.sizes else None
    here = f"{_times(count)} here"
    packed = via if via is not None and via.packed else (data if data is not None and data.packed else None)
    if data is not None and packed is not None and packed.member:
        where = (via.path if via is not None else None) or data.path or packed.member
        return Advice(MEMCPY, f"{where} is a member of packed {packed.struct}: copy the field out with memcpy "
                              f"(or an unaligned-safe accessor such as get_unaligned) instead of dereferencing it; {here}")
    reads = site.access is AccessKind.READ
    if vas and count >= HOT_COUNT and reads:
        distinct = len(set(vas))
        reuse = len(vas) / distinct if distinct else 0.0
        if reuse >= HOT_REUSE:
            return Advice(COPY_ONCE, f"each address is read {reuse:.0f} times ({len(vas)} reads of {distinct} address"
                                     f"{'es' if distinct != 1 else ''} kept): copy the data once to an aligned buffer "
                                     f"and read it there; pays from about {HOT_REUSE:.0f} reads per copy, {here}")
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
    if kind in ("global", "static", "local", "parameter"):
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


def advice_by_pc(result: TraceResult) -> dict[int, Advice]:
    """Advice for every site of a trace that has some, by PC."""
    vas = vas_by_pc(result)
    out = {}
    for site in result.sites:
        a = advise(site, vas.get(site.pc))
        if a is not None:
            out[site.pc] = a
    return out
