"""Fix advice per site (the OpenVMS remedies): copy a packed member out with memcpy or an
unaligned-safe accessor; align a variable ualdbg can name (or fix the COMMON layout); copy a
small datum read many times once into an aligned buffer. Chosen from the site's `data` and
counts, with the count that makes the fix worth doing."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def advise(site: dict[str, Any], vas: list[str] | None = None) -> Advice | None:
    """Advice for one site of a trace document; `vas` are the VAs of its kept records."""
    data = site.get("data") or {}
    via = data.get("via") or {}
    count = int(site.get("count") or 0)
    sizes = site.get("sizes") or []
    width = max(sizes) if sizes else None
    here = f"{_times(count)} here"
    packed = via if via.get("packed") else (data if data.get("packed") else None)
    if packed is not None and packed.get("member"):
        where = via.get("path") or data.get("path") or packed["member"]
        return Advice(MEMCPY, f"{where} is a member of packed {packed.get('struct')}: copy the field out with memcpy "
                              f"(or an unaligned-safe accessor such as get_unaligned) instead of dereferencing it; {here}")
    reads = site.get("access") == "read"
    if vas and count >= HOT_COUNT and reads:
        distinct = len(set(vas))
        reuse = len(vas) / distinct if distinct else 0.0
        if reuse >= HOT_REUSE:
            return Advice(COPY_ONCE, f"each address is read {reuse:.0f} times ({len(vas)} reads of {distinct} address"
                                     f"{'es' if distinct != 1 else ''} kept): copy the data once to an aligned buffer "
                                     f"and read it there; pays from about {HOT_REUSE:.0f} reads per copy, {here}")
    if via.get("pointer_misaligned") and via.get("struct"):
        return Advice(MEMCPY, f"{via['path']} reads {via['struct']} through {via['pointer']}, which is not "
                              f"{via.get('target_align')}-byte aligned: copy the field out with memcpy (or an unaligned-safe "
                              f"accessor), or place the struct at an aligned offset of its buffer; {here}")
    kind = data.get("kind")
    if kind == "common":
        view = f" through the {width}-byte view {via['path']} in {via['function']}" if via.get("path") and width else ""
        return Advice(ALIGN, f"{data.get('path')} of {data.get('container')} is accessed off its alignment{view}: fix the "
                             f"COMMON layout (largest members first, or pad so {data.get('name')} starts at a multiple of "
                             f"{width or 8}), or declare it with the type the routines use; {here}")
    if kind in ("global", "static", "local", "parameter"):
        elem = data.get("element_type") or data.get("type") or "?"
        esize = data.get("element_size")
        need = width or 8
        mod = f"{int(data['va'], 16) % need} mod {need}"
        if esize == 1 and width and width > 1:
            return Advice(MEMCPY, f"{data.get('path')} is a byte of {data.get('name')} accessed {width} bytes at a time at {mod}: "
                                  f"copy the value out with memcpy (or an unaligned-safe accessor) or keep such fields at "
                                  f"offsets that are multiples of {width}; {here}")
        what = f"{elem} elements accessed {width} bytes wide" if esize and width and esize < width else elem
        return Advice(ALIGN, f"{data.get('path')} ({what}) is at {mod}: align it with alignas({need}) / "
                             f"__attribute__((aligned({need}))) on the variable or member; {here}")
    if via.get("pointer_misaligned"):
        return Advice(ALIGN, f"{via['pointer']} ({via.get('type')}) is not {via.get('target_align')}-byte aligned: align the "
                             f"buffer it points into (aligned_alloc, alignas, no odd byte offset); {here}")
    return None


def vas_by_pc(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The VAs of a trace document's kept records, by PC, in record order (records without one
    left out)."""
    records = doc.get("records", [])
    if hasattr(records, "vas_by_pc"):  # a record table (ualdbg/engines/records.py): no object per record
        return records.vas_by_pc()  # type: ignore[no-any-return]
    vas: dict[str, list[str]] = {}
    for rec in records:
        if rec.get("va"):
            vas.setdefault(rec["pc"], []).append(rec["va"])
    return vas


def advice_by_pc(doc: dict[str, Any]) -> dict[str, Advice]:
    """Advice for every site of a trace document that has some, by PC."""
    vas = vas_by_pc(doc)
    out = {}
    for site in doc.get("sites", []):
        a = advise(site, vas.get(site["pc"]))
        if a is not None:
            out[site["pc"]] = a
    return out
