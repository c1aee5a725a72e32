"""The debugger interface stays declared (core/target.py): no code probes a target for a method
with getattr/hasattr, every optional capability is a runtime-checkable Protocol that says who
offers it, and no capability is set on one instance (`offers` decides once per class)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Protocol

import pytest

from ualdbg.core import target as target_mod
from ualdbg.core.target import FloatBits, MemoryWriter, OutOfLineTarget, RegisterBatch, offers

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ualdbg"
PROBES = ("getattr", "hasattr")


def _protocols() -> dict[str, type]:
    return {name: cls for name, cls in vars(target_mod).items()
            if inspect.isclass(cls) and cls.__module__ == target_mod.__name__ and Protocol in cls.__mro__[1:]}


def _members(cls: type) -> set[str]:
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    out = set()
    for node in body.body:
        if isinstance(node, ast.FunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


ALL = {name: _members(cls) for name, cls in _protocols().items()}
CAPABILITIES = set().union(*ALL.values())  # every name an engine may call on a target
# The seams beside the target, declared as well (engines/step.py's StepControl, the commands'
# Host and LaunchSource); not their generic names, as `step`, which sessions also have.
SEAMS = {"eager_returns", "steps_inherited", "step_control", "launch_info"}
OPTIONAL = CAPABILITIES - ALL["Target"] - ALL["MemoryReader"]


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_the_interface_is_what_this_test_reads() -> None:
    assert {"Target", "MemoryWriter", "RegisterBatch", "OutOfLineTarget", "FloatMover", "FloatBits", "InferiorCalls",
            "SymbolLookup", "LiveThreads", "FaultStepper"} <= set(ALL)
    assert {"read_register", "write_memory", "step_over_fault", "live_threads", "call_function"} <= CAPABILITIES


@pytest.mark.parametrize("name", sorted(set(_protocols()) - {"Target", "MemoryReader"}))
def test_each_optional_capability_is_checkable_and_says_who_offers_it(name: str) -> None:
    cls = _protocols()[name]
    assert getattr(cls, "_is_runtime_protocol", False), f"{name}: not @runtime_checkable, offers() cannot test it"
    doc = inspect.getdoc(cls) or ""
    assert any(word in doc for word in ("gdb", "lldb")), f"{name}: its docstring must say which adapters offer it"


def test_no_code_probes_a_target_for_a_capability() -> None:
    """getattr(target, "write_memory", None) hides a capability from mypy and from the reader:
    declare it in core/target.py and ask `offers(target, MemoryWriter)`."""
    found = []
    for path in _sources("ualdbg"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CAPABILITIES | SEAMS):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert not found, "capabilities probed by name:\n" + "\n".join(found)


def test_no_capability_is_set_on_one_instance() -> None:
    """`offers` decides once per class: a method assigned to one object (t.move_float = ...)
    would make every object of its class look capable, or none. Subclass instead."""
    found = []
    for path in _sources("ualdbg", "tests"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in OPTIONAL:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{t.attr} = ...")
    assert not found, "capabilities set per instance:\n" + "\n".join(found)


def test_offers_is_isinstance_decided_per_class() -> None:
    class Writer:
        def write_memory(self, addr: int, data: bytes) -> None: ...

    class Both(Writer):
        def write_registers(self, values: dict[str, int], tid: int | None = None) -> None: ...

    for obj in (Writer(), Both(), object()):
        for cap in (MemoryWriter, RegisterBatch, OutOfLineTarget, FloatBits):
            assert offers(obj, cap) == isinstance(obj, cap) == offers(obj, cap)
    assert offers(Both(), OutOfLineTarget) and not offers(Writer(), OutOfLineTarget)
