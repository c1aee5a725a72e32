"""cli/shell.py: its table of sub-commands is what the modules of cli/ declare (a run imports only
the module of the command it runs: tests/cli/test_startup.py)."""
from __future__ import annotations

from ualdbg.cli import shell
from ualdbg.commands.registry import SHELL_COMMANDS


def test_the_table_names_every_declared_command_and_its_module() -> None:
    shell.declare()
    assert set(SHELL_COMMANDS) == set(shell.COMMANDS)
    for name, cmd in SHELL_COMMANDS.items():
        assert type(cmd).__module__ == f"ualdbg.cli.{shell.COMMANDS[name]}", name
    helped = " ".join(shell.build_parser().format_help().split())
    assert all(" ".join(cmd.help.split()) in helped for cmd in SHELL_COMMANDS.values())
