"""The analyses beside tracing: `ualdbg stackcheck` (stackcheck/) and `ualdbg audit`, the static
alignment audit of an ELF (audit.py)."""
