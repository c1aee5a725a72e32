"""Engines turn debugger stops into fault records: `trap` (EFLAGS.AC / prctl signal mode)."""
