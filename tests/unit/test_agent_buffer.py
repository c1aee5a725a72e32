"""The agent's shared-memory buffer format from both sides: the C writer (the built agent, loaded
with ctypes; inert without UALDBG_AGENT) and the Python reader (ualdbg.agent.buffer) must agree
on every field; the reader rejects what it does not understand and skips torn records. Also the
agent's own pieces that must agree with Python or capstone: its scope rule, its instruction
decoder, and the AC rule its patcher counts faults by (access.c, issue 34)."""
from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.env import require_tool

from ualdbg.agent import buffer as ab
from ualdbg.symbols.maps import is_system_path


@pytest.fixture(scope="module")
def agent() -> ctypes.CDLL:
    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent needs an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")
    from ualdbg.agent.build import build

    lib = ctypes.CDLL(str(build()))  # RTLD_LOCAL: its libc wrappers interpose on nothing here
    lib.ualdbg_agent_test_open.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    lib.ualdbg_agent_test_fault.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ctypes.c_uint64]
    lib.ualdbg_agent_test_close.argtypes = [ctypes.c_int]
    lib.ualdbg_agent_is_system_path.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.ualdbg_agent_test_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t] + [ctypes.POINTER(ctypes.c_int)] * 4
    lib.ualdbg_agent_test_access.argtypes = [ctypes.c_char_p, ctypes.c_size_t] + [ctypes.POINTER(ctypes.c_int)] * 3 \
        + [ctypes.POINTER(ctypes.c_int64)]
    return lib


def regs(*values: int) -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * 16)(*(list(values) + [0] * (16 - len(values))))


def one_buffer(directory: Path) -> ab.AgentBuffer:
    files = ab.buffer_files(str(directory))
    assert len(files) == 1, files
    pid, gen, path = files[0]
    assert pid == os.getpid() and gen == 0
    return ab.AgentBuffer(path)


def test_c_writer_and_python_reader_agree(agent: ctypes.CDLL, tmp_path: Path) -> None:
    assert agent.ualdbg_agent_test_open(str(tmp_path).encode(), 7) == 0
    for i in range(20):  # one PC in scope, 20 faults: the ring of 7 wraps
        agent.ualdbg_agent_test_fault(0x401000, regs(0x1000 + i, 0, 0, 0, 0x7FFF0000, 0, 0x5001, 0x6002), 1, i % 3)
    for _ in range(5):
        agent.ualdbg_agent_test_fault(0x7F0000001234, regs(), 0, 0)
    agent.ualdbg_agent_test_maps()
    agent.ualdbg_agent_test_close(3)
    with one_buffer(tmp_path) as buf:
        h = buf.header()
        assert (h.version, h.record_capacity, h.site_capacity) == (ab.VERSION, 7, 16384)
        assert (h.total, h.ignored, h.head, h.sites_used) == (20, 5, 20, 2)
        assert h.state == ab.EXITED and h.exit_status == 3 and h.note == "closed by the test"
        assert h.pid == os.getpid() and h.exe == "/test/exe" and h.end_ns >= h.start_ns > 0
        assert buf.progress() == (20, 5)
        sites = {s.pc: s for s in buf.sites()}
        assert set(sites) == {0x401000, 0x7F0000001234}
        hot = sites[0x401000]
        assert hot.count == 20 and hot.in_scope and len(hot.variants) == 3  # keys 0, 1, 2
        assert [v.gpr[0] for v in hot.variants] == [0x1000, 0x1001, 0x1002]  # the first of each key
        assert sites[0x7F0000001234].count == 5 and not sites[0x7F0000001234].in_scope
        records = buf.records()
        assert [r.seq for r in records] == list(range(14, 21))  # the last 7, in order
        r = records[-1]
        assert (r.pc, r.pid, r.regs.gpr[0], r.regs.gpr[4], r.regs.gpr[6], r.regs.gpr[7]) == (
            0x401000, os.getpid(), 0x1000 + 19, 0x7FFF0000, 0x5001, 0x6002)
        view = r.regs.mapping()
        assert (view["rax"], view["rsp"], view["rsi"], view["rdi"], view["fs_base"]) == (0x1013, 0x7FFF0000, 0x5001, 0x6002, 0)
        assert "xmm0" not in view and len(view) == 18
        assert all(a.time_ns <= b.time_ns for a, b in zip(records, records[1:]))
        assert _raw_records(buf.record_bytes()) == records  # the raw ring (engines/records.py) holds the same
        snapshots = buf.maps_snapshots()
        assert len(snapshots) == 1 and "[stack]" in snapshots[0][1]


