"""The agent's hot-site patcher never changes what a program does (issue 29, item 5): a program
whose .eh_frame, .eh_frame_hdr or symbol table was corrupted (one to three bytes, a fixed seed)
runs natively, under the agent with --no-patch, and patched, with the same output and exit
status every time (a binary that fails natively fails the same way), and patched counts what
--no-patch counts. Before, one wrong byte in .eh_frame made the patcher read unmapped memory or
move code a branch lands in: SIGSEGV under the default `trace` where the program runs fine.

The program runs with the agent preloaded as `ualdbg trace` runs it (its environment), not
through the CLI: 300 mutants (`make test`, seed 29005) take about a minute on a quiet machine;
`make fuzz` tries UALDBG_FUZZ_EXAMPLES of them (10,000) with a random seed (UALDBG_FUZZ_SEED
repeats one)."""
from __future__ import annotations

import os
import platform
import random
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.build import build_program
from support.env import FIXTURES, require_tool, scrubbed_env

from ualdbg.agent import buffer as ab
from ualdbg.engines.agent import AgentRun, agent_environment, agent_library

MUTANTS = int(os.environ.get("UALDBG_FUZZ_EXAMPLES", "300"))
# A fixed seed (make test); make fuzz's UALDBG_FUZZ_RANDOM=1 draws one (a failure names it).
SEED = int(os.environ.get("UALDBG_FUZZ_SEED") or (random.randrange(1 << 32) if os.environ.get("UALDBG_FUZZ_RANDOM")
                                                  else 29005))
SECTIONS = (".eh_frame", ".eh_frame_hdr", ".symtab")
N = "2000"  # iterations of each loop: every site traps, is patched, and runs patched


def _sections(data: bytes) -> dict[str, tuple[int, int]]:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    return {s.name: (s["sh_offset"], s["sh_size"]) for s in elf.iter_sections() if s.name in SECTIONS}


def _mutate(data: bytes, where: dict[str, tuple[int, int]], rng: random.Random) -> tuple[bytes, str]:
    out = bytearray(data)
    what = []
    for _ in range(rng.randint(1, 3)):
        name = rng.choice(sorted(where))
        off, size = where[name]
        pos = off + rng.randrange(size)
        kind = rng.choice(["set", "flip", "word"])
        if kind == "set":
            out[pos] = rng.randrange(256)
        elif kind == "flip":
            out[pos] ^= 1 << rng.randrange(8)
        else:  # a length, an offset or an address made 0, huge, or one off
            pos -= pos % 4
            value = int.from_bytes(out[pos:pos + 4], "little")
            new = rng.choice([0, 0xFFFFFFFF, value + 1, value - 1, value + 16, value ^ 0x80000000]) & 0xFFFFFFFF
            out[pos:pos + 4] = new.to_bytes(4, "little")
        what.append(f"{kind} {name}+{pos - off:#x}")
    return bytes(out), ", ".join(what)


def _run(exe: Path, lib: str, patch_after: int | None) -> tuple[object, bytes, int | None]:
    """(exit status or "timeout", stdout, faults in scope or None natively)."""
    env = scrubbed_env()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        if patch_after is not None:
            env.update(agent_environment(AgentRun([str(exe)], patch_after=patch_after), lib, d, env))
        try:
            r = subprocess.run([str(exe), N], capture_output=True, env=env, timeout=30, stdin=subprocess.DEVNULL)
            status: object = r.returncode
            out = r.stdout
        except subprocess.TimeoutExpired:
            status, out = "timeout", b""
        total = None
        if patch_after is not None:
            total = 0
            for _pid, _gen, path in ab.buffer_files(d):
                with ab.AgentBuffer(path) as b:
                    total += b.progress()[0]
    return status, out, total


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent tests need an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")
    out = tmp_path_factory.mktemp("patchfuzz")
    src = FIXTURES / "agent" / "patchfuzz.c"
    return build_program(out / "patchfuzz", src.name, flags=("-g", "-O2"), cwd=src.parent)


def test_unmutated_program_is_patched_and_counts_exactly(program: Path) -> None:
    """The premise: patched, the program's hot sites stop trapping and count what --no-patch does."""
    lib = agent_library()
    native, plain, patched = _run(program, lib, None), _run(program, lib, 0), _run(program, lib, 2)
    assert native[:2] == plain[:2] == patched[:2], (native, plain, patched)
    assert plain[2] == patched[2] and plain[2] is not None and plain[2] > 10_000, (plain, patched)


def test_mutated_binaries_behave_the_same_patched(program: Path, tmp_path: Path) -> None:
    lib = agent_library()
    data = program.read_bytes()
    where = _sections(data)
    assert set(where) == set(SECTIONS), where
    rng = random.Random(SEED)
    failures = []
    for i in range(MUTANTS):
        mutant, what = _mutate(data, where, rng)
        exe = tmp_path / f"m{i}"
        exe.write_bytes(mutant)
        exe.chmod(0o755)
        native, plain, patched = _run(exe, lib, None), _run(exe, lib, 0), _run(exe, lib, 2)
        if not native[:2] == plain[:2] == patched[:2] or plain[2] != patched[2]:
            failures.append(f"mutant {i} ({what}): native {native[0]}, --no-patch {plain[0]} ({plain[2]} faults), "
                            f"patched {patched[0]} ({patched[2]} faults)")
        else:
            exe.unlink()
    assert not failures, f"{len(failures)} of {MUTANTS} mutants (seed {SEED}) differ:\n" + "\n".join(failures[:20])
