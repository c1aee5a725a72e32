"""What every layer shares and no layer above may be imported by: the fault and its records
(model.py), where a fault is counted (trace.py: the ring and exact per-PC counters), settings,
the Target protocol engines speak to a debugger through, progress files and the fix advice."""
