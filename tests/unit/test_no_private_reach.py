"""No module of ualdbg uses another module's private names (issue 30): an attribute or an
imported name that starts with one underscore belongs to the module that defines it. What a
module may touch: its own objects' (`self._x`, `cls._x`), and any name the module itself
defines or assigns (a class's private method called from the same module's table, another
instance of the same class). What another module needs is made public, or asked for."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ualdbg"
# The standard library's documented names that start with an underscore: os._exit (leave a
# forked child without running the parent's cleanup), and namedtuple's methods.
DOCUMENTED = {"_exit", "_replace", "_asdict", "_fields", "_make"}
# Another library's private field read on purpose, by the one module that must: pyelftools' DIE
# keeps its parent in `_parent` (set by its public set_parent), and its get_parent walks the unit
# again with no bound when the field is unset, which a hostile DW_AT_sibling makes endless
# (dwarfindex.parent, issue 29). pyelftools' CallFrameInfo parses one entry (an FDE and its CIE)
# at an offset only in `_parse_entry_at`; its public get_entries parses every FDE of .eh_frame
# (CPython: 5,600, 2.5 s) and stops at the first it cannot decode, where cfi.py reads the one FDE
# .eh_frame_hdr's search table leads to (issue 34).
# symbols/dieparse.py reads a DIE's raw attribute values itself and hands each to pyelftools'
# DIE._translate_attr_value, the one place that turns them into pyelftools' values (strings,
# flags, indexed forms), so that its DIEs are pyelftools' attribute for attribute (issue 34).
THIRD_PARTY = {("symbols/dwarfindex.py", "_parent"), ("symbols/cfi.py", "_parse_entry_at"),
               ("symbols/dieparse.py", "_translate_attr_value")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


def _own_names(tree: ast.AST) -> set[str]:
    """Every name the module defines: functions, classes, assigned names and attributes, arguments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def reaches(source: str, filename: str = "<module>") -> list[str]:
    """The private names of other modules that `source` uses, as `line: what`."""
    tree = ast.parse(source, filename)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [f"{node.lineno}: from {module} import {a.name}" for a in node.names if _private(a.name)]
    return found


def test_the_check_sees_what_it_must() -> None:
    assert reaches("def f(engine):\n    return engine._arch(1)\n") == ["2: ._arch"]
    assert reaches("from .hooks import _ours\n") == ["1: from .hooks import _ours"]
    assert reaches("import argparse\nx = argparse._SubParsersAction\n") == ["2: ._SubParsersAction"]
    # what is allowed: one's own, the module's own names, documented stdlib names
    assert reaches("class A:\n    def _x(self): return self._y\n    def f(self, o): return o._x()\n") == []
    assert reaches("import os\nos._exit(0)\n") == []


def test_no_module_uses_another_modules_private_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(PACKAGE))
        found += [f"{path.relative_to(ROOT)}:{where}" for where in reaches(path.read_text(), str(path))
                  if (module, where.rsplit(".", 1)[-1]) not in THIRD_PARTY]
    assert not found, "private names of other modules used (make them public, or ask their owner):\n" + "\n".join(found)
