"""What a program file is before anything runs it: an ELF file whose headers hold together, or a
`#!` script and its interpreter. Read with struct, not pyelftools: every `ualdbg trace` asks,
and importing pyelftools costs more than a short program's whole run (issue 34)."""
from __future__ import annotations

import os
import struct

ET_EXEC, ET_DYN = 2, 3
_ET_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
_PN_XNUM = 0xFFFF  # e_phnum's escape: the count is section header 0's sh_info


def elf_file_problem(path: str, shown: str, what: str = "an ELF file", not_elf: str = "not an ELF file") -> str | None:
    """Why `path` is not a readable ELF file, in one line starting with `shown`; None when it is
    one. `what` names the expected kind in the directory message, `not_elf` the non-ELF one."""
    if not os.path.exists(path):
        return f"{shown}: no such file"
    if os.path.isdir(path):
        return f"{shown}: is a directory, not {what}"
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        return f"{shown}: cannot read: {exc.strerror}"
    if magic != b"\x7fELF":
        return f"{shown}: {not_elf}"
    return None


def script_interpreter(path: str) -> str | None:
    """The program the kernel runs for a `#!` script (its first word, `/usr/bin/env NAME` looked
    up on PATH as env would), or None when `path` is not such a script."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    interp = words[0]
    if os.path.basename(interp) == "env" and len(words) > 1:
        import shutil

        name = next((w for w in words[1:] if not w.startswith("-")), None)
        found = shutil.which(name) if name else None
        return os.path.realpath(found) if found else interp
    return os.path.realpath(interp) if os.path.exists(interp) else interp


# (EI_CLASS, EI_DATA, e_machine) of the programs each host runs natively
_HOST_ELF = {"x86_64": (2, 1, 62), "aarch64": (2, 1, 183)}


def host_elf(path: str) -> bool:
    """Whether `path` is an ELF file built for this host's architecture (a native program)."""

    want = _HOST_ELF.get(os.uname().machine)
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    if want is None or len(head) < 20 or head[:4] != b"\x7fELF":
        return False
    return (head[4], head[5], int.from_bytes(head[18:20], "little")) == want


def elf_structure_problem(path: str) -> str | None:
    """Why an ELF file cannot be run (truncated or corrupt headers), before any engine reads it:
    its identification, its type (an executable or a PIE) and every program header must be
    there and make sense; None when they do. The file is known to start with the ELF magic."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            ident = f.read(16)
            if len(ident) < 16:
                return _corrupt("the identification is cut short")
            cls, data = ident[4], ident[5]
            if cls not in (1, 2) or data not in (1, 2):
                return _corrupt(f"class {cls}, data encoding {data}")
            end = "<" if data == 1 else ">"
            # e_type e_machine e_version e_entry e_phoff e_shoff e_flags e_ehsize e_phentsize
            # e_phnum e_shentsize e_shnum e_shstrndx
            hdr = struct.Struct(end + ("HHIQQQIHHHHHH" if cls == 2 else "HHIIIIIHHHHHH"))
            raw = f.read(hdr.size)
            if len(raw) < hdr.size:
                return _corrupt("the ELF header is cut short")
            e_type, _mach, _ver, _entry, phoff, shoff, _flags, _eh, phentsize, phnum, shentsize, _shnum, _str = \
                hdr.unpack(raw)
            if e_type not in (ET_EXEC, ET_DYN):
                return f"not an executable ELF file ({_ET_NAMES.get(e_type, e_type)})"
            phdr_size = 56 if cls == 2 else 32
            if phnum == _PN_XNUM:  # the real count lives in the first section header
                sh_info_at = shoff + (44 if cls == 2 else 28)
                if not shoff or shentsize < (64 if cls == 2 else 40) or sh_info_at + 4 > size:
                    return _corrupt("e_phnum points to a section header that is not there")
                f.seek(sh_info_at)
                (phnum,) = struct.unpack(end + "I", f.read(4))
            if phnum and (phentsize < phdr_size or phoff + phnum * phentsize > size):
                return _corrupt("the program header table lies past the end of the file")
    except OSError as exc:
        return _corrupt(f"OSError: {exc.strerror}")
    return None


def _corrupt(why: str) -> str:
    return f"a truncated or corrupt ELF file ({why})"
