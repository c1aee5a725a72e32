"""The top-level verbs the shared command registry declares (what both debuggers must offer)."""
from __future__ import annotations

import sys

from conftest import ROOT


def declared_verbs() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from ualdbg.commands.all import COMMANDS

    return sorted({path[0] for path in COMMANDS})