def _raw_records(raw: bytes) -> list[ab.RecordEntry]:
    """The records of AgentBuffer.record_bytes(), read as AgentBuffer.records() reads each one."""
    out = []
    for off in range(0, len(raw), ab.RECORD_SIZE):
        seq, time_ns, pc, pid, tid, cpu, flags, *regs = struct.unpack_from("<QQQIIiI17Q", raw, off)
        out.append(ab.RecordEntry(seq, time_ns, pc, pid, tid, None if cpu < 0 else cpu, flags,
                                  ab.Registers(tuple(regs[:16]), regs[16])))
    assert len(raw) % ab.RECORD_SIZE == 0
    return out


def _header(**fields: int) -> bytearray:
    raw = bytearray(ab.HEADER_SIZE + 16 * ab.SITE_SIZE + 4 * ab.RECORD_SIZE + 4096)
    values = {"version": ab.VERSION, "header_size": ab.HEADER_SIZE, "site_size": ab.SITE_SIZE,
              "record_size": ab.RECORD_SIZE, "site_capacity": 16, "record_capacity": 4, "maps_capacity": 4096,
              "sites_offset": ab.HEADER_SIZE, "records_offset": ab.HEADER_SIZE + 16 * ab.SITE_SIZE,
              "maps_offset": ab.HEADER_SIZE + 16 * ab.SITE_SIZE + 4 * ab.RECORD_SIZE}
    values.update(fields)
    raw[0:8] = ab.MAGIC
    struct.pack_into("<IIIIII", raw, 8, values["version"], values["header_size"], values["site_size"],
                     values["record_size"], values["site_capacity"], values["record_capacity"])
    struct.pack_into("<QQQQ", raw, 32, values["maps_capacity"], values["sites_offset"], values["records_offset"],
                     values["maps_offset"])
    return raw


