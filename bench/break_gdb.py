"""ualdbg's interactive path in gdb, driven as a user would: after `ualdbg break`, `run` and then
`continue` at every stop (each stop prints gdb's stop lines and ualdbg's fault report) until the
program exits. Run after `-x gdb/ualdbg.py -ex "ualdbg break"`; prints `break stops=N`."""
import gdb  # noqa: TID251  (runs inside gdb, as gdb/ualdbg.py does)


def main() -> None:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    inferior = gdb.selected_inferior()
    stops = 0
    gdb.execute("run")
    while inferior.pid:
        stops += 1
        gdb.execute("continue")
    gdb.write(f"break stops={stops}\n")


main()
