"""The CPU plug-ins (isa/cpu.py, isa/arch/): every module of isa/arch/ declares its CPUs and is in
the one table, each CPU says how ualdbg finds its faults, every declared decoder meets the
InsnDecoder protocol and decodes for its own CPU, and nothing in isa/ is loaded by name."""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import ualdbg.isa.arch as arch_pkg
from ualdbg.isa.arch import CPUS, MECH_AC, strict, trap_flags
from ualdbg.isa.cpu import Cpu, InsnDecoder
from ualdbg.isa.decode import DECODABLE, decoder_for

ISA = Path(arch_pkg.__file__).resolve().parent.parent


def _cpu_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(arch_pkg.__path__) if m.name != "info")


def test_every_module_of_arch_declares_cpus_and_is_in_the_table() -> None:
    declared: list[Cpu] = []
    for name in _cpu_modules():
        module = importlib.import_module(f"ualdbg.isa.arch.{name}")
        cpus = getattr(module, "CPUS", None)
        assert isinstance(cpus, tuple) and cpus and all(isinstance(c, Cpu) for c in cpus), f"arch/{name}.py: no CPUS"
        assert all(CPUS.get(c.name) is c for c in cpus), f"arch/{name}.py: a CPU missing from the table"
        declared.extend(cpus)
    assert sorted(c.name for c in declared) == sorted(CPUS), "the table holds a CPU no module declares"


@pytest.mark.parametrize("name", sorted(CPUS))
def test_each_cpu_says_how_its_faults_are_found(name: str) -> None:
    cpu = CPUS[name]
    assert cpu.decoder is not None or cpu.strict is not None or cpu.trap_flags is not None
    assert (cpu.decoder is None) == (cpu.accesses is None)  # a decoder for the step engine evaluates too
    assert (cpu.trap_flags is not None) == (cpu.info.mechanism == MECH_AC)
    assert strict(name) is cpu.strict and trap_flags(name) is cpu.trap_flags


@pytest.mark.parametrize("name", sorted(CPUS))
def test_declared_decoders_meet_the_protocol_for_their_own_cpu(name: str) -> None:
    cpu = CPUS[name]
    made = [f() for f in (cpu.decoder, cpu.strict.decoder if cpu.strict else None) if f is not None]
    assert made
    for dec in made:
        assert isinstance(dec, InsnDecoder), type(dec)
        assert dec.arch == name
        assert dec.max_insn_len >= (cpu.info.insn_size or 2)
        assert dec.decode(b"", 0x1000) is None  # no bytes: no instruction, never an exception


def test_decoder_by_name_is_exactly_the_cpus_with_one() -> None:
    assert DECODABLE[0] == "x86_64"
    assert set(DECODABLE) == {name for name, cpu in CPUS.items() if cpu.decoder is not None}
    assert all(decoder_for(name).arch == name for name in DECODABLE)
    for name in sorted(set(CPUS) - set(DECODABLE)) + ["vax"]:
        with pytest.raises(ValueError, match="unsupported architecture"):
            decoder_for(name)


def test_isa_loads_no_code_by_name() -> None:
    for path in sorted(ISA.rglob("*.py")):
        text = path.read_text()
        assert "importlib" not in text and "__import__" not in text, path
