"""The top-level verbs the shared command registry declares (what both debuggers must offer)."""
from __future__ import annotations

from ualdbg.commands.all import COMMANDS


def declared_verbs() -> list[str]:

    return sorted({path[0] for path in COMMANDS})
