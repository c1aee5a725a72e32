"""A gdb unwinder for threads stopped inside the agent's patch trampolines (a Ctrl-C while the
program runs patched code): the frame under the trampoline is the program's, at the instruction
the trampoline stands for, with the program's stack pointer there (engines/agentlink.py's
program_frame, agent/trampoline.py). Without it gdb showed `?? ()` and a backtrace of garbage
(issue 32). Frame 0 stays the trampoline's own code (`bt` names it after the instruction it
stands for: a frame filter); `bt` goes on from the program's frames."""
from __future__ import annotations

from typing import Any

from gdb.FrameDecorator import FrameDecorator  # type: ignore[import-not-found]
from gdb.unwinder import Unwinder, register_unwinder  # type: ignore[import-not-found]

import gdb  # type: ignore[import-not-found]

from ...engines.session import Session
from .target import GdbTarget

CALLEE_SAVED = ("rbp", "rbx", "r12", "r13", "r14", "r15")


class FrameId:
    def __init__(self, sp: Any, pc: Any) -> None:
        self.sp, self.pc = sp, pc


class TrampolineUnwinder(Unwinder):  # type: ignore[misc]
    def __init__(self, session: Session, target: GdbTarget) -> None:
        super().__init__("ualdbg-trampolines")
        self.session, self.target = session, target

    def __call__(self, pending_frame: Any) -> Any:
        agent = self.session.agent
        if not agent.armings:
            return None  # (every frame of every stop comes here first: nothing to do, at once)
        try:
            rip, rsp = pending_frame.read_register("rip"), pending_frame.read_register("rsp")
            found = agent.program_frame(self.target, int(rip), int(rsp))
            if found is None:
                return None
            origin, sp = found
            # gdb 13 takes gdb.Values of the registers' own types, not ints.
            info = pending_frame.create_unwind_info(FrameId(rsp, rip))
            info.add_saved_register("rip", gdb.Value(origin).cast(rip.type))
            info.add_saved_register("rsp", gdb.Value(sp).cast(rsp.type))
            for name in CALLEE_SAVED:
                info.add_saved_register(name, pending_frame.read_register(name))
            return info
        except (gdb.error, RuntimeError, ValueError, OSError):
            return None


class _Named(FrameDecorator):  # type: ignore[misc]
    def __init__(self, frame: Any, name: str) -> None:
        super().__init__(frame)
        self._name = name

    def function(self) -> str:
        return self._name


class TrampolineNames:
    """A frame filter: `bt` shows a trampoline's frame as `<ualdbg patch of FUNC+OFF>`."""

    def __init__(self, session: Session, target: GdbTarget) -> None:
        self.name, self.priority, self.enabled = "ualdbg-trampolines", 100, True
        self.session, self.target = session, target

    def filter(self, frames: Any) -> Any:
        return (self._named(f) for f in frames)

    def _named(self, decorated: Any) -> Any:
        if not self.session.agent.armings:
            return decorated
        try:
            frame = decorated.inferior_frame()
            found = self.session.agent.program_frame(self.target, int(frame.pc()), int(frame.read_register("rsp")))
            if found is None:
                return decorated
            where = gdb.execute(f"info symbol {found[0]:#x}", to_string=True).split(" in section")[0].replace(" + ", "+")
            return _Named(decorated, f"<ualdbg patch of {where.strip()}>")
        except (gdb.error, RuntimeError, ValueError, OSError):
            return decorated


def install_unwinder(session: Session, target: GdbTarget) -> None:
    try:
        register_unwinder(None, TrampolineUnwinder(session, target), replace=True)
        gdb.frame_filters["ualdbg-trampolines"] = TrampolineNames(session, target)
    except (gdb.error, RuntimeError, AttributeError):
        pass  # a gdb without Python unwinders: the frames are gdb's own
