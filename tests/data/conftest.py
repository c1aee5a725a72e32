"""The data tests' own programs (tests/data/programs), each built once per session."""
from __future__ import annotations

from pathlib import Path

import pytest
from support.build import build_source

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _build(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Compiled from its folder with a bare file name, so DWARF names it NAME.c.
    return build_source(PROGRAMS / f"{name}.c", tmp_path_factory.mktemp("data-programs"), flags=("-g", "-O1", "-Wall"))


@pytest.fixture(scope="session")
def stack_locals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/programs/stack_locals.c."""
    return _build("stack_locals", tmp_path_factory)


@pytest.fixture(scope="session")
def libc_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/programs/libc_data.c."""
    return _build("libc_data", tmp_path_factory)


@pytest.fixture(scope="session")
def type_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/programs/type_chain.c."""
    return _build("type_chain", tmp_path_factory)


@pytest.fixture(scope="session")
def advice_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tests/data/programs: heap_offset.c, write_then_read.c, packed_write.c, site_rows.c (issue 31's
    advice and report cases)."""
    return {name: _build(name, tmp_path_factory) for name in ("heap_offset", "write_then_read", "packed_write", "site_rows")}
