"""`ualdbg stackcheck -- PROG`: the shell's door to the stackcheck analysis; its options, shared
with the debugger command, come from commands/stackcheck.py when the command is chosen."""
from __future__ import annotations

import argparse

from ..commands.registry import ShellCommand, shell_command
from .common import check_outputs, reads
from .outputs import Named


@shell_command
class Stackcheck(ShellCommand):
    name = "stackcheck"
    help = "does alignment (and speed) depend on argv and the environment?"
    description = ("Run PROG in variants of argv[0] length and environment size (and with ASLR) and report "
                   "how the stack, its variables and the argv/environment strings move.")
    wraps = True

    def prepare_parser(self, sc: argparse.ArgumentParser) -> None:
        from ..commands.stackcheck import EPILOG, add_arguments

        sc.epilog = EPILOG
        add_arguments(sc)
        sc.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        from ..commands.stackcheck import run_cli

        check_outputs([Named("--json", args.json)] if args.json else [], reads(args))
        return run_cli(args)
