"""The `ualdbg` shell command (also `python -m ualdbg`): its sub-commands are declared one module
each on commands/registry.py's SHELL_COMMANDS (trace.py, check.py, watching.py, stackcheck.py,
audit.py, report.py, launchers.py); this module imports the chosen one's module only (COMMANDS
below), builds the parser and runs it. Exit statuses: `trace` passes the program's through; `check`: the program's own when it
fails, else 0 clean, 1 (--error-exitcode) too many faults or new sites, 3 incomplete
(--allow-incomplete); `stackcheck` 0 clean, 1 misaligned/unaligned/too spread; `audit` 0 no
finding (or none hit), 1 findings (hit). Where a program is run (trace, check, stackcheck, watch
-- PROG), ualdbg's own failures are the wrappers' 125/126/127 (ci/gate.py); 2 is a usage error or
bad input, and every error in report and audit."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection, Iterable

from .. import __version__
from ..commands.registry import SHELL_COMMANDS, ShellCommand
from ..core.errors import EXIT_ERROR, EXIT_TOOL, UaldbgError
from .common import ShellParser, examples
from .outputs import say

# Each sub-command, in the order `ualdbg --help` lists them, and the module of cli/ that declares
# it (commands/registry.shell_command). A run imports only its command's module, so that
# `ualdbg trace` does not pay for audit's, report's or the launchers' imports (issue 34); the
# top-level help, --version and a mistyped command import them all. tests/unit/test_shell.py
# checks this table against what the modules declare.
COMMANDS = {"trace": "trace", "check": "check", "watch": "watching", "stackcheck": "stackcheck",
            "audit": "audit", "report": "report", "gdb": "launchers", "lldb": "launchers",
            "gdbinit": "launchers", "lldbinit": "launchers"}


def declare(names: Iterable[str] = tuple(COMMANDS)) -> None:
    """Import the modules that declare these sub-commands."""
    for module in dict.fromkeys(COMMANDS[name] for name in names):
        __import__(f"{__package__}.{module}")  # (the import statement's path: `python -X importtime` shows it)


def build_parser(names: Collection[str] = tuple(COMMANDS)) -> ShellParser:
    """The parser of `ualdbg` with these sub-commands (every one by default): a run's has its
    own command's only (each parser costs argparse's translation look-ups)."""
    declare(names)
    p = ShellParser(prog="ualdbg", description="Find unaligned memory accesses in native programs.",
                    epilog=examples("ualdbg trace -- ./prog args                     run prog, print its unaligned accesses per site",
                                    "ualdbg check --json r.json --sarif r.sarif -- ./prog   the CI gate",
                                    "ualdbg gdb -- ./prog args                       gdb with ualdbg loaded: `ualdbg break`, `run`",
                                    "ualdbg COMMAND --help                           every command has examples"),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ualdbg {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=ShellParser)
    for name in COMMANDS:
        cmd = SHELL_COMMANDS.get(name)
        if cmd is None or name not in names:  # (check's module declares trace's too)
            continue
        sp = sub.add_parser(name, help=cmd.help, description=cmd.description, epilog=cmd.epilog,
                            add_help=not cmd.raw, formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.fill = cmd.prepare_parser  # its options when it is chosen or its help shown (issue 34)
        p.commands[name] = sp
    return p


def _closed_streams() -> None:
    """A standard stream the user closed (`2>&-`) is nobody's: ualdbg's own lines to it go nowhere,
    and its descriptor is held by a close-on-exec /dev/null, so that no file ualdbg opens lands on
    it and the program still starts with it closed, as it would without ualdbg."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        nul = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        if nul != fd:  # a lower one was closed too and took it: handled on its own turn
            os.close(nul)
            continue
        setattr(sys, name, open(nul, "r" if fd == 0 else "w", closefd=False))


def _closed_pipe() -> int:
    """Whoever read ualdbg's output stopped (`ualdbg report t.json | head -1`): end quietly by
    SIGPIPE, status 141 in a shell, as `git log | head -1` and coreutils do (docs/CLI.md)."""
    import signal

    try:
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, sys.stdout.fileno())  # what is still buffered is flushed there at exit
    except (OSError, ValueError, AttributeError):
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    _closed_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser([argv[0]] if argv and argv[0] in COMMANDS else tuple(COMMANDS))
    raw = SHELL_COMMANDS.get(argv[0]) if argv else None
    if raw is not None and raw.raw:  # `ualdbg gdb ARGS`: the debugger's arguments, unparsed
        return raw.run(argparse.Namespace(cmd=argv[0], argv=argv[1:]), parser.commands[argv[0]])
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_ERROR
    cmd: ShellCommand = SHELL_COMMANDS[args.cmd]
    try:
        return cmd.run(args, parser.commands[args.cmd])
    except BrokenPipeError:
        return _closed_pipe()
    except UaldbgError as exc:  # every error of ualdbg's carries its status (core/errors.py)
        say(f"ualdbg: {exc}")  # escaped: the message may quote a hostile file's names
        return exc.exit_status()  # a program that ran untraced and failed: its own status
    except ValueError as exc:  # bad input (a JSON trace, --arch, a setting)
        say(f"ualdbg: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # an unreadable or unwritable file that no check above foresaw
        say(f"ualdbg: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
        return EXIT_TOOL if cmd.wraps else EXIT_ERROR
    except KeyboardInterrupt:
        print("ualdbg: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line (UALDBG_DEBUG=1 shows the traceback)
        if os.environ.get("UALDBG_DEBUG"):
            raise
        say(f"ualdbg: internal error ({type(exc).__name__}: {exc}); UALDBG_DEBUG=1 shows where")
        return EXIT_TOOL if cmd.wraps else EXIT_ERROR
    finally:
        sink = getattr(args, "report_sink", None)
        if sink is not None:
            sink.close()  # what the report had when an error cut it short still reaches --log-file


if __name__ == "__main__":
    sys.exit(main())
