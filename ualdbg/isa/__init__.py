"""Where a fault is decoded: the CPU plug-in contract (cpu.py), one module per CPU with its facts,
its decoder into the one instruction model (insn.py) and its signal mode (arch/), the CPU-neutral
door to them (decode.py), and the alignment policies an access is checked against (alignment.py)."""
