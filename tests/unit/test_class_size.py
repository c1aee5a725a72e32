"""No Python class in ualdbg/ is longer than 300 lines (issue 30): a class that big holds
several concerns (the old 539-line LldbHooks, the 456-line FixupEngine) and is split by them,
as the hooks and the engines were. Counted from the `class` line to the class's last line."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ualdbg"
MAX_LINES = 300


def class_sizes(source: str) -> dict[str, int]:
    """Each class's name and its length in lines (nested classes by their dotted name)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                assert child.end_lineno is not None
                name = prefix + child.name
                out[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_the_count_is_the_classes_lines() -> None:
    assert class_sizes("class A:\n    x = 1\n\n    def f(self):\n        pass\nclass B:\n    pass\n") == {"A": 5, "B": 2}
    assert class_sizes("def f():\n    class C:\n        class D:\n            pass\n") == {"C": 3, "C.D": 2}


def test_no_class_is_over_300_lines() -> None:
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, lines in class_sizes(path.read_text()).items():
            if lines > MAX_LINES:
                big.append(f"{path.relative_to(ROOT)}: {name}, {lines} lines")
    assert not big, f"classes over {MAX_LINES} lines (split them by concern):\n" + "\n".join(big)
