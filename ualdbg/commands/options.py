"""Options shared by the debugger commands and the shell command, declared once: where to arm,
which modules are in scope, the ring's size, the engine, the step engine's scope and policy, and
the output formats."""
from __future__ import annotations

import argparse

from ..isa.alignment import POLICY_NAMES
from ..render.formats import Format, FormatError, format_named, names, parse_spec
from .argtypes import nonnegative, positive


def add_scope_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--at", choices=("main", "start"), default=None,
                   help="where a run is armed (default: main; the loader and libc start-up are unaligned by design)")
    p.add_argument("--all-modules", action="store_true", default=None,
                   help="include the dynamic loader and system libraries")
    p.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="also include this module (file name or path); repeatable")


def add_buffer_arg(p: argparse.ArgumentParser, default: int | None) -> None:
    p.add_argument("--buffer", type=positive, default=default, metavar="N",
                   help="records the ring keeps (counts stay exact when it wraps)")


DEBUGGER_ENGINES = ("trap", "step")
TRACE_ENGINES = ("agent", "trap", "step")  # `trace start` in a debugger: the agent where it works
SHELL_ENGINES = ("agent", "trap", "step")
ENGINE_HELP = {
    "agent": "agent (default where it works): in-process, one signal per fault",
    "trap": "trap: EFLAGS.AC signal mode under a debugger",
    "step": "step: single-step a scope (--in/--range/--everywhere) and check every access against --policy",
}


def add_engine_arg(p: argparse.ArgumentParser, engines: tuple[str, ...], default: str | None) -> None:
    p.add_argument("--engine", choices=engines, default=default,
                   help="; ".join(ENGINE_HELP[e] + (" (default)" if e == default else "") for e in engines))


def add_patch_args(p: argparse.ArgumentParser) -> None:
    """The agent's hot-site patching (docs/AGENT.md): the shell's `trace`/`check` and a
    debugger's `trace start`."""
    p.add_argument("--patch-after", type=nonnegative, default=2, metavar="K",
                   help="agent: after K traps at an instruction, patch it to count its faults without trapping "
                        "(exact counts; records for the first K only; default 2)")
    p.add_argument("--no-patch", action="store_true", help="agent: never patch: one trap and one record per fault")


def add_step_args(p: argparse.ArgumentParser, *, until_return: bool) -> None:
    """The step engine's scope and policy (engines/step.py, engines/scope.py). `until_return`
    needs a stopped thread: debugger commands only."""
    g = p.add_argument_group("step engine (--engine step)")
    g.add_argument("--in", dest="in_", action="append", default=[], metavar="FUNC",
                   help="step this function, every instance of it (gcc clones too); repeatable")
    g.add_argument("--range", action="append", default=[], metavar="LO,HI",
                   help="step the addresses [LO, HI); repeatable")
    if until_return:
        g.add_argument("--until-return", action="store_true",
                       help="step the current function of the stopped thread until it returns")
    g.add_argument("--everywhere", action="store_true",
                   help="step every instruction of the program from the arm point (slow in a debugger: a few thousand "
                        "instructions/s in gdb, under a thousand in lldb; tens of thousands from the shell)")
    g.add_argument("--policy", choices=POLICY_NAMES, default=None,
                   help="what counts as unaligned: ac (x86 #AC rules; default on x86), natural "
                        "(size-aligned up to 16; default elsewhere), cacheline (crosses 64 bytes), "
                        "page (crosses 4 KiB)")


def step_wanted(args: argparse.Namespace) -> bool:
    return bool(args.in_ or args.range or getattr(args, "until_return", False) or args.everywhere or args.policy)


def add_format_arg(p: argparse.ArgumentParser, *, to_path: bool) -> None:
    """`--format`: any output format of render/formats.py's registry. The shell's takes
    NAME[:PATH] and repeats (no PATH: stdout); `trace save FILE --format NAME` takes the name."""
    if to_path:
        p.add_argument("--format", type=_format_spec, action="append", default=[], metavar="NAME[:PATH]",
                       help=f"also write the trace in this format to PATH (- or none: stdout); repeatable; formats: {names()}")
    else:
        p.add_argument("--format", type=_format_name, default=None, metavar="NAME",
                       help=f"the format (default: the one FILE's suffix names, else json); formats: {names()}")


def _format_spec(text: str) -> tuple[Format, str]:
    try:
        return parse_spec(text)
    except FormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _format_name(text: str) -> Format:
    try:
        return format_named(text)
    except FormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
