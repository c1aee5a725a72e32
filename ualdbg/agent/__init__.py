"""The in-process agent (engine `agent`): a preloaded C library that handles alignment faults
inside the traced program with one signal per fault (src/agent/), how ualdbg builds it and the
two other native products of src/ (records/: the record writer; acprobe/: the #AC probe) from
source (build.py), the probe's run (acprobe.py), and the reader of the shared-memory buffer the
agent writes (buffer.py)."""
