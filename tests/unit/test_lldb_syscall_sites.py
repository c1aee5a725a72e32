"""Which rt_sigprocmask sites the lldb adapter takes for glibc's own SIG_BLOCK (the first argument
zeroed in the code before the `syscall`): the code is glibc 2.36's (Debian 12, x86-64)."""
from __future__ import annotations

from ualdbg.isa.syscall_sites import find_sites

SIGPROCMASK = 14
WANTED = frozenset({SIGPROCMASK})
BASE = 0x1000


def _site(hex_code: str):
    code = bytes.fromhex(hex_code.replace(" ", ""))
    sites = find_sites(code, BASE, WANTED)
    assert len(sites) == 1 and sites[0].nr == SIGPROCMASK and sites[0].addr == BASE + len(code) - 2
    return sites[0]


def test_pthread_create_block_all_is_glibcs_own_block() -> None:
    # mov r10d, 8; xor edi, edi; movb [rsp+0x67], 0; mov rdx, r14; mov eax, 14; lea rsi, [rip+...]; syscall
    assert _site("41ba08000000 31ff c644246700 4c89f2 b80e000000 488d35dd781100 0f05").zero_arg


def test_thread_exit_block_with_movabs_is_glibcs_own_block() -> None:
    # ...; xor edi, edi; movabs rax, 0xfffffffeffffffff; mov [rbx+0x8f0], rax; lea rsi, [rbx+0x8f0]; ...
    assert _site("41ba08000000 31d2 31ff 48b8fffffffffeffffff 488983f0080000 488db3f0080000 b80e000000 0f05").zero_arg


def test_posix_spawn_block_set_up_far_before_the_syscall() -> None:
    assert _site("41ba08000000 31ff 4c89b424c0000000 4c8db42490000000 4c89a424b0000000 488d35a3a50a00 "
                 "48898424c8000000 8b842480020000 4c89f2 4c89bc24b8000000 898424d0000000 b80e000000 0f05").zero_arg


def test_restore_is_not_a_block() -> None:
    # mov rsi, r14; mov r8d, eax; mov edi, 2; mov eax, 14; syscall
    assert not _site("4c89f6 4189c0 bf02000000 b80e000000 0f05").zero_arg


def test_pthread_sigmask_wrapper_takes_how_from_its_caller() -> None:
    # mov rax, [rsi]; test rax, rcx; jne ...; mov rax, rsi; mov rsi, rax; mov r10d, 8; mov eax, 14; syscall
    assert not _site("488b06 4885c8 753f 4889f0 4889c6 41ba08000000 b80e000000 0f05").zero_arg


def test_zero_overwritten_before_the_syscall_is_not_a_block() -> None:
    assert not _site("31ff bf01000000 b80e000000 0f05").zero_arg


def test_site_inside_another_instruction_is_left_out() -> None:
    # movabs rcx, 0x00050f0000000eb8 (tests/fixtures/programs/syscall_bytes.cpp): from its third
    # byte it reads `mov eax, 14; syscall`; decoded from the function's start it is one movabs.
    code = bytes.fromhex("48b9b80e0000000f0500 c3".replace(" ", ""))
    assert [s.addr for s in find_sites(code, BASE, WANTED)] == [BASE + 7]  # the byte pattern alone
    assert find_sites(code, BASE, WANTED, function_start=lambda addr: BASE) == []
    # A real site decoded from its function's start stays.
    real = bytes.fromhex("31ff b80e000000 0f05 c3".replace(" ", ""))
    assert [s.addr for s in find_sites(real, BASE, WANTED, function_start=lambda addr: BASE)] == [BASE + 7]
