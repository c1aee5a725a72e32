"""Qualified function names (C++, and Rust's or Fortran's `a::b::f`) matched as gdb's `break
NAME` matches them, and ELF symbols demangled into such names.

gdb's linespecs match a name "wild": `break method` and `break Klass::method` both find
`ns::Klass::method` (the name's components equal the symbol's trailing ones; gdb 13 treats a
leading `::` the same way, `::Klass::method` finds it too), and a component without a template
argument list matches every instance (`break twice` finds `ns::twice<int>` and
`ns::twice<long>`), while `ns::twice<int>` names one. Whitespace only counts between two
identifier characters (`twice<int >` is `twice<int>`), and gcc's DWARF spellings of integer
types are gdb's (`twice<long int>` is `twice<long>`). Parameter lists
(`f(int)`) are not understood: they match nothing.

Symbols are demangled as gdb demangles them (ualdbg.symbols.demangle: libiberty, the demangler
gdb and binutils are built with); one that does not demangle keeps its mangled name."""
from __future__ import annotations

import re
from collections.abc import Iterable

from ualdbg.symbols.demangle import demangle as _demangle_one
from ualdbg.symbols.demangle import group_start

from ..lazyclass import dataclass

__all__ = ["NameQuery", "base_name", "canonical_integers", "demangle", "function_name", "normalize", "split_components", "strip_template_args"]

_SPACES = re.compile(r"\s+")
_OPEN, _CLOSE = "<([", ">)]"
_OPERATOR = re.compile(r"operator\b\s*(\(\)|\[\]|[-+*/%^&|~!=<>,]+)?")
_CLONE = re.compile(r"(?: \[clone [^\]]*\])+$")


# gcc's DWARF names integer types as `long int`, `long unsigned int`; gdb's demangler says
# `long`, `unsigned long`. Longest first.
_INTEGER_SPELLINGS = (
    ("long long unsigned int", "unsigned long long"),
    ("long long int", "long long"),
    ("long unsigned int", "unsigned long"),
    ("short unsigned int", "unsigned short"),
    ("long int", "long"),
    ("short int", "short"),
)
_INTEGERS = re.compile(r"\b(?:" + "|".join(re.escape(a) for a, _ in _INTEGER_SPELLINGS) + r")\b")


def canonical_integers(name: str) -> str:
    """gcc's DWARF spellings of integer types in template arguments as gdb shows them."""
    if "<" not in name:
        return name
    return _INTEGERS.sub(lambda m: dict(_INTEGER_SPELLINGS)[m.group(0)], name)


def normalize(name: str) -> str:
    """`name` with whitespace kept only between two identifier characters, as one space, and
    gcc's integer type spellings as gdb's."""
    def one(m: re.Match[str]) -> str:
        before, after = m.string[m.start() - 1: m.start()], m.string[m.end(): m.end() + 1]
        return " " if (before.isalnum() or before == "_") and (after.isalnum() or after == "_") else ""

    return canonical_integers(_SPACES.sub(one, name.strip()))  # types: in template arguments only


def _operator_end(name: str, i: int) -> int:
    """Where the operator token at name[i:] (`operator<`, `operator()`) ends; i if none."""
    m = _OPERATOR.match(name, i)
    if m is None or m.group(1) is None:
        return i
    return m.end()


def split_components(name: str) -> list[str]:
    """`ns::Klass<a::b>::method` as ["ns", "Klass<a::b>", "method"]: `::` outside brackets."""
    parts: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(name):
        if depth == 0 and name.startswith("operator", i) and (i == start or not (name[i - 1].isalnum() or name[i - 1] == "_")):
            end = _operator_end(name, i)
            if end > i:
                i = end
                continue
        c = name[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE and depth > 0:
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            parts.append(name[start:i])
            i += 2
            start = i
            continue
        i += 1
    parts.append(name[start:])
    return parts


def strip_template_args(component: str) -> str:
    """`twice<int>` as `twice`; anything else (operators among them) unchanged."""
    if not component.endswith(">") or component.startswith("operator"):
        return component
    start = group_start(component, len(component) - 1, "<", ">")
    return component[:start] if start else component


def base_name(qualified: str) -> str:
    """The last component without its template arguments: what a name is looked up by."""
    return strip_template_args(split_components(normalize(qualified))[-1])


@dataclass(frozen=True)
class NameQuery:
    """A function name as the user typed it for `--in`."""

    text: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> NameQuery:
        name = normalize(text)
        return cls(text, tuple(split_components(name[2:] if name.startswith("::") else name)))

    @property
    def base(self) -> str:
        return strip_template_args(self.parts[-1])

    def matches(self, qualified: str) -> bool:
        have = split_components(normalize(qualified))
        if len(have) < len(self.parts):
            return False
        for want, got in zip(self.parts, have[len(have) - len(self.parts):]):
            if want != got and not (strip_template_args(want) == want and strip_template_args(got) == want):
                return False
        return True


def _top_level(text: str, start: int = 0) -> Iterable[tuple[int, str]]:
    """(index, character) of text's characters outside brackets, operator tokens skipped."""
    depth, i = 0, start
    while i < len(text):
        if depth == 0 and text.startswith("operator", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = _operator_end(text, i)
            if end > i:
                i = end
                continue
        c = text[i]
        if depth == 0:
            yield i, c
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE and depth > 0:
            depth -= 1
        i += 1


def function_name(demangled: str) -> str:
    """The qualified name in a demangled function signature: `ns::Klass::method` of
    `ns::Klass::method(int) const`, `ns::twice<int>` of `int ns::twice<int>(char const*)`;
    gcc's clone notes (` [clone .constprop.0]`) dropped."""
    text = _CLONE.sub("", demangled.strip())
    end = len(text)
    for i, c in _top_level(text):
        # the parameter list: a `(` right after a name, not `(anonymous namespace)` at a start
        if c == "(" and i > 0 and text[i - 1] not in ": ":
            end = i
            break
    name = text[:end]
    # A template function's return type comes first, up to a top-level space; a space inside
    # the name follows `operator` (`operator new`, `ns::K::operator unsigned long`).
    cuts = [i for i, c in _top_level(name) if c == " "]
    pieces = [name[a:b] for a, b in zip([0] + [i + 1 for i in cuts], cuts + [len(name)])]
    for k, piece in enumerate(pieces):
        if re.search(r"(?:^|::)operator$", piece):
            return " ".join(pieces[k:])
    return pieces[-1]


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Itanium-mangled names (`_Z...`) demangled as gdb demangles a minimal symbol (libiberty,
    DMGL_PARAMS | DMGL_ANSI: ualdbg.symbols.demangle), as {mangled: demangled}; a name that does
    not demangle keeps its mangled form (it is left out)."""
    out: dict[str, str] = {}
    for name in {n for n in names if n.startswith("_Z")}:
        full = _demangle_one(name, drop_return=False)
        if full and full != name:
            out[name] = full
    return out
