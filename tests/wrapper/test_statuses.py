"""Issue 29 (items 10, 12): ualdbg's exit statuses as a wrapper's (timeout(1), env(1)), and the
fallback keeps the error contract. A program that cannot start gets the shell's status (127 for a
missing ELF interpreter or library, 126 when it cannot be executed) in one line, without running;
ualdbg's own failure is 125, never a status the program's ordinary failure has (make's 2); a
program is never run twice; gdb's text never reaches the user."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from support.build import build_program, build_source
from wrapperrun import ENGINES, PROGRAMS, build_wrapped, env_with, need, program_for, ualdbg_argv

RUNNING = {k: v for k, v in ENGINES.items() if k != "static-gdb"}


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_wrapped(tmp_path_factory.mktemp("wrapped"))


@pytest.fixture(scope="module")
def unstartable(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Programs a direct run cannot start, and what the loader or the shell names: an ELF
    interpreter that does not exist (a musl or Nix build), a shared library that was deleted."""
    out = tmp_path_factory.mktemp("unstartable")
    interp = build_source(PROGRAMS / "wrapped.c", out / "interp",
                          flags=("-g", "-O1", "-Wl,--dynamic-linker=/nonexistent/ld-ualdbg.so"))
    lib = build_program(out / "lib" / "libgone.so", "gone.c", flags=("-shared", "-fPIC"), cwd=PROGRAMS)
    uses = build_program(out / "uses_gone", "uses_gone.c", flags=("-g",), cwd=PROGRAMS,
                         libs=(f"-L{lib.parent}", "-lgone", f"-Wl,-rpath,{lib.parent}"))
    lib.unlink()
    return {"interpreter": (interp, "/nonexistent/ld-ualdbg.so"), "library": (uses, "libgone.so")}


def _one_line(p: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    shown = f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert len(lines) == 1 and lines[0].startswith("ualdbg: "), shown
    assert all(w in lines[0] for w in words), shown
    assert "Traceback" not in p.stderr and "Python Exception" not in p.stderr, shown
    return lines[0]


def _ualdbg(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ualdbg_argv(*args), capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env or env_with(), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("what", ["interpreter", "library"])
@pytest.mark.parametrize("cmd", ["trace", "check"])
@pytest.mark.parametrize("engine", sorted(RUNNING))
def test_a_program_that_cannot_start_is_127_in_one_line(engine: str, cmd: str, what: str,
                                                         unstartable: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    """As the shell: `./prog` says 127 (required file not found; error while loading shared
    libraries). Decided before anything runs: not run under the agent, then again under gdb."""
    need(engine)
    prog, named = unstartable[what]
    direct = subprocess.run(["/bin/sh", "-c", '"$0"', str(prog)], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert direct.returncode == 127, direct.stderr  # the shell's word for it
    p = _ualdbg(cmd, *ENGINES[engine], "--", str(prog), cwd=tmp_path)
    assert p.returncode == 127, p.stderr
    _one_line(p, named)
    assert p.stdout == ""


@pytest.mark.parametrize("what", ["interpreter", "library"])
def test_stackcheck_of_a_program_that_cannot_start_is_127(what: str, unstartable: dict[str, tuple[Path, str]],
                                                          tmp_path: Path) -> None:
    need("trap-gdb")
    prog, named = unstartable[what]
    p = _ualdbg("stackcheck", "--", str(prog), cwd=tmp_path)
    assert p.returncode == 127, p.stderr
    _one_line(p, named)


@pytest.mark.parametrize("cmd", ["trace", "check", "stackcheck"])
def test_a_program_that_cannot_be_executed_is_126_and_one_not_found_127(cmd: str, wrapped: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    plain = tmp_path / "not-executable"
    shutil.copy2(wrapped[0], plain)
    plain.chmod(0o644)
    assert _ualdbg(cmd, "--", str(plain), cwd=tmp_path).returncode == 126
    _one_line(_ualdbg(cmd, "--", str(plain), cwd=tmp_path), "not executable")
    p = _ualdbg(cmd, "--", "no-such-command-anywhere", cwd=tmp_path)
    assert p.returncode == 127, p.stderr
    _one_line(p, "no-such-command-anywhere", "not found")


def test_ualdbg_failing_is_125_and_the_programs_own_2_is_the_programs(wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    """`make`'s ordinary failure is 2: check passes it through; ualdbg's own failure (here: the
    debugger its engine needs is not installed) is 125, which no ordinary program failure has."""
    p = _ualdbg("check", "--", str(wrapped[0]), "no-such-mode", cwd=tmp_path)
    assert p.returncode == 2 and "FAIL: the program failed (exit status 2)" in p.stderr, p.stderr
    no_debuggers = env_with({"PATH": str(tmp_path / "empty")})
    for engine in (["--engine", "trap"], ["--engine", "trap", "--debugger", "lldb"]):
        p = _ualdbg("check", *engine, "--", str(wrapped[0]), "show", cwd=tmp_path, env=no_debuggers)
        assert p.returncode == 125, p.stderr
        _one_line(p, "not found on PATH")
    p = _ualdbg("stackcheck", "--", str(wrapped[0]), "show", cwd=tmp_path, env=no_debuggers)
    assert p.returncode == 125, p.stderr
    _one_line(p, "gdb not found")


def _killed_at_exec(src: Path, out: Path) -> Path:
    """`src` with its writable PT_LOAD claiming more file bytes than memory: the kernel kills the
    process with SIGSEGV in its exec, past the point of no return (a mutated binary, issue 29's
    fuzzing: gdb called that "During startup program terminated", and ualdbg said status 2)."""
    data = bytearray(src.read_bytes())
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        kind, flags = struct.unpack_from("<II", data, at)
        if kind == 1 and flags & 2:  # PT_LOAD, PF_W
            struct.pack_into("<Q", data, at + 32, struct.unpack_from("<Q", data, at + 32)[0] | (0x0B << 56))
            break
    else:
        raise AssertionError("no writable PT_LOAD")
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


@pytest.mark.parametrize("engine", ["agent", "static-gdb", "trap-gdb"])
def test_a_program_killed_in_its_exec_gets_its_own_status(engine: str, wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    """The program's own end (SIGSEGV: 139), never ualdbg's status 2 or 125, and not run twice:
    at most the one line that says the trap engine runs it, or that nothing could be traced."""
    need(engine)
    prog = _killed_at_exec(program_for(engine, *wrapped), tmp_path / "killed")
    direct = subprocess.run([str(prog), "show"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert direct.returncode == -11
    p = _ualdbg("trace", *ENGINES[engine], "--", str(prog), "show", cwd=tmp_path)
    assert p.returncode in (139, -11), p.stderr
    ours = [line for line in p.stderr.splitlines() if line.startswith("ualdbg:")]
    assert len(ours) <= 1 and "could not run" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "Python Exception" not in p.stderr, p.stderr
