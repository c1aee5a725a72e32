"""`ualdbg stackcheck`: the variants and verdicts (check.py), the exec helper and native runs
(launch.py), the run of one sweep from the shell or a debugger command (run.py), and the
measuring loop inside the child debugger (sweep.py; the adapters' stackcheck_driver.py give it
gdb's and lldb's primitives)."""
