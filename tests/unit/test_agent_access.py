"""The AC rule the agent's patcher counts faults by (ualdbg/agent/src/access.c, issue 34): for each
instruction it counts, the operand's size and the displacement its trampoline computes the address
with (an AVX-512 disp8 scaled by the operand: disp8*N) agree with capstone, on known encodings and
on every such instruction of libc; the others keep trapping for a stated reason."""
from __future__ import annotations

import ctypes
import os
import platform

import pytest
from support.env import require_tool

LOAD, STORE, RMW = 1, 2, 3
SCRATCH, TOGGLE = 1, 2
# ualdbg_agent.h, UALDBG_PATCH_R_*
R_KIND, R_REP, R_TRANSFER, R_SEGMENT, R_STACK, R_BITSTRING, R_MASKED = 1, 15, 16, 19, 20, 21, 22


@pytest.fixture(scope="module")
def agent() -> ctypes.CDLL:
    if platform.machine() != "x86_64":
        if os.environ.get("CI") == "true":
            pytest.fail("the agent needs an x86-64 host")
        pytest.skip("the agent runs on x86-64 hosts only")
    require_tool("cc")
    from ualdbg.agent.build import build

    lib = ctypes.CDLL(str(build()))  # RTLD_LOCAL: its libc wrappers interpose on nothing here
    lib.ualdbg_agent_test_access.argtypes = [ctypes.c_char_p, ctypes.c_size_t] + [ctypes.POINTER(ctypes.c_int)] * 3 \
        + [ctypes.POINTER(ctypes.c_int64)]
    return lib


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
    """Every instruction of libc's .text the patcher would count: capstone gives its memory
    operand the same size (or, for a vector operand the rule checks at 16, a size it holds) and the
    same displacement (AVX-512's disp8 scaled)."""
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
    counted, off = 0, 0
    while off < len(data):
        chunk = data[off: off + 16]
        insn = next(cs.disasm(chunk, base + off, 1), None)
        if insn is None:
            off += 1
            continue
        r, size, _use, _way, disp = access(agent, bytes(chunk))
        if r == 1:
            mems = [o for o in insn.operands if o.type == capstone.x86.X86_OP_MEM]
            where = f"{insn.address:#x}: {insn.bytes.hex()} {insn.mnemonic} {insn.op_str}"
            assert len(mems) == 1, where
            assert mems[0].size == size, f"{where}: capstone {mems[0].size} bytes, the agent {size}"
            assert mems[0].mem.disp == disp, f"{where}: capstone disp {mems[0].mem.disp}, the agent {disp}"
            counted += 1
        off += insn.size
    assert counted > 50_000
