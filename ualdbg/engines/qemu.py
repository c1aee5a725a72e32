"""Programs of other architectures under qemu-user: starting `qemu-ARCH -g` on a private
endpoint for the CLI, and the module map of such a program under qemu 7.2 (its /proc/PID/maps
is qemu's own, so the map is made from the ELF's loadable segments and the load bias the
debugger knows; qemu 9+'s stub serves the guest's mappings to gdb's `info proc mappings`)."""
from __future__ import annotations

import os
import subprocess
import time
from typing import IO, Any

from elftools.elf.elffile import ELFFile

from ..core.errors import EXIT_TOOL, UaldbgError
from ..core.external import find_tool
from ..isa.arch import ArchInfo
from ..lazyclass import dataclass


class QemuError(UaldbgError):
    """qemu-user did not start: one line for the user; ualdbg's own failure (125)."""

    status = EXIT_TOOL


def maps_from_elf(path: str, bias: int = 0) -> str:
    """/proc/PID/maps-style text for one ELF loaded at `bias` (0 for a non-PIE executable)."""
    lines = []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD" or not seg["p_memsz"]:
                continue
            flags = seg["p_flags"]
            perms = ("r" if flags & 4 else "-") + ("w" if flags & 2 else "-") + ("x" if flags & 1 else "-") + "p"
            start = seg["p_vaddr"] + bias
            lines.append(f"{start:x}-{start + seg['p_memsz']:x} {perms} {seg['p_offset']:08x} 00:00 1 {path}")
    return "\n".join(lines) + "\n"


def elf_entry(path: str) -> tuple[int, bool]:
    """(e_entry, is_pie) of an ELF file."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        return int(elf.header["e_entry"]), elf.header["e_type"] == "ET_DYN"


@dataclass
class QemuRun:
    """One program under `qemu-ARCH -g SOCKET`, stopped at its first instruction until a debugger
    connects. qemu 7.2 binds a TCP port on every interface (0.0.0.0), which would offer the
    program to the network; a Unix socket in a private folder is one endpoint per run that only
    this user can reach, and needs no free-port race."""

    proc: subprocess.Popen[bytes]
    endpoint: str

    def wait(self, timeout: float | None = None) -> tuple[int | None, int | None]:
        """(exit status, signal) of the program: qemu exits with the program's status and
        kills itself with the program's fatal signal."""
        code = self.proc.wait(timeout)
        return (None, -code) if code < 0 else (code, None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # qemu ignores SIGTERM while it waits for its debugger
            self.proc.wait()


def start(arch: ArchInfo, program: list[str], folder: str, timeout: float = 10.0, stdout: IO[Any] | None = None,
          *, argv0: str | None = None, env: dict[str, str] | None = None, preexec_fn: Any = None) -> QemuRun:
    """Start qemu-user on `program` in `folder` (private), its stdio the user's (or `stdout`
    for both output streams, for tests); `argv0` the program's argv[0] (qemu's -0), `env` its
    environment (qemu passes its own on), `preexec_fn` for qemu's process (engines/wrapper.py)."""
    qemu = find_tool("qemu-user", [arch.qemu or f"qemu-{arch.name}"])
    endpoint = os.path.join(folder, "gdb.sock")
    argv = [qemu, "-g", endpoint, *(["-0", argv0] if argv0 is not None else [])]
    if arch.qemu_cpu and not os.environ.get("QEMU_CPU"):
        argv += ["-cpu", arch.qemu_cpu]
    if arch.sysroot and os.path.isdir(arch.sysroot):
        argv += ["-L", arch.sysroot]  # the dynamic loader and libraries of a dynamic program
    proc = subprocess.Popen(argv + program, stdin=None, stdout=stdout, stderr=stdout, env=env, preexec_fn=preexec_fn)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise QemuError(f"{os.path.basename(qemu)} exited with status {proc.returncode} before a debugger could connect")
        if os.path.exists(endpoint) and _listening(endpoint):
            return QemuRun(proc, endpoint)
        time.sleep(0.02)
    QemuRun(proc, endpoint).stop()
    raise QemuError(f"{os.path.basename(qemu)} did not open its gdb endpoint within {timeout:.0f} s")


def _listening(path: str) -> bool:
    """qemu creates the socket file before it listens; and it serves exactly one connection,
    so probing by connecting would use it up: ask /proc/net/unix for a listening socket."""
    try:
        with open("/proc/net/unix") as f:
            for line in f:
                fields = line.split()
                # Flags 00010000 = __SO_ACCEPTCON: listening.
                if len(fields) >= 8 and fields[-1] == path and fields[3] == "00010000":
                    return True
    except OSError:
        return True
    return False


__all__ = ["QemuError", "QemuRun", "elf_entry", "maps_from_elf", "start"]
