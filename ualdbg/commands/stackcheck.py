"""`ualdbg stackcheck`: its arguments (shared with the shell command) and the debugger command,
which sweeps the loaded program in a child gdb so the user's session is left as it was."""
from __future__ import annotations

import argparse
from typing import Any

from ..render.jsondoc import dump
from ..tools.stackcheck.check import PAD_NAME, Request, StackcheckError, parse_lengths, parse_var
from .argtypes import nonnegative
from .registry import Host, LaunchSource, Output, Parser, Runner, UsageError, command

EPILOG = f"""Variants are every --argv0-lengths value crossed with every --env-pad value, all with ASLR off,
plus --aslr N runs of the program as given with ASLR on. argv[0] of length L is the program's base
name cut or extended with '_' (the program itself is exec'd by path: no copy or link is made);
--env-pad N adds {PAD_NAME}=<N x 'x'> as the last environment string (0 adds nothing). Every run,
measured in the debugger or timed natively, gets exactly that argv and environment; --trace arms
the trap engine in the measured runs themselves, so a traced run has the measured stack.

Per variant: the stack pointer at the entry point and at main's entry, the address of each
variable (default: main's locals whose type needs 8-byte alignment or more), of each argv[i]
and of each --env NAME string, each reduced modulo the item's alignment, 16, 32, 64 and 4096.

Exit status (shell): 1 when a variable is misaligned for its type in any variant, a traced
variant made an unaligned access, or --max-spread is exceeded; 0 otherwise; 2 for a usage error
or bad input; 125 when ualdbg failed, 126 when the program cannot be executed, 127 when it (or
its ELF interpreter, or a library it needs) was not found, as timeout(1) and env(1) say them.

examples:
  ualdbg stackcheck --var main:x --argv0-lengths 1-16 --env-pad 0-64/4 --time 5 -- ./stack_double
  ualdbg stackcheck --env-pad 0-15 --trace -- ./argv_fields ABCDEFGHIJKLMNOP
  ualdbg stackcheck --debugger lldb --aslr 4 -- ./stack_double
  (gdb) ualdbg stackcheck --var main:x --env-pad 0-64/8
  (lldb) ualdbg stackcheck --var main:x --env-pad 0-64/8 --trace
"""


def _percent(text: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {v}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--var", action="append", default=[], metavar="FUNC:NAME",
                   help="a local, parameter or static to measure (repeatable); default: main's locals needing 8-byte "
                        "alignment or more")
    p.add_argument("--argv0-lengths", metavar="RANGE", default=None,
                   help="argv[0] lengths to try, e.g. 1-16, 8,12 or 4-64/4 (default: argv[0] as given)")
    p.add_argument("--env-pad", metavar="RANGE", default="0-64/4",
                   help=f"lengths of the {PAD_NAME} padding variable to try (default 0-64/4; 0 adds nothing)")
    p.add_argument("--env", action="append", default=[], metavar="NAME", help="also measure this environment string (repeatable)")
    p.add_argument("--aslr", type=nonnegative, default=0, metavar="N", help="add N runs with address-space randomization on")
    p.add_argument("--time", type=nonnegative, default=0, metavar="N", help="time N native runs per variant (median, spread)")
    p.add_argument("--trace", action="store_true", help="arm the trap engine in every measured run (x86-64 programs) and count its unaligned accesses")
    p.add_argument("--max-spread", type=_percent, default=None, metavar="P",
                   help="fail when the variants' median run times differ by more than P percent (needs --time)")
    p.add_argument("--run-to-exit", action="store_true",
                   help="let each measured run finish and keep its output and exit status in the JSON (default: stop once measured)")
    p.add_argument("--debugger", choices=("gdb", "lldb"), default=None,
                   help="the debugger that measures (and with --trace, traces) the variants, in a child process "
                        "(default: gdb from the shell, the one you are in as a debugger command)")
    p.add_argument("--json", metavar="FILE", default=None, help="write the JSON document to FILE (- for stdout)")
    p.add_argument("--limit", type=nonnegative, default=None, metavar="N", help="show only the first N variants in the table")


