"""Issue 29 (item 11): the program gets exactly the argv (argv[0] as typed, not its absolute path)
and the environment a direct run gives it, in every engine; the agent adds LD_PRELOAD and
UALDBG_AGENT and nothing else (docs/CI.md), and Python's own start-up (its C-locale coercion,
which sets LC_CTYPE in ualdbg's environment) does not leak into the program's."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.build import build_program
from support.env import require_tool
from wrapperrun import ENGINES, build_wrapped, env_with, need, program_for, ualdbg_argv

AGENT_ADDS = ("LD_PRELOAD=", "UALDBG_AGENT=")


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_wrapped(tmp_path_factory.mktemp("wrapped"))


def _c_locale_env(tmp_path: Path) -> dict[str, str]:
    """A minimal environment with no locale variable (a CI container's): ualdbg's Python coerces
    its C locale to C.UTF-8 and says so in its own LC_CTYPE. The program's folder on PATH."""
    env = {k: v for k, v in env_with().items() if not k.startswith("LC_") and k != "LANG"}
    env["PATH"] = f"{tmp_path}:{env.get('PATH', '/usr/bin:/bin')}"
    env["WRAPPED_NOTE"] = "a value with  spaces and = signs"
    return env


@pytest.mark.parametrize("typed", ["./wrapped", "wrapped"])
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_program_gets_the_argv_and_environment_of_a_direct_run(engine: str, typed: str, wrapped: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    need(engine)
    shutil.copy2(program_for(engine, *wrapped), tmp_path / "wrapped")
    env = _c_locale_env(tmp_path)
    args = [typed, "show", "an argument with spaces", "", "$HOME"]
    direct = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, check=True)
    traced = subprocess.run(ualdbg_argv("trace", *ENGINES[engine], "--", *args), capture_output=True, text=True,
                            timeout=300, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)
    assert traced.returncode == 0, traced.stderr
    assert f"argv[0]={typed}\n" in direct.stdout
    want = [line for line in direct.stdout.splitlines() if line.startswith(("argv", "env="))]
    got = [line for line in traced.stdout.splitlines() if line.startswith(("argv", "env="))]
    if engine == "agent":  # what the agent must add, and only that (docs/CI.md)
        added = [line for line in got if line.startswith(tuple(f"env={v}" for v in AGENT_ADDS))]
        assert len(added) == 2, got
        got = [line for line in got if line not in added]
    assert got == want, traced.stdout


@pytest.mark.parametrize("engine", ["agent", "trap-gdb"])
def test_a_shell_sees_its_own_name_as_typed(engine: str, tmp_path: Path) -> None:
    """`ualdbg trace -- bash -c 'echo $0'` prints what `bash -c 'echo $0'` prints: bash."""
    need(engine)
    bash = shutil.which("bash")
    assert bash is not None
    direct = subprocess.run(["bash", "-c", "echo $0"], capture_output=True, text=True, timeout=60, env=env_with())
    traced = subprocess.run(ualdbg_argv("trace", *ENGINES[engine], "--", "bash", "-c", "echo $0"), capture_output=True,
                            text=True, timeout=300, cwd=tmp_path, env=env_with(), stdin=subprocess.DEVNULL)
    assert direct.stdout == "bash\n"
    assert traced.stdout == direct.stdout, traced.stderr


def test_under_qemu_the_program_gets_its_argv0_and_inherited_dispositions(tmp_path: Path) -> None:
    """A sparc64 program runs under qemu-user (gdb-multiarch attached): argv[0] as typed (qemu's
    -0), the arguments as given, the signals it was started with ignored still ignored."""
    from wrapperrun import PROGRAMS, ignoring

    from ualdbg.isa.arch import arch_by_name

    info = arch_by_name("sparc64")
    for tool in (f"{info.triplet}-gcc", info.qemu or "qemu-sparc64", "gdb-multiarch"):
        require_tool(tool)
    build_program(tmp_path / "wrapped", PROGRAMS / "wrapped.c", flags=("-O1", "-static"), compiler=f"{info.triplet}-gcc")
    ignored = ignoring("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1")
    # What qemu-user alone shows the program (it dies of its SIGBUS after printing).
    direct = subprocess.run([info.qemu or "qemu-sparc64", "-0", "./wrapped", "./wrapped", "show", "a b"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env_with(),
                            stdin=subprocess.DEVNULL, preexec_fn=ignored)
    traced = subprocess.run(ualdbg_argv("trace", "--", "./wrapped", "show", "a b"), capture_output=True, text=True,
                            timeout=300, cwd=tmp_path, env=env_with(), stdin=subprocess.DEVNULL, preexec_fn=ignored)
    assert traced.returncode == 0, traced.stderr
    lines = traced.stdout.splitlines()
    assert lines[:3] == ["argv[0]=./wrapped", "argv[1]=show", "argv[2]=a b"], traced.stdout
    sig = [line for line in lines if line.startswith(("SigIgn", "SigBlk"))]
    assert sig and sig == [line for line in direct.stdout.splitlines() if line.startswith(("SigIgn", "SigBlk"))], (
        traced.stdout, direct.stdout)
