"""The naive lldb Python loop, the lldb twin of naive_gdb.py: set AC at `main`, then Continue();
at each SIGBUS stop read the PC, clear AC, StepInstruction, set AC again. Run as
`lldb-19 --batch --no-lldbinit -o "command script import bench/naive_lldb.py" -o naive_loop -- PROG ARGS`;
prints `naive faults=N`."""
import lldb  # type: ignore[import-not-found]  # noqa: TID251  (runs inside lldb)

AC = 0x40000
SIGBUS = 7


def _flags(frame: "lldb.SBFrame") -> "lldb.SBValue":
    return frame.FindRegister("rflags")


def _set_ac(thread: "lldb.SBThread", on: bool) -> None:
    reg = _flags(thread.GetFrameAtIndex(0))
    value = reg.GetValueAsUnsigned()
    value = value | AC if on else value & ~AC
    error = lldb.SBError()
    if not reg.SetValueFromCString(hex(value), error):
        raise RuntimeError(f"cannot write rflags: {error}")


def naive_loop(debugger, command, exe_ctx, result, internal_dict):
    debugger.SetAsync(False)
    target = debugger.GetSelectedTarget()
    main_bp = target.BreakpointCreateByName("main")
    error = lldb.SBError()
    process = target.Launch(target.GetLaunchInfo(), error)
    if not error.Success():
        result.SetError(f"launch failed: {error}")
        return
    target.BreakpointDelete(main_bp.GetID())
    signals = process.GetUnixSignals()
    signals.SetShouldStop(SIGBUS, True)
    signals.SetShouldSuppress(SIGBUS, True)  # nopass
    signals.SetShouldNotify(SIGBUS, False)
    _set_ac(process.GetSelectedThread(), True)
    faults = 0
    pcs = set()
    while True:
        process.Continue()
        if process.GetState() != lldb.eStateStopped:
            break
        thread = process.GetSelectedThread()
        if thread.GetStopReason() != lldb.eStopReasonSignal or thread.GetStopReasonDataAtIndex(0) != SIGBUS:
            break
        pcs.add(thread.GetFrameAtIndex(0).GetPC())
        _set_ac(thread, False)
        thread.StepInstruction(False)
        _set_ac(thread, True)
        faults += 1
    result.AppendMessage(f"naive faults={faults} pcs={len(pcs)}")


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand(f"command script add -o -f {__name__}.naive_loop naive_loop")
