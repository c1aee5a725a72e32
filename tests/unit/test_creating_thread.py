"""presence.creating_thread on this very process (it maps libc): a thread whose PC is in libc's
pthread_create, or in libc with a return address into pthread_create on its stack, is inside it
and must not be armed from outside (issue 32: the new thread inherited AC with every signal
blocked, and the program died of SIGBUS); a PC in the program's own code is never inside it."""
from __future__ import annotations

import ctypes
import os
import struct

from ualdbg.agent.presence import creating_thread, libc_function


def _read(addr: int, n: int) -> bytes:
    return ctypes.string_at(addr, n)


def _stack(values: list[int]) -> tuple[ctypes.Array[ctypes.c_char], int]:
    buf = ctypes.create_string_buffer(struct.pack(f"<{len(values)}Q", *values), 8 * len(values) + 64)
    return buf, ctypes.addressof(buf)


def test_inside_pthread_create_by_pc_or_return_address() -> None:
    pid = os.getpid()
    where = libc_function(pid, "pthread_create")
    assert where is not None
    lo, hi = where
    memset = libc_function(pid, "memset")
    assert memset is not None and not lo <= memset[0] < hi
    buf, sp = _stack([0, 1, lo + 0x40, 2])
    assert creating_thread(pid, lo + 5, sp, _read)  # its PC in pthread_create
    assert creating_thread(pid, memset[0], sp, _read)  # in libc, called from pthread_create
    clean, sp2 = _stack([0, 1, 2, 3])
    # the scan reads to the end of the mapping: a buffer of its own, past any stale value
    assert not creating_thread(pid, memset[0], sp2, lambda a, n: _read(a, min(n, 32)))
    own = ctypes.cast(ctypes.pythonapi.Py_Initialize, ctypes.c_void_p).value
    assert own is not None and not creating_thread(pid, own, sp, _read)  # not libc's code: never
    del buf, clean
