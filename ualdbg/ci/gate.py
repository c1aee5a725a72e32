"""The exit contract of `ualdbg check`, as valgrind's --error-exitcode and the sanitizers have it:
a program that fails fails the gate with its own status; otherwise the gate fails with a status
of its own when unaligned accesses exceed the limit (or are new against a baseline), or when the
run was incomplete: ualdbg knows it did not see part of it (the document's `blind_spots`)."""
from __future__ import annotations

from collections.abc import Callable

from ..core.errors import EXIT_CANNOT_EXECUTE as EXIT_CANNOT_EXECUTE
from ..core.errors import EXIT_CLEAN as EXIT_CLEAN
from ..core.errors import EXIT_ERROR as EXIT_ERROR
from ..core.errors import EXIT_FOUND as EXIT_FOUND
from ..core.errors import EXIT_INCOMPLETE as EXIT_INCOMPLETE
from ..core.errors import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from ..core.errors import EXIT_TOOL as EXIT_TOOL
from ..core.result import Site, TraceResult

# The statuses are core/errors.py's (the error base carries them), named here too for the contract.
from ..lazyclass import dataclass
from .baseline import where

STATUSES = """  2                  usage error or bad input: an option, a baseline, an output path, a corrupt ELF (nothing was run)
  125                ualdbg failed (a debugger missing or dead, an internal error): one line on stderr
  126                the program cannot be executed (permission, not an ELF program or #! script)
  127                the program, its ELF interpreter or a shared library it needs was not found
  (one line on stderr for each; 125/126/127 as timeout(1) and env(1) use them)"""

CONTRACT = f"""exit status:
  the program's own  when the program fails: its non-zero exit status, or 128+N when signal N killed it
  0                  the program succeeded and made at most --max-faults unaligned accesses in scope
                     (with --baseline: no site that is not in the baseline)
  1                  too many unaligned accesses, or new sites (--error-exitcode N chooses another status)
  3                  incomplete: within the limit, but ualdbg knows it did not see part of the run (the
                     program blocked SIGBUS or took it over, a process the agent could not enter: the
                     JSON's blind_spots say what); --allow-incomplete passes such a run
{STATUSES}"""


@dataclass(frozen=True)
class Verdict:
    status: int
    line: str  # one line for stderr: what the gate decided and why


def program_status(exit_status: int | None, exit_signal: int | None) -> int:
    """The program's end as a shell reports it: its status, or 128+N for a death by signal N."""
    if exit_signal is not None:
        return 128 + exit_signal
    return exit_status or 0


def _accesses(n: int) -> str:
    return f"{n:,} unaligned access{'es' if n != 1 else ''}"


def _counted(result: TraceResult, fail_on: str) -> tuple[int, Callable[[int], str]]:
    """The accesses the gate counts under `fail_on`, and how a count of them reads."""
    if fail_on == "any":
        return result.faults_total, _accesses
    from .costfilter import noun, selected_total

    every = result.faults_total
    return selected_total(result, fail_on), lambda k: f"{noun(fail_on, k)} (--fail-on {fail_on}) among {_accesses(every)}"


def blind_summary(result: TraceResult) -> str | None:
    """What a run did not see, in a few words for the verdict line (None: nothing it knows of)."""
    if not result.blind_spots:
        return None
    kinds: dict[str, int] = {}
    for b in result.blind_spots:
        kinds[b.kind] = kinds.get(b.kind, 0) + b.count
    return ", ".join(f"{k} x{n:,}" for k, n in sorted(kinds.items()))


def decide(result: TraceResult, *, max_faults: int, error_exitcode: int = EXIT_FOUND,
           new_sites: list[Site] | None = None, partial: bool = False,
           allow_incomplete: bool = False, fail_on: str = "any") -> Verdict:
    """The gate's verdict on one run. `new_sites`: with a baseline, the sites it does not know.
    A run that found too much fails as such whatever it missed; a clean one that missed part of
    the run is incomplete (EXIT_INCOMPLETE) unless `allow_incomplete`. `fail_on`: which cost
    classes count (ci/costfilter.py; `any`: every unaligned access)."""
    n, words = _counted(result, fail_on)
    blind = blind_summary(result)
    unseen = f"; INCOMPLETE: {blind}" if blind else ""
    prog = result.program
    failed = program_status(prog.exit_status, prog.exit_signal)
    how = f"killed by signal {prog.exit_signal}" if prog.exit_signal else f"exit status {prog.exit_status}"
    cut = " (interrupted: the trace is partial)" if partial else ""
    if failed:
        return Verdict(failed, f"ualdbg check: FAIL: the program failed ({how}); {words(n)} in scope{cut}{unseen}")
    if new_sites is not None:
        if new_sites:
            lines = ", ".join(where(s) for s in new_sites[:5]) + (" ..." if len(new_sites) > 5 else "")
            return Verdict(error_exitcode, f"ualdbg check: FAIL: {len(new_sites)} site{'s' if len(new_sites) != 1 else ''} "
                                           f"not in the baseline ({lines}); {words(n)} in scope{cut}{unseen}")
        clean = f"{words(n)} in scope, all at sites in the baseline{cut}"
    elif n > max_faults:
        return Verdict(error_exitcode, f"ualdbg check: FAIL: {words(n)} in scope (allowed {max_faults}){cut}{unseen}")
    else:
        clean = f"{words(n)} in scope (allowed {max_faults}){cut}"
    if blind and not allow_incomplete:
        return Verdict(EXIT_INCOMPLETE, f"ualdbg check: INCOMPLETE: {clean}, but part of the run was not seen ({blind}; "
                                        "the report and the JSON's blind_spots say where; --allow-incomplete accepts it)")
    return Verdict(EXIT_CLEAN, f"ualdbg check: ok: {clean}" + (f" (incomplete, accepted: {blind})" if blind else ""))