def test_sites_are_read_without_touching_the_unused_table(agent: ctypes.CDLL, tmp_path: Path) -> None:
    """The site table is 16,384 slots (10 MiB); a process uses a few. Reading every slot through
    the mapping made tmpfs allocate the whole table, for each traced process (issue 34: 16 ms a
    process); the reader reads only the pages the agent wrote, and still finds every site."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):  # where the agent puts its buffers
        if os.environ.get("CI") == "true":
            pytest.fail("no writable /dev/shm (tmpfs)")
        pytest.skip("no writable /dev/shm (tmpfs) here")
    d = shm / f"ualdbg-test-{os.getpid()}"
    d.mkdir()
    try:
        assert agent.ualdbg_agent_test_open(str(d).encode(), 16) == 0
        pcs = [0x401000 + 977 * i for i in range(40)]  # scattered over the hash table
        for pc in pcs:
            agent.ualdbg_agent_test_fault(pc, regs(pc), 1, 0)
        agent.ualdbg_agent_test_close(0)
        with one_buffer(d) as buf:
            before = os.stat(buf.path).st_blocks
            assert sorted(s.pc for s in buf.sites()) == pcs
            assert all(s.count == 1 and s.variants[0].gpr[0] == s.pc for s in buf.sites())
            grown = (os.stat(buf.path).st_blocks - before) * 512
            assert grown == 0, f"reading the sites allocated {grown:,} bytes of the buffer file"
    finally:
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def test_reader_rejects_what_it_does_not_understand(tmp_path: Path) -> None:
    path = tmp_path / "1.0.buf"
    path.write_bytes(b"short")
    with pytest.raises(ab.BufferError, match="too short"):
        ab.AgentBuffer(str(path))
    raw = _header()
    raw[0:8] = b"NOTMAGIC"
    path.write_bytes(raw)
    with pytest.raises(ab.BufferError, match="not an agent buffer"):
        ab.AgentBuffer(str(path))
    path.write_bytes(_header(version=ab.VERSION + 1))
    with pytest.raises(ab.BufferError, match="version"):
        ab.AgentBuffer(str(path))
    with pytest.raises(ab.BufferError, match="cannot read"):
        ab.AgentBuffer(str(tmp_path / "missing.buf"))


def test_reader_skips_torn_records_and_unfinished_sites(tmp_path: Path) -> None:
    raw = _header()
    struct.pack_into("<Q", raw, 136, 6)  # head: 6 records written, capacity 4 -> seq 3..6 expected
    rec0 = ab.HEADER_SIZE + 16 * ab.SITE_SIZE
    for seq in (5, 6, 3, 99):  # slots 0..3 hold seq 5, 6, 3 and a torn write (99 is not 4)
        slot = (seq - 1) % 4 if seq != 99 else 3
        struct.pack_into("<QQQIIiI", raw, rec0 + slot * ab.RECORD_SIZE, seq, 1000 + seq, 0x400000 + seq, 7, 8, -1, 0)
    site0 = ab.HEADER_SIZE
    struct.pack_into("<QQII", raw, site0, 0x401000, 9, ab.SITE_READY, ab.SITE_IN_SCOPE)
    struct.pack_into("<QQII", raw, site0 + ab.SITE_SIZE, 0x402000, 1, 1, 0)  # still being built
    maps0 = rec0 + 4 * ab.RECORD_SIZE
    text = b"#snapshot 5\n400000-401000 r-xp 00000000 00:00 1 /bin/x\n#snapshot 9\n"
    raw[maps0 : maps0 + len(text)] = text
    struct.pack_into("<Q", raw, 168, len(text))
    path = tmp_path / "1.0.buf"
    path.write_bytes(raw)
    with ab.AgentBuffer(str(path)) as buf:
        assert [r.seq for r in buf.records()] == [3, 5, 6]
        assert _raw_records(buf.record_bytes()) == buf.records()  # the torn one left out there too
        kept = buf.record_bytes()
        path.unlink()  # read with pread while the file is there, from the mapping once it is gone
        assert buf.record_bytes() == kept and len(kept) == 3 * ab.RECORD_SIZE
        assert buf.records()[0].cpu is None and buf.records()[0].pid == 7
        assert [(s.pc, s.count) for s in buf.sites()] == [(0x401000, 9)]
        assert buf.maps_snapshots() == [(5, "400000-401000 r-xp 00000000 00:00 1 /bin/x\n"), (9, "")]


def test_buffer_files_are_found_by_pid_and_image(tmp_path: Path) -> None:
    for name in ("12.1.buf", "12.0.buf", "3.0.buf", "notes.txt", "x.0.buf"):
        (tmp_path / name).write_bytes(b"")
    assert [(p, g) for p, g, _ in ab.buffer_files(str(tmp_path))] == [(3, 0), (12, 0), (12, 1)]
    assert ab.buffer_files(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("path", [
    "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2",
    "/usr/libexec/foo/bar.so", "/opt/app/lib/ld-linux-x86-64.so.2", "/home/me/ld.so.1", "/home/me/ld-musl-x86_64.so.1",
    "/home/me/ld-linuxfoo.so", "/home/me/ld-linux.so.x", "/home/me/libfoo.so", "/usr/local/lib/libfoo.so",
    "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6 (deleted)", "/tmp/prog (deleted)", "[vdso]", "[vsyscall]",
    "/usr/bin/python3.11", "/usr/library/x.so", "/libx32/y.so", "/home/me/ld64.so.2",
])
def test_scope_rule_matches_python(agent: ctypes.CDLL, path: str) -> None:
    raw = path.encode()
    assert bool(agent.ualdbg_agent_is_system_path(raw, len(raw))) == is_system_path(path)


# (bytes, length, rip-relative, displacement offset, flow: 0 next, 1 call rel, 2 call r/m,
#  3 jmp r/m, 4 ret, 5 other)
DECODES = [
    ("488304d701", 5, 0, -1, 0),  # add qword [rdi+rdx*8], 1
    ("f348a5", 3, 0, -1, 0),  # rep movsq
    ("488b0511223344", 7, 1, 3, 0),  # mov rax, [rip+0x44332211]
    ("c5fa6f0d00100000", 8, 1, 4, 0),  # vmovdqu xmm1, [rip+0x1000]
    ("62f1fe486f0500100000", 10, 1, 6, 0),  # vmovdqu64 zmm0, [rip+0x1000]
    ("e800000000", 5, 0, -1, 1),  # call rel32
    ("ff15f0ffffff", 6, 1, 2, 2),  # call [rip-0x10]
    ("ff10", 2, 0, -1, 2),  # call [rax]
    ("ff24c5f0000000", 7, 0, 3, 3),  # jmp [rax*8+0xf0]
    ("c3", 1, 0, -1, 4), ("c20800", 3, 0, -1, 4), ("f3c3", 2, 0, -1, 4),  # ret, ret 8, rep ret
    ("7405", 2, 0, -1, 5), ("0f8400010000", 6, 0, -1, 5), ("cb", 1, 0, -1, 5),  # je, je rel32, retf
    ("48b88877665544332211", 10, 0, -1, 0),  # movabs rax, imm64
    ("66f7c23412", 5, 0, -1, 0),  # test dx, 0x1234
    ("4747c9", 3, 0, -1, 0),  # leave with two REX prefixes
    ("f30f1efa", 4, 0, -1, 0),  # endbr64
    ("64488b042528000000", 9, 0, 5, 0),  # mov rax, fs:[0x28]
]


@pytest.mark.parametrize("hexbytes,length,rip,disp_off,flow", DECODES, ids=[d[0] for d in DECODES])
def test_agent_decoder_on_known_instructions(agent: ctypes.CDLL, hexbytes: str, length: int, rip: int,
                                             disp_off: int, flow: int) -> None:
    code = bytes.fromhex(hexbytes)
    out = [ctypes.c_int() for _ in range(4)]
    assert agent.ualdbg_agent_test_decode(code, len(code), *(ctypes.byref(o) for o in out)) == 0
    assert [o.value for o in out] == [length, rip, disp_off, flow]
    assert agent.ualdbg_agent_test_decode(code[:-1], len(code) - 1, *(ctypes.byref(o) for o in out)) == -1


def libc_instructions() -> Iterator[tuple[bytes, Any]]:
    """Every instruction capstone finds in a linear sweep of libc's .text: 16 bytes from it, and
    capstone's instruction (with its operands)."""
    import capstone
    from elftools.elf.elffile import ELFFile

    path = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6") if os.path.exists(p)), None)
    if path is None:
        pytest.skip("no x86-64 glibc to sweep")
    with open(path, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        data, base = text.data(), text["sh_addr"]
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    cs.detail = True
    off = 0
    while off < len(data):
        chunk = data[off : off + 16]
        insn = next(cs.disasm(chunk, base + off, 1), None)
        if insn is None:
            off += 1
            continue
        yield chunk, insn
        off += insn.size


def test_agent_decoder_agrees_with_capstone_on_libc(agent: ctypes.CDLL) -> None:
    """Length, RIP-relative operand and displacement offset of every instruction capstone finds
    in a linear sweep of libc's .text (the agent relocates exactly these bytes)."""
    import capstone

    out = [ctypes.c_int() for _ in range(4)]
    refs = [ctypes.byref(o) for o in out]
    checked = 0
    for chunk, insn in libc_instructions():
        rip = any(o.type == capstone.x86.X86_OP_MEM and o.mem.base == capstone.x86.X86_REG_RIP for o in insn.operands)
        r = agent.ualdbg_agent_test_decode(chunk, len(chunk), *refs)
        assert (r, out[0].value, out[1].value) == (0, insn.size, int(rip)), f"{insn.address:#x}: {insn.bytes.hex()} {insn.mnemonic} {insn.op_str}"
        if rip:
            assert out[2].value == insn.disp_offset, f"{insn.address:#x}: {insn.mnemonic} {insn.op_str}"
        checked += 1
    assert checked > 100_000


def test_build_is_cached_by_source_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("cc")
    from ualdbg.agent.build import BuildError, build

    monkeypatch.delenv("CC", raising=False)
    first = build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert build(tmp_path) == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in first.parent.iterdir()] == ["ualdbg_agent.so"]  # no temporary left behind
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(BuildError, match="no C compiler"):
        build(tmp_path / "other")


