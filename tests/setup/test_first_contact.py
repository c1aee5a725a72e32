"""First contact (issue 16): the set-up's package list, help with examples on every command in
the shell, gdb and lldb, and the launchers `ualdbg gdb|lldb` and `gdbinit|lldbinit` in real
debuggers, from the clone and from a pip install used in another folder."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.debuggers import lldb_path
from support.env import BUILD, ROOT, require_tool, scrubbed_env
from support.reports import parse_reports
from support.run import Result
from support.run import run as run_command

from ualdbg.cli.shell import build_parser
from ualdbg.commands.all import COMMANDS, GROUPS

UALDBG = [sys.executable, "-m", "ualdbg"]
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
PROGRAM = BUILD / "not_aligned"


def run(cmd: list[str], *, timeout: float = 120, cwd: Path | None = None, env: dict[str, str] | None = None,
        stdin: str | None = None) -> Result:
    return run_command(cmd, stdin=stdin, env=scrubbed_env(env), cwd=cwd, timeout=timeout).fail_on_timeout()


# --- the package list -------------------------------------------------------------------------

def packages(*flags: str) -> list[str]:
    r = run(["bash", str(BOOTSTRAP), "--list-packages", *flags])
    assert r.returncode == 0, r.explain()
    return r.stdout.split()


def test_package_list_is_one_list_without_the_conflict() -> None:
    demo, full = packages("--demo"), packages()
    assert len(full) == len(set(full)), "a package is listed twice"
    assert full[:len(demo)] == demo, "the demo's packages are part of the full list"
    # Debian 12's gcc-multilib conflicts with every cross gcc-12-*: it can never be in the list.
    assert "gcc-multilib" not in full
    assert {"lib32gcc-12-dev", "libc6-dev-i386", "gcc-sparc64-linux-gnu", "lldb-19"} <= set(full)
    assert set(demo) == {"gdb", "gcc", "libc6-dev", "make", "python3-venv"}, "the demo installs only what it uses"


def test_check_packages_fails_on_a_conflict() -> None:
    """The CI step (.ci/run) passes on the real list; adding gcc-multilib must make it fail,
    even on this machine, where every listed package is already installed."""
    require_tool("apt-get")
    good = run(["bash", str(BOOTSTRAP), "--check-packages"], timeout=300)
    assert good.returncode == 0, good.explain()
    assert "resolves as a whole" in good.stdout
    bad = run(["bash", str(BOOTSTRAP), "--check-packages", "--with", "gcc-multilib"], timeout=300)
    assert bad.returncode == 1, bad.explain()
    assert "cannot install the package list as a whole" in bad.stderr


# --- help with examples, over the whole command tree -------------------------------------------

def _cli_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    todo: list[tuple[str, argparse.ArgumentParser]] = [("ualdbg", build_parser())]
    while todo:
        name, p = todo.pop()
        out.append((name, p))
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {verb}", sub) for verb, sub in action.choices.items()]
    return out


def _has_examples(text: str, prefix: str = "ualdbg") -> bool:
    if "examples:" not in text:
        return False
    after = text.split("examples:", 1)[1].splitlines()
    return any(line.strip().startswith(prefix) for line in after)


def test_every_shell_command_help_has_examples() -> None:
    parsers = _cli_parsers()
    names = {n for n, _ in parsers}
    assert {"ualdbg trace", "ualdbg check", "ualdbg gdb", "ualdbg lldb", "ualdbg gdbinit", "ualdbg report"} <= names
    for name, _ in parsers:
        r = run([*UALDBG, *name.split()[1:], "--help"])
        assert r.returncode == 0, r.explain()
        assert _has_examples(r.stdout), f"`{name} --help` shows no example\n{r.stdout}"


def _debugger_paths() -> list[str]:
    paths = [" ".join(p) for p in COMMANDS] + [" ".join(p) for p in GROUPS if p]
    return ["", *sorted(paths)]


def _debugger_help(kind: str) -> tuple[Result, list[str]]:
    """`help ualdbg PATH` for every command and group, in one real gdb or lldb; its sections."""
    if kind == "gdb":
        cmd = [require_tool("gdb"), "-q", "-nx", "-batch", "-x", str(ROOT / "gdb" / "ualdbg.py")]
        option, marker = "-ex", "echo #### {}\\n"
    else:
        cmd = [lldb_path(), "--no-lldbinit", "--batch", "-o", f"command script import {ROOT / 'lldb' / 'ualdbg.py'}"]
        # lldb echoes each command: the marker is computed, so only its output matches.
        option, marker = "-o", "script print(chr(35) * 4 + ' {}')"
    for path in _debugger_paths():
        cmd += [option, marker.format(path), option, f"help ualdbg {path}".strip()]
    r = run(cmd)
    return r, ("\n" + r.stdout).split("\n#### ")[1:]


@pytest.mark.parametrize("kind", ["gdb", "lldb"])
def test_every_debugger_command_help_has_examples(kind: str) -> None:
    r, sections = _debugger_help(kind)
    assert len(sections) == len(_debugger_paths()), r.explain()
    for section in sections:
        path, _, text = section.partition("\n")
        assert _has_examples(text, ("ualdbg", "help")), f"{kind} `help ualdbg {path}` shows no example\n{r.explain()}"  # type: ignore[arg-type]


# --- the launchers ------------------------------------------------------------------------------

def _assert_report(r: Result) -> None:
    reports = parse_reports(r.stdout)
    assert reports, f"no ualdbg break report\n{r.explain()}"
    assert reports[0].location == "not_aligned.c:38", r.explain()
    assert reports[0].size == 8 and reports[0].access == "read-write", r.explain()


def test_ualdbg_gdb_then_break_and_run(tmp_path: Path) -> None:
    require_tool("gdb")
    # From another folder, typed at gdb's prompt (stdin), as a user would right after starting it.
    r = run([*UALDBG, "gdb", "-nx", "--", str(PROGRAM), "3"], stdin="ualdbg break\nrun\nkill\nquit\n", cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT)})
    _assert_report(r)


def test_ualdbg_lldb_then_break_and_run(tmp_path: Path) -> None:
    lldb_path()
    r = run([*UALDBG, "lldb", "--no-lldbinit", "-o", "ualdbg break", "-o", "run", "--", str(PROGRAM), "3"],
            cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "UALDBG_LLDB": lldb_path()}, timeout=180)
    _assert_report(r)


def test_launcher_names_a_missing_debugger() -> None:
    r = run([*UALDBG, "gdb", "--", str(PROGRAM)], env={"UALDBG_GDB": "no-such-gdb-here"})
    assert r.returncode == 2, r.explain()
    assert r.stderr.strip().startswith("ualdbg gdb: no-such-gdb-here not found"), r.explain()
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def pip_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ualdbg pip-installed (not editable) from the clone into a new venv of /usr/bin/python3."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
    r = run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(ROOT)], timeout=600)
    assert r.returncode == 0, r.explain()
    return venv


def test_pip_install_launchers_work_from_any_folder(pip_installed: Path, tmp_path: Path) -> None:
    require_tool("gdb")
    ualdbg = str(pip_installed / "bin" / "ualdbg")
    r = run([ualdbg, "gdb", "-nx", "-batch", "-ex", "ualdbg break", "-ex", "run", "--", str(PROGRAM), "3"], cwd=tmp_path)
    _assert_report(r)
    r = run([ualdbg, "lldb", "--no-lldbinit", "-o", "ualdbg break", "-o", "run", "--", str(PROGRAM), "3"],
            cwd=tmp_path, env={"UALDBG_LLDB": lldb_path()}, timeout=180)
    _assert_report(r)


def test_init_lines_load_ualdbg_in_plain_debuggers(pip_installed: Path, tmp_path: Path) -> None:
    """What `ualdbg gdbinit` / `lldbinit` print, put in ~/.gdbinit / ~/.lldbinit of a scratch HOME,
    loads ualdbg into a plain gdb / lldb started from another folder."""
    ualdbg = str(pip_installed / "bin" / "ualdbg")
    home = tmp_path / "home"
    home.mkdir()
    for kind in ("gdb", "lldb"):
        r = run([ualdbg, f"{kind}init"])
        assert r.returncode == 0, r.explain()
        assert str(pip_installed) in r.stdout, r.explain()
        (home / f".{kind}init").write_text(r.stdout)
    env = {"HOME": str(home)}
    gdb = require_tool("gdb")
    r = run([gdb, "-q", "-batch", "-ex", "ualdbg break", "-ex", "run", "--args", str(PROGRAM), "3"], cwd=tmp_path, env=env)
    _assert_report(r)
    r = run([lldb_path(), "-o", "ualdbg break", "-o", "run", "--", str(PROGRAM), "3"], cwd=tmp_path, env=env, timeout=180)
    _assert_report(r)


def test_version_is_written_once() -> None:
    """pyproject.toml takes the version from ualdbg/__init__.py (dynamic), so they cannot differ."""
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "\nversion =" not in text.split("[tool.setuptools.dynamic]")[0]
    r = run([*UALDBG, "--version"])
    from ualdbg import __version__
    assert r.stdout.strip() == f"ualdbg {__version__}", r.explain()
    assert os.path.exists(ROOT / "ualdbg" / "__init__.py")
