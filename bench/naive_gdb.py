"""The naive gdb Python loop of PLATFORM.md, for comparison with ualdbg's trap engine: set AC at
`main`, then `continue`; at each SIGBUS stop read the PC, clear AC, `stepi`, set AC again.
Run as `gdb -q -nx -batch -x bench/naive_gdb.py --args PROG ARGS`; prints `naive faults=N`."""
import gdb  # noqa: TID251  (runs inside gdb, as gdb/ualdbg.py does)

AC = 0x40000


def eflags() -> int:
    return int(gdb.parse_and_eval("$eflags"))  # PLATFORM.md: int(), not a cast to long


def main() -> None:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    # PLATFORM.md: `noprint` implies `nostop`, and with `nopass` that re-faults forever.
    gdb.execute("handle SIGBUS stop print nopass", to_string=True)
    gdb.execute("tbreak main", to_string=True)
    gdb.execute("run", to_string=True)
    gdb.execute(f"set $eflags = {eflags() | AC:#x}")
    inferior = gdb.selected_inferior()
    stops: dict = {}
    # Why it stopped, from the stop event (free) rather than $_siginfo (a ptrace round trip).
    gdb.events.stop.connect(lambda event: stops.update(signal=getattr(event, "stop_signal", None)))
    faults = 0
    pcs = set()
    while True:
        gdb.execute("continue", to_string=True)
        if not inferior.pid:
            break
        if stops.get("signal") != "SIGBUS":
            break  # not an alignment fault: this loop knows nothing else
        pcs.add(int(gdb.parse_and_eval("$pc")))
        gdb.execute(f"set $eflags = {eflags() & ~AC:#x}")
        gdb.execute("stepi", to_string=True)
        gdb.execute(f"set $eflags = {eflags() | AC:#x}")
        faults += 1
    gdb.write(f"naive faults={faults} pcs={len(pcs)}\n")


main()
