"""Which hooks serve which lldb debugger: lldb's callbacks get a thread or a frame, never the
hooks, and find them here by the debugger's ID (hooks.py fills it; stepping.py reads it too)."""
from __future__ import annotations

from typing import Any

HOOKS: dict[int, Any] = {}  # lldb debugger ID -> the hooks.LldbHooks of its session
