"""ualdbg's interactive path in lldb, driven as a user would: after `ualdbg break`, `run` and then
`continue` at every stop (each prints lldb's stop lines and ualdbg's fault report) until the
program exits. Run as `-o "command script import lldb/ualdbg.py" -o "ualdbg break"
-o "command script import bench/break_lldb.py" -o "break_loop MAX_STOPS"`; prints `break stops=N`."""
import sys

import lldb  # type: ignore[import-not-found]  # noqa: TID251  (runs inside lldb)


def break_loop(debugger, command, exe_ctx, result, internal_dict):
    limit = int(command.strip() or "1000000")
    debugger.SetAsync(False)
    interp = debugger.GetCommandInterpreter()
    debugger.HandleCommand("run")
    stops = 0
    while stops < limit:
        process = debugger.GetSelectedTarget().GetProcess()
        if not process.IsValid() or process.GetState() != lldb.eStateStopped:
            break
        stops += 1
        # A nested debugger.HandleCommand runs in this command's context, which has no process
        # ("Command requires a current process"): give `continue` the stopped thread's context.
        out = lldb.SBCommandReturnObject()
        interp.HandleCommand("continue", lldb.SBExecutionContext(process.GetSelectedThread()), out)
        sys.stdout.write(out.GetOutput() + out.GetError())
        if not out.Succeeded():
            break
    result.AppendMessage(f"break stops={stops}")


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand(f"command script add -o -f {__name__}.break_loop break_loop")
