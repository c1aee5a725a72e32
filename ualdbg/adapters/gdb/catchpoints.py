"""ualdbg's breakpoints in gdb: `catch signal` and `catch syscall` catchpoints whose condition is
a Python function (conditions.py decides stop or resume without a round trip through the
prompt), the internal breakpoint at the arm point, and the `hook-detach` that disarms first."""
from __future__ import annotations

import re
from collections.abc import Callable

import gdb  # type: ignore[import-not-found]

from ...engines.lifecycle import arm_function
from ...isa.arch import SIGBUS, SIGTRAP, SYSCALL_NAMES
from .console import warn


def x86_64() -> bool:
    """Whether the loaded program (or, with none, gdb's current architecture) is x86-64."""
    try:
        name = gdb.selected_inferior().architecture().name()
    except (gdb.error, AttributeError):
        return True
    return name.startswith("i386:x86-64")


def target_non_stop() -> bool:
    """Whether gdb drives the process non-stop underneath (set non-stop on, or gdb's own
    all-stop-on-non-stop: `maint show target-non-stop`)."""
    if gdb.parameter("non-stop"):
        return True
    text = gdb.execute("maint show target-non-stop", to_string=True)
    m = re.search(r"is (?:auto \(currently (on|off)\)|(on|off))", text)
    return m is not None and "on" in (m.group(1), m.group(2))


class ArmPoint(gdb.Breakpoint):
    """Internal breakpoint at `main` (or the entry): arms every thread and never stops."""

    def __init__(self, spec: str, on_hit: Callable[[], None]) -> None:
        # A libc symbol is not known before `run` loads libc: let the breakpoint be pending.
        pending = gdb.parameter("breakpoint pending")
        gdb.execute("set breakpoint pending on", to_string=True)
        try:
            super().__init__(spec, internal=True)
        finally:
            gdb.execute(f"set breakpoint pending {'auto' if pending is None else ('on' if pending else 'off')}", to_string=True)
        self.silent = True
        self.on_hit = on_hit

    def stop(self) -> bool:
        try:
            self.on_hit()
        except Exception as exc:  # never let a hook error stop the user's program
            warn(f"arming failed: {exc}")
        return False


def arm_spec(at: str) -> str | None:
    """The arm point's breakpoint with `--at main` (lifecycle.arm_function); None for `--at
    start`, where the new image's first objfile is the arm point."""
    if at != "main":
        return None
    try:
        gdb.execute("info address main", to_string=True)
        has_main = True
    except gdb.error:
        has_main = False
    name, said = arm_function(has_main)
    if said:
        gdb.write(said + "\n")
    return name


class Catchpoints:
    """The catchpoints and the arm point of one gdb, while installed (and after `off`, the ones
    kept until what is pending has been collected)."""

    def __init__(self, on_arm_point: Callable[[], None]) -> None:
        self.on_arm_point = on_arm_point
        self.installed = False
        self.numbers: list[int] = []
        self.arm_point: ArmPoint | None = None
        self.users_cli_notifications = False

    def create(self) -> None:
        """`catch signal SIGBUS`, and on x86-64 SIGTRAP and the task-making and mask-changing
        syscalls, each with its condition (conditions.py's convenience functions)."""
        self.numbers = []
        catches = [("signal SIGBUS", f"$_ualdbg_signal({SIGBUS})")]
        if x86_64():
            # SIGTRAP ends an EFLAGS.TF step-over; the syscall numbers are x86-64's (and qemu's
            # gdb stub, where other architectures run, can catch no syscalls).
            catches += [("signal SIGTRAP", f"$_ualdbg_signal({SIGTRAP})"),
                        ("syscall " + " ".join(str(n) for n in SYSCALL_NAMES), "$_ualdbg_syscall()")]
        for spec, fn in catches:
            gdb.execute(f"catch {spec}", to_string=True)
            num = int(gdb.parse_and_eval("$bpnum"))
            gdb.execute(f"condition {num} {fn}", to_string=True)
            self.numbers.append(num)

    def place_arm_point(self, at: str) -> None:
        spec = arm_spec(at)
        if self.arm_point is not None and self.arm_point.is_valid():
            if self.arm_point.location == spec:
                return
            self.arm_point.delete()
        self.arm_point = None
        if spec is not None:
            self.arm_point = ArmPoint(spec, self.on_arm_point)

    def remove_arm_point(self) -> None:
        if self.arm_point is not None and self.arm_point.is_valid():
            self.arm_point.delete()
        self.arm_point = None

    def missing(self) -> list[int]:
        """Installed catchpoints gdb no longer has: a user's `delete` (without numbers) deletes
        every breakpoint, ualdbg's too."""
        if not self.installed:
            return []
        have = {bp.number for bp in gdb.breakpoints()}
        return [num for num in self.numbers if num not in have]

    def keep_only(self, keep: list[int]) -> None:
        """At `off`: the catchpoints that stay until the stops still due are collected."""
        for num in self.numbers:
            if num not in keep:
                gdb.execute(f"delete {num}", to_string=True)
        self.numbers = keep

    def delete_all(self) -> None:
        for num in self.numbers:
            try:
                gdb.execute(f"delete {num}", to_string=True)
            except gdb.error:
                pass
        self.numbers = []

    def silence(self, silent: bool) -> None:
        """A stop gdb must not show (the step after a delay-slot fault): the catchpoints say
        nothing, nor does the stop's location line (gdb 12+), the user's own setting kept."""
        for bp in gdb.breakpoints():
            if bp.number in self.numbers:
                bp.silent = silent
        try:
            if silent:
                self.users_cli_notifications = gdb.parameter("suppress-cli-notifications")
            gdb.execute(f"set suppress-cli-notifications {'on' if silent or self.users_cli_notifications else 'off'}",
                        to_string=True)
        except (gdb.error, RuntimeError):
            pass


def define_detach_hook() -> None:
    """A detached process runs on with no tracer: any AC left set would kill it at its next
    unaligned access. gdb has no Python detach event, so use `hook-detach`, unless the user has
    a hook-detach of their own."""
    try:
        existing = gdb.execute("show user hook-detach", to_string=True)
    except gdb.error:
        existing = ""
    if existing.strip() and "ualdbg" not in existing:
        return
    gdb.execute("define hook-detach\npython from ualdbg.adapters.gdb.install import before_detach; before_detach()\nend",
                to_string=True)
