"""A light start (issue 34): `ualdbg trace` imports what its run needs and nothing more. A run
whose faults are all out of scope (`/bin/true`: the loader's own) prints its summary without the
renderer (rich), the decoder (capstone), pyelftools or the symbolizer, and without the modules of
the sub-commands it did not choose. Asserted on the module set (`python -X importtime`), never on
a time: what a module costs to import is measured in bench/startup.py."""
from __future__ import annotations

import sys

from support.env import BUILD, scrubbed_env
from support.run import Result, run

RENDERER_DECODER_ELF = ("rich", "capstone", "elftools")
SYMBOLIZER = ("ualdbg.symbols.resolver", "ualdbg.symbols.dwarfindex", "ualdbg.symbols.elfindex",
              "ualdbg.symbols.data", "ualdbg.isa.decode")
OTHER_COMMANDS = ("ualdbg.commands.stackcheck", "ualdbg.commands.audit", "ualdbg.tools.stackcheck",
                  "ualdbg.tools.audit", "ualdbg.engines.session")


def imported(*args: str) -> tuple[Result, set[str]]:
    """`python -X importtime -m ualdbg ARGS`: its result and every module it imported."""
    r = run([sys.executable, "-X", "importtime", "-m", "ualdbg", *args], env=scrubbed_env(), timeout=120)
    r.fail_on_timeout()
    modules = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, modules


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `names` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_a_run_that_faults_only_out_of_scope_imports_no_renderer_decoder_or_symbolizer() -> None:
    for command in ("trace", "check"):
        r, modules = imported(command, "--", "/bin/true")
        assert r.returncode == 0, r.explain()
        assert "0 in scope" in r.stderr, r.explain()
        assert "ualdbg.engines.agent" in modules, r.explain()  # the agent did run it
        assert among(modules, RENDERER_DECODER_ELF) == [], f"ualdbg {command} -- /bin/true"
        assert among(modules, SYMBOLIZER) == [], f"ualdbg {command} -- /bin/true"
        assert among(modules, OTHER_COMMANDS) == [], f"ualdbg {command} -- /bin/true"


def test_a_run_with_faults_in_scope_imports_what_names_and_prints_them() -> None:
    r, modules = imported("trace", "--", str(BUILD / "not_aligned"), "5")
    assert r.returncode == 0, r.explain()
    assert "5 in scope" in r.stderr, r.explain()
    assert {"rich", "capstone", "ualdbg.symbols.resolver", "ualdbg.symbols.data"} <= modules


def test_a_sub_command_builds_its_own_options_when_chosen() -> None:
    r, modules = imported("stackcheck", "--help")
    assert r.returncode == 0 and "--env-pad" in r.stdout, r.explain()
    assert "ualdbg.commands.stackcheck" in modules
    r, modules = imported("audit", "--help")
    assert r.returncode == 0 and "COMMON" in r.stdout, r.explain()
    assert "ualdbg.commands.audit" in modules and among(modules, ("ualdbg.tools.audit", "elftools")) == []


def test_a_run_imports_the_module_of_its_own_command_only() -> None:
    """cli/shell.py's COMMANDS: `trace` does not import audit's, report's or the launchers'
    modules; the top-level help and a mistyped command import them all (they list them)."""
    cli = ("ualdbg.cli.audit", "ualdbg.cli.report", "ualdbg.cli.launchers", "ualdbg.cli.check",
           "ualdbg.cli.stackcheck", "ualdbg.cli.watching")
    _, modules = imported("trace", "--", "/bin/true")
    assert among(modules, cli) == []
    r, modules = imported("report", "--help")
    assert r.returncode == 0 and "ualdbg.cli.report" in modules and among(modules, cli[:3]) == ["ualdbg.cli.report"], r.explain()
    for args in (["--help"], ["nosuchcommand"]):
        r, modules = imported(*args)
        assert set(cli) <= modules and "lldbinit" in r.stdout + r.stderr, r.explain()


def test_the_quick_end_runs_the_exit_handlers_and_flushes_everything(tmp_path: object) -> None:
    """ualdbg/__main__.py's `run` ends the process without tearing the interpreter down: what the
    ordinary end did that matters still happens. A report of thousands of lines reaches a pipe
    whole, and the atexit handlers ran (the dataclass code kept at exit, lazyclass.py)."""
    import json
    from pathlib import Path

    trace = Path(str(tmp_path)) / "t.json"
    r = run([sys.executable, "-m", "ualdbg", "trace", "--json", str(trace), "--", str(BUILD / "not_aligned"), "3"],
            env=scrubbed_env(), timeout=120)
    assert r.returncode == 0, r.explain()
    cache = Path(str(tmp_path)) / "cache"
    r = run([sys.executable, "-m", "ualdbg", "report", "--json", "-", str(trace)],
            env=scrubbed_env({"XDG_CACHE_HOME": str(cache)}), timeout=120)
    assert r.returncode == 0, r.explain()
    assert json.loads(r.stdout)["faults_total"] == json.loads(trace.read_text())["faults_total"] == 3
    assert list((cache / "ualdbg").glob("dataclass-code.*/ualdbg.*.marshal")), "the atexit handler did not run"
    r = run([sys.executable, "-c", f"import sys; sys.argv[1:] = ['report', {str(trace)!r}]; "
             "[print(i) for i in range(20000)]; from ualdbg.__main__ import run; run()"], env=scrubbed_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[:20000] == [str(i) for i in range(20000)], r.explain()
    assert "Unaligned accesses" in r.stdout + r.stderr, r.explain()
