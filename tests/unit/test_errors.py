"""One error base carrying its exit status, caught once in the shell's main, and one place that
finds external programs (issue 30 item 4): core/errors.py, core/external.py."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ualdbg.cli import shell
from ualdbg.cli.report import Report
from ualdbg.core.errors import EXIT_ERROR, EXIT_TOOL, UaldbgError
from ualdbg.core.external import TOOLS, ToolMissing, find_tool
from ualdbg.engines.runner import ProgramUntraced


def _program(folder: Path, name: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_missing_tool_says_what_to_install_and_is_ualdbgs_own_failure(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("UALDBG_LLDB", raising=False)
    for kind, tool in TOOLS.items():
        with pytest.raises(ToolMissing) as caught:
            find_tool(kind)
        assert caught.value.status == EXIT_TOOL
        assert f"{tool.names[0]}" in str(caught.value) and tool.install in str(caught.value)
    lldb = _program(tmp_path, "lldb")  # not Debian's lldb-19: the next name is looked for
    assert find_tool("lldb") == lldb
    qemu = _program(tmp_path, "qemu-sparc64")
    assert find_tool("qemu-user", ["qemu-sparc64"]) == qemu


def test_the_override_variable_names_the_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gdb = _program(tmp_path, "my-gdb")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("UALDBG_GDB", "my-gdb")
    assert find_tool("gdb") == gdb
    monkeypatch.setenv("UALDBG_GDB", "no-such-gdb-here")
    with pytest.raises(ToolMissing, match="^no-such-gdb-here not found on PATH"):
        find_tool("gdb")


@pytest.mark.parametrize("error,status", [(ToolMissing("gdb not found on PATH"), EXIT_TOOL),
                                          (UaldbgError("a bad option"), EXIT_ERROR),
                                          (UaldbgError("given its own", 7), 7),
                                          (ProgramUntraced("no trace", exit_status=5, exit_signal=None), 5),
                                          (ProgramUntraced("no trace", exit_status=0, exit_signal=None), EXIT_TOOL)])
def test_main_ends_with_the_status_the_error_carries(error: UaldbgError, status: int, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def fail(self: object, args: object, parser: object) -> int:
        raise error

    monkeypatch.setattr(Report, "run", fail)
    assert shell.main(["report", str(tmp_path / "t.json")]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ualdbg: {error}"]
