"""The in-process agent (engine `agent`): a preloaded C library that handles alignment faults
inside the traced program with one signal per fault (src/), how ualdbg builds it from source
(build.py), and the reader of the shared-memory buffer it writes (buffer.py)."""
