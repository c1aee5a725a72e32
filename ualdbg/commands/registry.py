"""Declaring commands: an argparse parser that raises instead of exiting, a spec per command
path, and the Host protocol through which a command reaches the debugger it runs in; and the
shell's sub-commands (`ualdbg trace|check|report...`), one class each, declared the same way."""
from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol, runtime_checkable

from ..core.errors import UaldbgError
from ..lazyclass import dataclass

if TYPE_CHECKING:  # annotations only: the shell builds its parsers without the engines (issue 34)
    from ..core.target import Target
    from ..engines.agentlink import AgentHost
    from ..engines.session import Session
    from ..engines.step import StepControl


class UsageError(UaldbgError):
    """Bad input from the user: shown as one line, never a traceback."""


class HelpShown(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class Parser(argparse.ArgumentParser):
    """argparse that reports through exceptions: a debugger must not exit on a typo."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("add_help", True)
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        self.completions: dict[str, tuple[str, ...]] = {}  # option string -> its choices (completion)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.note_option(action)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        """A group whose options are noted for completion too (argparse adds them to the group)."""
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def noted(*a: Any, **kw: Any) -> argparse.Action:
            action = add(*a, **kw)
            self.note_option(action)
            return action

        group.add_argument = noted  # type: ignore[method-assign]
        return group

    def note_option(self, action: argparse.Action) -> None:
        for option in action.option_strings:
            self.completions[option] = tuple(str(c) for c in action.choices) if action.choices else ()

    def complete(self, before: Sequence[str], word: str) -> list[str]:
        """What completes `word` after the words `before` it: an option's choices after that
        option, else the options that start with it."""
        if before and before[-1] in self.completions and self.completions[before[-1]]:
            return [c for c in self.completions[before[-1]] if c.startswith(word)]
        if word.startswith("-") or not word:
            return sorted(o for o in self.completions if o.startswith(word) and o.startswith("--"))
        return []

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise HelpShown(self.format_help())

    def print_help(self, file: Any = None) -> None:
        raise HelpShown(self.format_help())


class Host(Protocol):
    """What a command needs from the debugger adapter that runs it."""

    session: Session

    def target(self) -> Target | None:
        """The stopped process, or None when there is none (before `run`, after exit)."""
        ...

    def install(self) -> None:
        """Put ualdbg's hooks in the debugger (signal catching, arm point, thread hooks)."""
        ...

    def uninstall(self) -> None:
        """Remove the hooks and restore the user's signal settings."""
        ...

    def step_control(self) -> StepControl:
        """The step engine's debugger primitives (engines/step.py)."""
        ...

    def agent_host(self) -> AgentHost:
        """What the in-process agent needs of the debugger (engines/agentlink.py)."""
        ...

    def settle_faults(self) -> frozenset[int]:
        """Before arming again after `off`: threads still stopped at an alignment fault ualdbg
        reported run that instruction unchecked, as `off` promised (gdb: a `stepi` now). The
        ones that will run it only when the program resumes (lldb's step plans) are returned:
        armed once they have (Session.arm_late)."""
        ...


@runtime_checkable
class LaunchSource(Protocol):
    """An optional capability of a Host (gdb's and lldb's): the loaded program and how `run`
    would start it (`ualdbg stackcheck`, `ualdbg audit`)."""

    def launch_info(self) -> tuple[str, list[str], tuple[str, ...], str]:
        """(program path, its arguments, the environment `run` would give it as NAME=VALUE
        strings, a note on what was removed from it, e.g. the debugger's LINES/COLUMNS)."""
        ...


Output = list[Any]  # strings and rich renderables, printed by the adapter's sink
Runner = Callable[[Host, argparse.Namespace], Output]


@dataclass
class CommandSpec:
    path: tuple[str, ...]
    parser: Parser
    run: Runner

    @property
    def summary(self) -> str:
        return (self.parser.description or "").strip().splitlines()[0]

    @property
    def help(self) -> str:
        return self.parser.format_help()

    def invoke(self, host: Host, argv: str | Sequence[str]) -> Output:
        args = shlex.split(argv) if isinstance(argv, str) else list(argv)
        return self.run(host, self.parser.parse_args(args))


def examples_text(lines: Sequence[str]) -> str:
    """The `examples:` block every command's help ends with (as GEF's do): the invocations a user
    actually types, each optionally followed by two spaces and what it does."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


COMMANDS: dict[tuple[str, ...], CommandSpec] = {}
GROUPS: dict[tuple[str, ...], str] = {
    (): "Find unaligned memory accesses (ualdbg).\n\n" + examples_text([
        "ualdbg break            stop at each unaligned access (then `run` or `continue`)",
        "ualdbg trace start      record without stopping; `ualdbg trace show --summary`",
        "ualdbg status           what is armed, in which threads",
        "ualdbg off              disarm; no thread keeps AC",
        "help ualdbg break       every command's help ends with examples"]),
    ("trace",): "FLT-style trace buffer of unaligned accesses: start, stop, show, clear, save.\n\n" + examples_text([
        "ualdbg trace start",
        "ualdbg trace show --summary --by line",
        "ualdbg trace save run.json",
        "ualdbg trace stop"]),
}


def command(*path: str, description: str, epilog: str = "",
            examples: Sequence[str] = ()) -> Callable[[Callable[[Parser], Runner]], Callable[[Parser], Runner]]:
    """Declare `ualdbg PATH...`: the decorated function adds its arguments and returns the
    runner. Help, usage and docs all come from the one parser; every command shows examples."""
    if examples:
        epilog = (epilog.rstrip() + "\n\n" if epilog else "") + examples_text(examples)
    if "examples:" not in epilog:
        raise ValueError(f"ualdbg {' '.join(path)}: declare its examples (help shows them)")

    def wrap(build: Callable[[Parser], Runner]) -> Callable[[Parser], Runner]:
        parser = Parser(prog="ualdbg " + " ".join(path), description=description, epilog=epilog)
        runner = build(parser)
        COMMANDS[path] = CommandSpec(path, parser, runner)
        return build

    return wrap


class ShellCommand:
    """A sub-command of the shell's `ualdbg` (memray's prepare_parser/run are the model), declared
    in one module of cli/ with @shell_command. Its options are added when it is chosen or its
    help shown, so a start pays only for the command it runs (issue 34); `run` returns the exit
    status, and raises a UaldbgError (core/errors.py) that the shell's main prints."""

    name: ClassVar[str]
    help: ClassVar[str]  # its line in `ualdbg --help`
    description: ClassVar[str | None] = None
    epilog: ClassVar[str | None] = None
    # Runs a program (or traces one), as a wrapper (timeout(1), env(1)) does: its own failure is
    # then 125, never a status the program's ordinary failure could have (ci/gate.py).
    wraps: ClassVar[bool] = False
    raw: ClassVar[bool] = False  # takes its arguments unparsed (`ualdbg gdb`: they are gdb's)

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's options (and, if it has them only then, its description)."""

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        raise NotImplementedError


SHELL_COMMANDS: dict[str, ShellCommand] = {}  # in the order `ualdbg --help` lists them


def shell_command(cls: type[ShellCommand]) -> type[ShellCommand]:
    """Declare a shell sub-command (cli/shell.py imports each module that declares one)."""
    SHELL_COMMANDS[cls.name] = cls()
    return cls
