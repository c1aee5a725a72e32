"""What CI relies on: the gate's exit contract (gate.py), outputs checked before the program runs
and never lost (outputs.py), baselines of known sites (baseline.py) and merged runs (merge.py)."""
