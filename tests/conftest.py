"""The suite's session fixtures: the built examples and the small fixture programs; and after each
test, the round trip of every JSON trace it left in its tmp_path (support/documents.py). The
helpers themselves are the package tests/support (imported as `support.X`)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.build import build_program
from support.documents import check_folder
from support.env import BUILD, EXAMPLES, FIXTURES


@pytest.fixture(scope="session", autouse=True)
def built_examples() -> Path:
    subprocess.run(["make", "-s", "-C", str(EXAMPLES)], check=True, capture_output=True)
    return BUILD


@pytest.fixture(scope="session")
def test_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small programs written for one behaviour each (fork, exec, attach), built once."""
    out = tmp_path_factory.mktemp("programs")
    for src in (FIXTURES / "programs").glob("*.c"):
        build_program(out / src.stem, src, flags=("-g", "-O1"))
    return out


@pytest.fixture(autouse=True)
def traces_round_trip(request: pytest.FixtureRequest) -> object:
    """Every trace document the test wrote into its tmp_path comes back from a TraceResult as the
    same text: build_document(load_document(doc)) == doc (issue 30)."""
    yield
    folder = request.node.funcargs.get("tmp_path")
    if isinstance(folder, Path) and folder.is_dir():
        problems = check_folder(folder)
        assert not problems, "\n".join(problems)
