"""Where a fault is decoded: capstone's decode of the faulting instruction (decode.py), the
per-CPU facts and decoders (arch/), and the alignment policies an access is checked against
(alignment.py)."""
