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
