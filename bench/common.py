"""What the bench scripts share: a timed run of a command, a `name value` field of its output,
and the rewrite of one generated section of docs/PERFORMANCE.md between its markers."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"


def timed(who: str, argv: Sequence[str], env: dict[str, str] | None = None, stdin: str | None = None,
          timeout: float = 600) -> tuple[float, str]:
    """Wall seconds and stdout of a command that must succeed (else the bench stops, saying so)."""
    t0 = time.perf_counter()
    p = subprocess.run(list(argv), env=env, input=stdin, capture_output=True, text=True, timeout=timeout)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{who}: {' '.join(argv)} exited {p.returncode}: {p.stderr[-500:]}")
    return secs, p.stdout


def field(who: str, out: str, name: str) -> float:
    """The number on the line `NAME VALUE` of a bench program's output."""
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    raise SystemExit(f"{who}: no `{name}` in {out!r}")


def publish(begin: str, end: str, section: str, write: bool) -> int:
    """Print a bench's section, and put it in docs/PERFORMANCE.md unless asked not to (--no-doc)."""
    if write:
        write_section(begin, end, section)
    print(section)
    return 0


def write_section(begin: str, end: str, section: str, doc: Path = DOC) -> None:
    """Put `section` (which starts with `begin` and ends with `end`) in place of the text between
    those markers in `doc` (docs/PERFORMANCE.md), or at its end the first time."""
    text = doc.read_text() if doc.exists() else "# Performance\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _old, tail = rest.split(end, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


def build_c(src: Path, exe: Path, flags: Sequence[str] = ("-O2",)) -> Path:
    """`gcc FLAGS -o EXE SRC` unless EXE is newer than SRC."""
    exe.parent.mkdir(parents=True, exist_ok=True)
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", *flags, "-o", str(exe), str(src)], check=True)
    return exe
