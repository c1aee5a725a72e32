"""`ualdbg check -- PROG`: the CI gate. The trace of `trace` (cli/trace.py), then the verdict
(ci/gate.py), the outputs that carry it (SARIF's exit code) and the baseline."""
from __future__ import annotations

import argparse
import os

from ..ci import baseline
from ..ci.costfilter import FAIL_ON, filtered
from ..ci.costfilter import HELP as FAIL_ON_HELP
from ..ci.gate import CONTRACT, EXIT_CLEAN, EXIT_FOUND, Verdict, decide
from ..commands.argtypes import nonnegative
from ..commands.registry import ShellCommand, examples_text, shell_command
from ..render.formats import FORMATS, Context
from .common import sink, write_formats
from .outputs import say, write_json, write_trace
from .trace import run_options, trace


@shell_command
class Check(ShellCommand):
    name = "check"
    help = "CI gate: fail when PROG fails or makes more than N unaligned accesses"
    description = ("Run PROG and fail when it fails, or when it makes more than --max-faults unaligned "
                   "accesses in scope (with --baseline: at sites the baseline does not have). "
                   "Outputs are checked as writable before PROG starts.")
    epilog = CONTRACT + "\n\n" + examples_text([
        "ualdbg check -- ./prog args",
        "ualdbg check --max-faults 10 --json r.json --sarif r.sarif -- ./prog",
        "ualdbg check --update-baseline --baseline ualdbg-baseline.json -- make test   accept today's sites",
        "ualdbg check --baseline ualdbg-baseline.json -- make test                     fail on new ones only",
        "ualdbg check --engine trap --debugger lldb -- ./prog",
        "ualdbg check --pid 1234 --duration 30 --sarif r.sarif   a running service, for 30 seconds"])
    wraps = True

    def prepare_parser(self, c: argparse.ArgumentParser) -> None:
        run_options(c)
        c.add_argument("--max-faults", type=nonnegative, default=0, metavar="N", help="unaligned accesses allowed (default 0)")
        c.add_argument("--error-exitcode", type=nonnegative, default=EXIT_FOUND, metavar="N",
                       help="the status when the accesses exceed the limit or the baseline (default 1)")
        c.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0 for code scanning")
        c.add_argument("--baseline", metavar="FILE", help="fail only on sites not in FILE (keyed by module, inline "
                       "chain and the text of each line: edits elsewhere keep them; docs/CI.md)")
        c.add_argument("--allow-incomplete", action="store_true",
                       help="pass a run part of which ualdbg could not see (SIGBUS blocked or taken over by the program, a "
                            "process the agent could not enter) instead of failing with status 3; the report, the JSON's "
                            "blind_spots and SARIF still say what was not seen")
        c.add_argument("--update-baseline", action="store_true", help="write this run's sites to --baseline FILE and pass "
                       "(unless the program fails)")
        c.add_argument("--fail-on", choices=FAIL_ON, default="any", help=FAIL_ON_HELP + "; --max-faults and --baseline "
                       "count these only")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        result, _run = trace(args)
        verdict = decide(result, max_faults=args.max_faults, error_exitcode=args.error_exitcode,
                         new_sites=getattr(args, "new_sites", None), partial=result.partial,
                         allow_incomplete=args.allow_incomplete, fail_on=args.fail_on)
        if args.update_baseline and verdict.status == args.error_exitcode and not result.program.exit_signal \
                and not result.program.exit_status:
            verdict = Verdict(EXIT_CLEAN, f"ualdbg check: ok: baseline of {len(filtered(result, args.fail_on).sites)} "
                                          f"sites written to {args.baseline}")
        context = Context(exit_code=verdict.status, new_sites=getattr(args, "new_sites", None))
        if args.sarif:  # after the verdict: its invocation carries the exit status (issue 29)
            write_trace(result, args.sarif, FORMATS["sarif"], "the SARIF output", context)
        write_formats(args, result, context)
        if os.environ.get("GITHUB_ACTIONS") == "true" and not any(fmt.name == "github" for fmt, _ in args.format):
            # Under GitHub Actions the runner reads annotations from stdout (docs/CI.md)
            write_trace(result, "-", FORMATS["github"], "the GitHub annotations", context)
        report = sink(args)
        if args.update_baseline:
            written = baseline.build(result, args.fail_on)
            write_json(written, args.baseline, "the baseline")
            if written.get("note"):  # weaker keys than the source text's (ci/fingerprint.py): said, and in the file
                report.print(f"note: baseline: {written['note']}")
        report.print(verdict.line)
        if not report.close():
            say(verdict.line)  # the log did not reach its path (the fallback is named above): the verdict stays
        return verdict.status