def test_build_check_reads_no_source_while_none_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `ualdbg trace` asks for the agent: once built, the answer comes from the sources'
    stat (a stamp), not from reading and hashing them again (issue 34); a changed source is
    still seen, and built anew."""
    require_tool("cc")
    from ualdbg.agent import build as b

    monkeypatch.delenv("CC", raising=False)
    src = tmp_path / "lib.c"
    src.write_text("int answer(void) { return 42; }\n")
    first = b.cached_build("the test library", "t", "t.so", [src], (), ("-shared", "-fPIC"), (), tmp_path / "cache")
    hashed: list[int] = []
    real_hash = b._hash
    monkeypatch.setattr(b, "_hash", lambda *a: hashed.append(1) or real_hash(*a))
    assert b.cached_build("the test library", "t", "t.so", [src], (), ("-shared", "-fPIC"), (), tmp_path / "cache") == first
    assert hashed == []  # the stamp answered
    src.write_text("int answer(void) { return 43; }\n")
    second = b.cached_build("the test library", "t", "t.so", [src], (), ("-shared", "-fPIC"), (), tmp_path / "cache")
    assert hashed == [1] and second != first and second.exists()


def test_agent_environment_has_one_size_whatever_the_options() -> None:
    """The program's initial stack holds its environment: were UALDBG_AGENT longer with
    `--patch-after 10` than with `--no-patch`, or with ualdbg's PID 100000 than with 99999, the
    program's stack and everything it copies from it would move, and two traces would count
    different faults (python3 does). So its size depends only on the directory, the modules and
    LD_PRELOAD."""
    from unittest import mock

    from ualdbg.engines.agent import ENV_CONFIG, AgentRun, agent_environment

    sizes = set()
    for pid in (7, 99_999, 4_194_304):
        for run in (AgentRun(["p"]), AgentRun(["p"], patch_after=0), AgentRun(["p"], patch_after=1000),
                    AgentRun(["p"], buffer=5), AgentRun(["p"], buffer=10_000_000), AgentRun(["p"], at="start"),
                    AgentRun(["p"], follow=False, all_modules=True, skip_out_of_scope=False)):
            with mock.patch("os.getpid", return_value=pid):
                env = agent_environment(run, "/lib/agent.so", "/dev/shm/ualdbg-agent-abcdefgh", {})
            sizes.add(len(env[ENV_CONFIG]))
    assert len(sizes) == 1, sizes


# -- the AC rule of the patcher (access.c): what it counts, with which size and displacement ---------

LOAD, STORE, RMW = 1, 2, 3
SCRATCH, TOGGLE, STRING = 1, 2, 3
# ualdbg_agent.h, UALDBG_PATCH_R_*
R_KIND, R_REP, R_TRANSFER, R_SEGMENT, R_STACK, R_BITSTRING, R_MASKED = 1, 15, 16, 19, 20, 21, 22


def access(agent: ctypes.CDLL, code: bytes) -> tuple[int, int, int, int, int]:
    """(counted, size, use or refusal reason, way, displacement)."""
    size, kind, method, disp = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int64()
    r = agent.ualdbg_agent_test_access(code, len(code), ctypes.byref(size), ctypes.byref(kind), ctypes.byref(method),
                                       ctypes.byref(disp))
    return r, size.value, kind.value, method.value, disp.value


KNOWN = [
    # hex, counted, size, use or reason, way, displacement
    ("694f0177caeb85", 1, 4, LOAD, SCRATCH, 1),          # imul $0x85ebca77,0x1(%rdi),%ecx: XXH32's round
    ("6b470403", 1, 4, LOAD, SCRATCH, 4),                # imul $3,0x4(%rdi),%eax
    ("f3440f6fa180feffff", 1, 16, LOAD, SCRATCH, -0x180),  # movdqu -0x180(%rcx),%xmm12
    ("0f1107", 1, 16, STORE, SCRATCH, 0),                # movups %xmm0,(%rdi)
    ("480fb74e02", 1, 2, LOAD, SCRATCH, 2),              # movzwl 0x2(%rsi),%ecx
    ("f0480107", 1, 8, RMW, TOGGLE, 0),                  # lock add %rax,(%rdi): atomic
    ("48870f", 1, 8, RMW, TOGGLE, 0),                    # xchg %rcx,(%rdi): atomic
    ("f00fc70f", 1, 8, RMW, TOGGLE, 0),                  # lock cmpxchg8b (%rdi)
    ("d94708", 1, 4, LOAD, SCRATCH, 8),                  # flds 0x8(%rdi)
    ("dd5f10", 1, 8, STORE, SCRATCH, 16),                # fstpl 0x10(%rdi)
    ("0f38f00f", 1, 4, LOAD, SCRATCH, 0),                # movbe (%rdi),%ecx
    ("f2480f38f10f", 1, 8, LOAD, SCRATCH, 0),            # crc32q (%rdi),%rcx
    ("0fba6f0403", 1, 4, RMW, SCRATCH, 4),               # btsl $3,0x4(%rdi)
    ("0fa54f02", 1, 4, RMW, SCRATCH, 2),                 # shld %cl,%ecx,0x2(%rdi)
    ("488b2424", 1, 8, LOAD, TOGGLE, 0),                 # mov (%rsp),%rsp: the scratch path moves rsp
    ("c5fa6f4f01", 1, 16, LOAD, SCRATCH, 1),             # vmovdqu 0x1(%rdi),%xmm1
    ("c4e2f8f20f", 1, 8, LOAD, SCRATCH, 0),              # andn (%rdi),%rax,%rcx
    ("62e1fe286f4f02", 1, 32, LOAD, TOGGLE, 0x40),       # vmovdqu64 0x40(%rdi),%ymm17: disp8 2 * 32
    ("62e1fe486f4f02", 1, 64, LOAD, TOGGLE, 0x80),       # vmovdqu64 0x80(%rdi),%zmm17: disp8 2 * 64
    ("62f17e0810470f", 1, 4, LOAD, TOGGLE, 0x3c),        # vmovss 0x3c(%rdi),%xmm0: disp8 15 * 4
    ("62f37d203f0700", 1, 32, LOAD, TOGGLE, 0),          # vpcmpeqb (%rdi),%ymm16,%k0: __strlen_evex
    ("62f37d203f4417ff00", 1, 32, LOAD, TOGGLE, -0x20),  # vpcmpeqb -0x20(%rdi,%rdx,1),%ymm16,%k0: -1 * 32
    ("62f37d301f470100", 1, 4, LOAD, TOGGLE, 4),         # vpcmpeqd 0x4(%rdi){1to8},%ymm16,%k0: broadcast, 1 * 4
    ("62f1fe29 7f0f".replace(" ", ""), 0, 0, R_MASKED, 0, 0),  # vmovdqu64 %ymm1,(%rdi){%k1}
    ("f3a4", 0, 0, R_REP, 0, 0),                         # rep movsb
    ("f348a5", 1, 8, RMW, STRING, 0),                    # rep movsq: its elements counted (issue 34)
    ("f3ab", 1, 4, STORE, STRING, 0),                    # rep stos %eax,(%rdi)
    ("48ad", 1, 8, LOAD, STRING, 0),                     # lodsq
    ("66a5", 1, 2, RMW, STRING, 0),                      # movsw
    ("f348a7", 0, 0, R_REP, 0, 0),                       # repe cmpsq: stops at a compare
    ("f3ae", 0, 0, R_REP, 0, 0),                         # repe scasb
    ("64f348a5", 0, 0, R_SEGMENT, 0, 0),                 # rep movsq %fs:(%rsi),(%rdi)
    ("ff37", 0, 0, R_STACK, 0, 0),                       # push (%rdi)
    ("ff17", 0, 0, R_TRANSFER, 0, 0),                    # call *(%rdi)
    ("0fa30f", 0, 0, R_BITSTRING, 0, 0),                 # bt %ecx,(%rdi)
    ("64488b07", 0, 0, R_SEGMENT, 0, 0),                 # mov %fs:(%rdi),%rax
    ("8a07", 0, 0, R_KIND, 0, 0),                        # mov (%rdi),%al: a byte never faults
    ("0f2807", 0, 0, R_KIND, 0, 0),                      # movaps (%rdi),%xmm0: #GP, not #AC
]


@pytest.mark.parametrize("hexbytes,counted,size,use,way,disp", KNOWN, ids=[k[0] for k in KNOWN])
def test_access_of_known_instructions(agent: ctypes.CDLL, hexbytes: str, counted: int, size: int, use: int,
                                      way: int, disp: int) -> None:
    r, got_size, got_use, got_way, got_disp = access(agent, bytes.fromhex(hexbytes))
    if counted:
        assert (r, got_size, got_use, got_way, got_disp) == (1, size, use, way, disp)
    else:
        assert (r, got_use) == (0, use)


def test_access_agrees_with_capstone_on_libc(agent: ctypes.CDLL) -> None:
    """Every instruction of libc's .text the patcher would count has one memory operand, of the
    size and displacement capstone gives it (AVX-512's disp8 scaled)."""
    import capstone

    counted = 0
    for chunk, insn in libc_instructions():
        r, size, _use, _way, disp = access(agent, bytes(chunk))  # noqa: F841 (_way read below)
        if r == 1:
            mems = [o for o in insn.operands if o.type == capstone.x86.X86_OP_MEM]
            where = f"{insn.address:#x}: {insn.bytes.hex()} {insn.mnemonic} {insn.op_str}"
            if _way == STRING:  # movs: two operands, both of the element's size
                assert mems and all(m.size == size and m.mem.disp == 0 for m in mems), where
                counted += 1
                continue
            assert len(mems) == 1, where
            assert mems[0].size == size, f"{where}: capstone {mems[0].size} bytes, the agent {size}"
            assert mems[0].mem.disp == disp, f"{where}: capstone disp {mems[0].mem.disp}, the agent {disp}"
            counted += 1
    assert counted > 50_000


def test_string_counts_are_those_of_one_trap_per_element(agent: ctypes.CDLL) -> None:
    """A counted string instruction's elements (patch.c, string_count): as many faults as elements
    where an operand is misaligned, and of them the ones count_class would class as spanning two
    lines and two pages, element by element, upwards and downwards (DF), one operand or both."""
    import random

    agent.ualdbg_agent_test_string_count.argtypes = [ctypes.c_uint64] * 5 + [ctypes.POINTER(ctypes.c_uint64)]
    rnd = random.Random(34)

    def spans(a: int, size: int, g: int) -> bool:
        return a // g != (a + size - 1) // g

    for _ in range(3000):
        size = rnd.choice((2, 4, 8))
        use = rnd.choice((0x100, 0x200, 0x300))
        src, dst = rnd.randrange(1 << 20, 1 << 21), rnd.randrange(1 << 20, 1 << 21)
        n, down = rnd.randrange(0, 3000), rnd.random() < 0.3
        out = (ctypes.c_uint64 * 9)()
        agent.ualdbg_agent_test_string_count(src, dst, n, 0x400 if down else 0, size | use, out)
        step = -size if down else size
        faults = lines = pages = 0
        for k in range(n):
            ops = ([src + k * step] if use & 0x100 else []) + ([dst + k * step] if use & 0x200 else [])
            if not any(a % size for a in ops):
                continue
            faults += 1
            lines += any(spans(a, size, 64) for a in ops)
            pages += any(spans(a, size, 4096) for a in ops)
        # (an element is misaligned exactly when its operands' first one is: they move by the size)
        expect = n if any((a % size) for a in ([src] if use & 0x100 else []) + ([dst] if use & 0x200 else [])) else 0
        assert faults == expect
        assert (out[0], out[7], out[8]) == (n, lines, pages), (size, hex(use), src, dst, n, down)
