"""`ualdbg gdb|lldb [DEBUGGER ARGS] [-- PROG ARGS]` and `ualdbg gdbinit|lldbinit`: the debuggers
started with ualdbg loaded, and the lines that load it in every session (loaders/launch.py).
`gdb` and `lldb` take their arguments unparsed: they are the debugger's, which argparse must not
read."""
from __future__ import annotations

import argparse
import sys

from ..ci.gate import EXIT_CLEAN, EXIT_ERROR
from ..commands.registry import ShellCommand, shell_command
from .common import examples


class _Debugger(ShellCommand):
    raw = True

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        from ..loaders.launch import LaunchError, launch

        if args.argv[:1] in (["-h"], ["--help"]):
            parser.print_help()
            return EXIT_CLEAN
        try:
            return launch(self.name, args.argv)
        except LaunchError as exc:
            print(exc, file=sys.stderr)
            return EXIT_ERROR


@shell_command
class Gdb(_Debugger):
    name = "gdb"
    help = "start gdb with ualdbg loaded"
    description = "Start gdb with ualdbg loaded: ualdbg gdb [GDB ARGS] [-- PROG ARGS]. Then type `ualdbg break` and `run`."
    epilog = examples("ualdbg gdb -- ./prog args",
                      "ualdbg gdb -p 1234                              attach to a running process",
                      "ualdbg gdb -batch -ex 'ualdbg break' -ex run -- ./prog")


@shell_command
class Lldb(_Debugger):
    name = "lldb"
    help = "start lldb with ualdbg loaded"
    description = ("Start lldb (lldb-19) with ualdbg loaded: ualdbg lldb [LLDB ARGS] [-- PROG ARGS]. "
                   "Then type `ualdbg break` and `run`.")
    epilog = examples("ualdbg lldb -- ./prog args",
                      "ualdbg lldb -p 1234                             attach to a running process",
                      "ualdbg lldb -o 'ualdbg break' -o run -- ./prog")


class _InitLines(ShellCommand):
    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        from ..loaders.launch import init_lines

        print("\n".join(init_lines(self.name[:-4])))
        return EXIT_CLEAN


@shell_command
class Gdbinit(_InitLines):
    name = "gdbinit"
    help = "print the lines that load ualdbg in every gdb session"
    description = "Print the lines to add to ~/.gdbinit so that every gdb session has ualdbg."
    epilog = examples("ualdbg gdbinit >> ~/.gdbinit")


@shell_command
class Lldbinit(_InitLines):
    name = "lldbinit"
    help = "print the lines that load ualdbg in every lldb session"
    description = "Print the lines to add to ~/.lldbinit so that every lldb session has ualdbg."
    epilog = examples("ualdbg lldbinit >> ~/.lldbinit")
