"""The shell front end: `ualdbg trace|check|report|...` (shell.py's `main`, run by
`ualdbg/__main__.py`), a running process traced by --pid (attach.py,
inject.py), the live view (watch.py) and the output files CI relies on (outputs.py)."""
from .shell import main

__all__ = ["main"]
