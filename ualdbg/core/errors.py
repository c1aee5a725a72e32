"""ualdbg's exit statuses and the one base of the errors it reports to the user: each error is one
line and carries the status it ends ualdbg with, which cli/shell.main catches once."""
from __future__ import annotations

EXIT_CLEAN = 0
EXIT_FOUND = 1  # the default of --error-exitcode
EXIT_ERROR = 2  # usage error or bad input (options, input and output files): one line, nothing run
# Where ualdbg runs a program it follows the wrappers' convention (timeout(1), env(1), nice(1)), so
# that its own failure is never taken for the program's ordinary one (make's 2, say):
EXIT_TOOL = 125  # ualdbg itself failed (a debugger missing or dead, an internal error, no trace made)
EXIT_CANNOT_EXECUTE = 126  # the program was found but cannot be executed (permission, not a program)
EXIT_NOT_FOUND = 127  # the program, its ELF interpreter or a shared library it needs was not found
# The run was incomplete (issue 29): neither 1 (found), 2 (usage), nor the wrappers' 124-127
# (timeout(1), env(1): the tool's own failure, cannot execute, not found) nor 128+N (a signal).
EXIT_INCOMPLETE = 3


class UaldbgError(Exception):
    """What ualdbg refuses or cannot do: the message is one line for the user, `status` the exit
    status it ends the shell command with (a class's default, or given per error)."""

    status: int = EXIT_ERROR

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    def exit_status(self) -> int:
        """The status `main` returns for it (a program's own, for an error that ran one)."""
        return self.status


class ToolError(UaldbgError):
    """A usage or tool problem of a command that runs a program: 2 usage or bad input, 125
    ualdbg failed, 126 cannot execute, 127 not found (ci/gate.py)."""