def make_request(args: argparse.Namespace, argv: list[str], exec_path: str, base_env: tuple[str, ...], env_note: str,
                 debugger: str) -> Request:
    try:
        lengths = parse_lengths(args.argv0_lengths, minimum=1, what="--argv0-lengths") if args.argv0_lengths else None
        pads = parse_lengths(args.env_pad, minimum=0, what="--env-pad")
        for v in args.var:
            parse_var(v)
    except StackcheckError as exc:
        raise UsageError(str(exc)) from None
    if args.max_spread is not None and not args.time:
        raise UsageError("--max-spread needs --time N (the spread is of native run times)")
    debugger = args.debugger or debugger
    return Request(argv=argv, exec_path=exec_path, base_env=base_env, env_note=env_note, argv0_lengths=lengths, env_pad=pads,
                   env_names=tuple(args.env), variables=tuple(args.var), aslr_runs=args.aslr, time_runs=args.time,
                   trace=args.trace, max_spread=args.max_spread, run_to_exit=args.run_to_exit, debugger=debugger)


@command("stackcheck", description="Does alignment (and speed) depend on argv and the environment? Sweep variants of the loaded program.",
         epilog=EPILOG)
def _stackcheck(p: Parser) -> Runner:
    add_arguments(p)
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROG ARGS (default: the loaded program and its `run` arguments)")

    def run(host: Host, args: argparse.Namespace) -> Output:
        from ..engines.runner import ToolError
        from ..render.stackcheck import render  # rich: when a command runs, not when its parser is built
        from ..tools.stackcheck.run import exec_path_for, run_stackcheck

        if not isinstance(host, LaunchSource):
            raise UsageError("ualdbg stackcheck: this debugger's adapter cannot say how it would launch the program yet")
        rest = list(args.program)
        if rest[:1] == ["--"]:
            rest = rest[1:]
        try:
            path, prog_args, env, note = host.launch_info()
        except UsageError:
            if not rest:
                raise
            # No program loaded, one named after --: the environment is the debugger's own.
            import os

            from ..tools.stackcheck.launch import environment_strings

            path, prog_args = rest[0], rest[1:]
            env, note = environment_strings(dict(os.environ)), "environment: the debugger's own (no program loaded)"
        if rest:
            path, prog_args = rest[0], rest[1:]
        try:
            exec_path = exec_path_for(path)
            req = make_request(args, [path, *prog_args], exec_path, env, note, host.session.debugger)
            doc: dict[str, Any] = run_stackcheck(req)
        except (StackcheckError, ToolError) as exc:
            raise UsageError(f"ualdbg stackcheck: {exc}") from None
        if args.json:
            dump(doc, args.json)
        return render(doc, args.limit)

    return run


def run_cli(args: argparse.Namespace) -> int:
    """The shell command: `ualdbg stackcheck [options] -- PROG ARGS`. Returns the exit status."""
    import sys

    from ..engines.runner import ToolError
    from ..engines.wrapper import program_environ
    from ..render.console import make_console
    from ..render.stackcheck import render
    from ..tools.stackcheck.launch import environment_strings
    from ..tools.stackcheck.run import exec_path_for, run_stackcheck

    rest = list(args.program)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        raise ToolError("ualdbg stackcheck: name the program after --, e.g. ualdbg stackcheck -- ./prog args")
    try:
        req = make_request(args, rest, exec_path_for(rest[0]), environment_strings(program_environ()),
                           "environment: ualdbg's own, as the shell gave it", "gdb")
    except UsageError as exc:
        raise ToolError(str(exc).removeprefix("ualdbg stackcheck: ")) from None
    progress = None
    if sys.stderr.isatty() and args.json != "-":
        def progress(phase: str, done: int, total: int) -> None:
            sys.stderr.write(f"\rualdbg stackcheck: {phase} {done}/{total} \033[K")
            sys.stderr.flush()
    try:
        doc = run_stackcheck(req, progress)
    except StackcheckError as exc:
        raise ToolError(str(exc)) from None
    finally:
        if progress is not None:
            sys.stderr.write("\r\033[K")
    if args.json:
        dump(doc, args.json)
    if args.json != "-":
        out = make_console(sys.stdout)
        for item in render(doc, args.limit):
            if isinstance(item, str):
                out.out(item, highlight=False)
            else:
                out.print(item)
    return int(doc["exit"])
