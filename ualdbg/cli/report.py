"""`ualdbg report FILE... [--merge]`: a saved trace read back (core/document.py's door), or
several summed (ci/merge.py), re-rendered and written in any format."""
from __future__ import annotations

import argparse
import sys

from ..ci.costfilter import FAIL_ON, filtered, noun
from ..ci.costfilter import HELP as FAIL_ON_HELP
from ..ci.gate import EXIT_CLEAN, EXIT_FOUND
from ..ci.merge import merge
from ..commands.argtypes import nonnegative
from ..commands.options import add_format_arg
from ..commands.registry import ShellCommand, shell_command
from ..core.document import read_document
from ..core.errors import ToolError
from ..isa.costclass import costs_for
from ..render.console import make_console
from ..render.formats import FORMATS
from ..render.tables import GROUPS, blind_lines, header, patch_note, records_table, summary_table
from .common import check_outputs, examples, format_outputs, write_formats
from .outputs import Named, standard_stream, write_trace

REPORT_LIMIT = 1000  # records `report` shows unless told: a table of 1,000 takes under a second


@shell_command
class Report(ShellCommand):
    name = "report"
    help = "re-render a saved JSON trace, or merge several"
    description = ("Re-render a JSON trace saved by trace/check/`trace save`; with --merge, sum several "
                   "(the processes of a test suite, many CI jobs) into one.")
    epilog = examples("ualdbg report t.json                 the records",
                      "ualdbg report t.json --summary       counts per PC, hottest first",
                      "ualdbg report t.json --by line       counts per source line",
                      "ualdbg report --merge a.json b.json --json all.json --sarif all.sarif")

    def prepare_parser(self, r: argparse.ArgumentParser) -> None:
        r.add_argument("file", nargs="*", help="the JSON trace (several with --merge)")
        r.add_argument("--merge", action="store_true", help="sum the documents: per-site counts added, each run's figures kept")
        r.add_argument("--json", metavar="FILE", default=None, help="write the (merged) document to FILE (- for stdout, fd:N for "
                       "descriptor N)")
        r.add_argument("--sarif", metavar="FILE", default=None, help="write SARIF 2.1.0 for the (merged) document")
        add_format_arg(r, to_path=True)
        r.add_argument("--summary", action="store_true", help="counts per exception PC, hottest first, with the data "
                       "and the fix advice per site, instead of the records")
        r.add_argument("--by", choices=GROUPS, default="pc", help="the summary per pc (default), source line, function "
                       "or module")
        r.add_argument("--fail-on", choices=FAIL_ON, default="any", help=FAIL_ON_HELP + "; shows and writes these only, "
                       "and exits 1 when there are any")
        r.add_argument("--limit", type=nonnegative, default=REPORT_LIMIT, metavar="N",
                       help=f"records shown: the newest N (default {REPORT_LIMIT:,}; 0: all of them, slow for a full "
                            "ring); with --summary or --by, the hottest N rows")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        if not args.file:
            raise ToolError("ualdbg report: name a JSON trace, e.g. ualdbg report t.json")
        if len(args.file) > 1 and not args.merge:
            raise ToolError("ualdbg report: several files need --merge")
        check_outputs([n for n in (Named("--json", args.json or ""), Named("--sarif", args.sarif or "")) if n.path]
                      + format_outputs(args), [])
        traces = [(path, read_document(path)) for path in args.file]
        result = filtered(merge(traces) if args.merge else traces[0][1], args.fail_on)
        if args.json:
            write_trace(result, args.json, FORMATS["json"], "the JSON output")
        if args.sarif:
            write_trace(result, args.sarif, FORMATS["sarif"], "the SARIF output")
        write_formats(args, result)
        if (args.json and standard_stream(args.json) == 1) or any(path == "-" for _fmt, path in args.format):
            return EXIT_CLEAN  # stdout holds the document: no table after it
        out = make_console(sys.stdout)
        out.print(header(result))
        for line in blind_lines(result):
            out.print(line)
        if args.summary or args.by != "pc" or args.merge:
            out.print(summary_table(result, args.by, costs_for(result), limit=args.limit or None))
        else:
            out.print(records_table(result, args.limit or None))
            kept = len(result.records)
            if patch_note(result):
                out.print(f"note: {patch_note(result)}")
            if args.limit and kept > args.limit:  # a full ring is 100,000 rows: minutes of table (issue 29)
                out.print(f"records: the newest {args.limit:,} of {kept:,} kept shown (--limit N; --limit 0 shows all; "
                          f"--summary counts every fault)")
        if args.fail_on != "any":
            out.print(f"--fail-on {args.fail_on}: {noun(args.fail_on, result.faults_total)} in scope")
            return EXIT_FOUND if result.faults_total else EXIT_CLEAN
        return EXIT_CLEAN
