"""Per-architecture facts: names as debuggers and users spell them, ELF e_machine detection,
the SPARC and Alpha load/store decoders against encodings from GNU as."""
from __future__ import annotations

import pytest

from ualdbg.core.model import AccessKind
from ualdbg.isa.arch import ALPHA, ARCHES, SPARC64, X86_64, alpha, arch_by_name, arch_info, elf_arch, sparc64


@pytest.mark.parametrize("name, arch", [("i386:x86-64", "x86_64"), ("x86_64", "x86_64"), ("sparc:v9a", "sparc64"),
                                        ("alpha:ev4", "alpha"), ("hppa1.1", "hppa"), ("sh2a-or-sh4", "sh4"),
                                        ("aarch64", "aarch64"), ("riscv:rv64", "riscv64"),
                                        ("mips:isa32r2/eb", "mips"), ("mips:isa32r2/el", "mipsel"),
                                        ("mips:isa64r2/el", "mips64el")])
def test_debugger_names(name: str, arch: str) -> None:
    assert arch_info(name).name == arch


def test_unknown_names_are_errors() -> None:
    with pytest.raises(ValueError, match="unsupported architecture"):
        arch_info("vax")
    with pytest.raises(ValueError, match="unknown architecture"):
        arch_by_name("vax")
    assert arch_by_name("arm64").name == "aarch64" and arch_by_name("SPARC").name == "sparc64"


def test_elf_machine(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def elf(machine: int, big: bool) -> str:
        head = b"\x7fELF" + bytes([2, 2 if big else 1, 1]) + bytes(9)
        head += (2).to_bytes(2, "big" if big else "little") + machine.to_bytes(2, "big" if big else "little")
        path = tmp_path / f"e{machine}"
        path.write_bytes(head + bytes(64))
        return str(path)

    assert elf_arch(elf(43, True)) is SPARC64
    assert elf_arch(elf(0x9026, False)) is ALPHA
    assert elf_arch(elf(62, False)) is X86_64
    assert elf_arch(elf(0x1234, False)) is None
    assert elf_arch(elf(8, False)) is ARCHES["mips64el"]  # EM_MIPS, 64-bit: n64, not o32's mipsel
    (tmp_path / "text").write_text("#!/bin/sh\n")
    assert elf_arch(str(tmp_path / "text")) is None


def test_si_addr_meaning_per_architecture() -> None:
    assert X86_64.si_addr == "null" and not X86_64.si_addr_is_data
    assert ARCHES["riscv64"].si_addr == "pc"
    assert all(ARCHES[a].si_addr_is_data for a in ("sparc64", "alpha", "hppa", "sh4", "aarch64"))
    assert SPARC64.native_sigbus == 10 and ARCHES["aarch64"].native_sigbus == 7


@pytest.mark.parametrize("word, text", [
    ("c2260000", "stw %g1, [%i0]"),
    ("c25a0009", "ldx [%o0 + %o1], %g1"),
    ("d41a0000", "ldd [%o0], %o2"),  # capstone 5 cannot decode this one
    ("d43a0000", "std %o2, [%o0]"),
    ("d4ba1000", "stda %o2, [%o0] 0x80"),
    ("e2543ffe", "ldsh [%l0 - 0x2], %l1"),
])
def test_sparc_decoder(word: str, text: str) -> None:
    m = sparc64.decode(int(word, 16))
    assert m is not None and m.text == text


def test_sparc_double_float_register_numbering() -> None:
    # lddf [%o0 + 8], %f32: rd=1 encodes f32 (bit 0 of rd is bit 5 of the register number)
    m = sparc64.decode(0xC31A2008)
    assert m is not None and m.name == "lddf" and m.operands[0].data == ("f32",) and m.text == "lddf [%o0 + 0x8], %f32"
    assert sparc64.decode(0x81C3E008) is None  # retl


def test_alpha_decoder() -> None:
    m = alpha.decode(0xB0300000)  # stl t0, 0(a0)
    assert m is not None and len(m.operands) == 1
    op = m.operands[0]
    assert (m.name, op.size, op.kind, op.data, op.base, m.text) == ("stl", 4, AccessKind.WRITE, ("t0",), "a0", "stl t0, 0(a0)")
    assert alpha.decode(0x2C300000) is None  # ldq_u: ignores the low address bits, never traps
