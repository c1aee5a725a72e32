"""`ualdbg audit ELF`: the shell's door to the static audit; its options, shared with the debugger
command, come from commands/audit.py when the command is chosen."""
from __future__ import annotations

import argparse

from ..commands.registry import ShellCommand, shell_command
from .common import check_outputs
from .outputs import Named


@shell_command
class Audit(ShellCommand):
    name = "audit"
    help = "static alignment audit of an ELF (packed members, misaligned variables, COMMON)"

    def prepare_parser(self, au: argparse.ArgumentParser) -> None:
        from ..commands.audit import DESCRIPTION, EPILOG, add_arguments

        au.description, au.epilog = DESCRIPTION, EPILOG
        add_arguments(au)
        au.add_argument("elf", help="the executable, shared library or object file")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        from ..commands.audit import run_cli

        check_outputs([Named("--json", args.json)] if args.json else [],
                      [Named("the ELF file", args.elf), *([Named("--trace", args.trace)] if args.trace else [])])
        return run_cli(args)
