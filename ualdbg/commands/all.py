"""Import every command module so the registry is complete (adapters import this)."""
from __future__ import annotations

from . import arming, audit, stackcheck, tracing  # noqa: F401
from .registry import COMMANDS, GROUPS, CommandSpec, HelpShown, Host, UsageError

__all__ = ["COMMANDS", "GROUPS", "CommandSpec", "HelpShown", "Host", "UsageError"]
