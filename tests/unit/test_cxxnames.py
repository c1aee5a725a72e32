"""Qualified names for `--in` (ualdbg.symbols.cxxnames): gdb's wild matching of trailing
components and template arguments, and the name inside a demangled signature."""
from __future__ import annotations

import pytest
from support.debuggers import run_gdb

from ualdbg.symbols.cxxnames import NameQuery, demangle, function_name, normalize, split_components, strip_template_args


@pytest.mark.parametrize(("typed", "name", "want"), [
    ("ns::Klass::method", "ns::Klass::method", True),
    ("Klass::method", "ns::Klass::method", True),  # trailing components, as gdb's `break`
    ("method", "ns::Klass::method", True),
    ("::Klass::method", "ns::Klass::method", True),  # gdb 13 ignores a leading `::` too
    ("lass::method", "ns::Klass::method", False),  # whole components only
    ("Klass::metho", "ns::Klass::method", False),
    ("ns::Klass::method", "Klass::method", False),  # more than the name has
    ("other::Klass::method", "ns::Klass::method", False),
    ("twice", "ns::twice<int>", True),  # no template arguments: every instance
    ("ns::twice", "ns::twice<long>", True),
    ("ns::twice<int>", "ns::twice<int>", True),
    ("ns::twice<int>", "ns::twice<long>", False),
    ("twice<int >", "ns::twice<int>", True),  # whitespace only counts between identifiers
    ("ns::twice<long int>", "ns::twice<long>", True),  # gcc's DWARF spelling, gdb's
    ("ns::twice<long>", "ns::twice<long int>", True),
    ("twice<unsigned long>", "ns::twice<long unsigned int>", True),
    ("twice<long>", "ns::twice<long long int>", False),
    ("Box::get", "ns::Box<std::pair<int, int> >::get", True),
    ("Box<std::pair<int,int>>::get", "ns::Box<std::pair<int, int> >::get", True),
    ("f", "(anonymous namespace)::f", True),
    ("sum_pairs", "sum_pairs", True),
    ("sum_pair", "sum_pairs", False),
    ("operator<", "ns::K::operator<", True),
    ("K::operator()", "ns::K::operator()", True),
    ("operator<", "ns::K::operator<<", False),
])
def test_names_match_as_gdb_break_does(typed: str, name: str, want: bool) -> None:
    assert NameQuery.parse(typed).matches(name) is want


@pytest.mark.parametrize(("text", "parts"), [
    ("ns::Klass::method", ["ns", "Klass", "method"]),
    ("std::map<a::b, c::d>::find", ["std", "map<a::b,c::d>", "find"]),
    ("(anonymous namespace)::f", ["(anonymous namespace)", "f"]),
    ("ns::K::operator<", ["ns", "K", "operator<"]),
    ("ns::K::operator<<", ["ns", "K", "operator<<"]),
    ("ns::K::operator()", ["ns", "K", "operator()"]),
    ("main", ["main"]),
])
def test_split_components(text: str, parts: list[str]) -> None:
    assert split_components(normalize(text)) == parts


def test_strip_template_args() -> None:
    assert strip_template_args("twice<int>") == "twice"
    assert strip_template_args("map<int,pair<a,b>>") == "map"
    assert strip_template_args("operator<") == "operator<"
    assert strip_template_args("method") == "method"


@pytest.mark.parametrize(("signature", "name"), [
    ("ns::Klass::method(int) const", "ns::Klass::method"),
    ("int ns::twice<int>(unsigned char const*, int)", "ns::twice<int>"),
    ("ns::func(unsigned char const*, int) [clone .constprop.0]", "ns::func"),
    ("ns::func(int) [clone .isra.0] [clone .cold]", "ns::func"),
    ("(anonymous namespace)::f(int)", "(anonymous namespace)::f"),
    ("ns::(anonymous namespace)::g()", "ns::(anonymous namespace)::g"),
    ("ns::K::operator()(int) const", "ns::K::operator()"),
    ("ns::K::operator<(ns::K const&) const", "ns::K::operator<"),
    ("operator new(unsigned long)", "operator new"),
    ("ns::K::operator unsigned long() const", "ns::K::operator unsigned long"),
    ("std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<int, std::allocator<int> >::push_back"),
    ("void std::basic_string<char>::_M_construct<char const*>(char const*, char const*)",
     "std::basic_string<char>::_M_construct<char const*>"),
    ("ns::K::~K()", "ns::K::~K"),
    ("main", "main"),
])
def test_function_name_of_a_signature(signature: str, name: str) -> None:
    assert function_name(signature) == name


MANGLED = ["_ZNK2ns5Klass6methodEi", "_ZN2ns5twiceIlEET_PKhi", "_ZN2ns4funcEPKhi.constprop.0",
           "_ZN3fmt2v96detail14format_decimalIcjEENS1_21format_decimal_resultIPT_EES5_T0_i"]


def test_demangle_as_gdb_demangles() -> None:
    """gdb's own `demangle -l c++` is the oracle: ualdbg demangles a symbol as gdb shows it."""
    run = run_gdb([], [f"demangle -l c++ -- {m}" for m in MANGLED], source=False)
    assert run.returncode == 0, run.explain()
    out = run.stdout
    want = dict(zip(MANGLED, out.splitlines()))
    got = demangle([*MANGLED, "main"])
    assert got == want
    assert {m: function_name(d) for m, d in got.items()} == {
        "_ZNK2ns5Klass6methodEi": "ns::Klass::method", "_ZN2ns5twiceIlEET_PKhi": "ns::twice<long>",
        "_ZN2ns4funcEPKhi.constprop.0": "ns::func",
        MANGLED[3]: "fmt::v9::detail::format_decimal<char, unsigned int>"}


def test_demangle_without_a_demangler_keeps_mangled_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from ualdbg.symbols import demangle as module

    module.demangle.cache_clear()
    monkeypatch.setattr(module, "_demangler", lambda: None)
    try:
        assert demangle(["_ZNK2ns5Klass6methodEi"]) == {}
    finally:
        module.demangle.cache_clear()
