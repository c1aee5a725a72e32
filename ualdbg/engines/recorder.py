"""What a debugger session records: its trace buffer (exact per-PC counts and the ring of
records), the CPU each fault ran on, the last fault and its data (what a break report shows),
and what the data at each site's first fault is. It decides nothing: faultpath.py brings it a
fault that counts (rules.py decided), and session.py makes the TraceResult from it."""
from __future__ import annotations

from ..core.model import Fault
from ..core.target import Target
from ..core.trace import TraceBuffer
from ..symbols.data import DataRef, Frame, safe_describe
from ..symbols.maps import ModuleMap
from .procfs import CpuReader
from .registers import LazyRegisters, ThreadStacks


class FaultRecorder:
    """The buffer of one debugger session and what it keeps beside its counts."""

    def __init__(self, buffer: TraceBuffer) -> None:
        self.buffer = buffer
        self.cpu_of = CpuReader()
        self.last_fault: Fault | None = None
        # What the data at a site's first faulting VA is (symbols/data.py), and at the last fault.
        self.data_at: dict[int, DataRef] = {}
        self.last_data: DataRef | None = None
        self.names_sites = True

    def skip_site_data(self) -> None:
        """Name no site's data (a break report's fault is still named): the stackcheck trace
        summary keeps counts and places only, and naming the data at a fault walks the faulting
        thread's frames through libc's DWARF, 15-50 s at the first fault on an argv string."""
        self.names_sites = False

    def add(self, fault: Fault) -> None:
        self.buffer.add(fault)
        self.last_fault = fault
        self.last_data = None

    def wants_data(self, pc: int, breaking: bool) -> bool:
        """Whether the data of a fault at `pc` is to be named: at each site's first fault, and at
        every fault when breaking (its report shows it)."""
        return breaking or (self.names_sites and pc not in self.data_at)

    def name_data(self, target: Target, tid: int, pc: int, va: int, modules: ModuleMap | None) -> None:
        """What the data at `va` is, with the faulting thread's registers and memory."""
        frame = Frame(pc=pc, tid=tid, pid=target.pid(), regs=LazyRegisters(target, tid),
                      read_memory=target.read_memory, thread_sps=ThreadStacks(target))
        data = safe_describe(va, modules, frame)
        self.data_at.setdefault(pc, data)
        self.last_data = data

    def new_process(self) -> None:
        self.cpu_of.close()
