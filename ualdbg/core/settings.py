"""Typed settings, declared once: gdb exposes them as `set/show ualdbg NAME`, lldb as
`ualdbg config NAME VALUE`, the CLI as options."""
from __future__ import annotations

from typing import Any

from ..lazyclass import dataclass
from .trace import DEFAULT_BUFFER


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    doc: str
    choices: tuple[str, ...] = ()

    def parse(self, text: str) -> Any:
        text = text.strip()
        if self.kind is bool:
            low = text.lower()
            if low in ("on", "true", "yes", "1"):
                return True
            if low in ("off", "false", "no", "0"):
                return False
            raise ValueError(f"{self.name} takes on or off, not {text!r}")
        if self.kind is int:
            try:
                value = int(text, 0)
            except ValueError:
                raise ValueError(f"{self.name} takes a whole number, not {text!r}") from None
            if value <= 0:
                raise ValueError(f"{self.name} must be positive, not {value}")
            return value
        if self.choices and text not in self.choices:
            raise ValueError(f"{self.name} takes one of {', '.join(self.choices)}, not {text!r}")
        return text


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("buffer", int, DEFAULT_BUFFER, "How many fault records the trace ring keeps."),
        Setting("at", str, "main", "Where a run is armed: main, or start (the first instruction).",
                ("main", "start")),
        Setting("all-modules", bool, False,
                "Stop at and record faults in the dynamic loader and system libraries too."),
        Setting("source", bool, True, "Show the source line in break reports."),
    )
}


class Config:
    """Current values of the settings of one session."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def set(self, name: str, text: str) -> Any:
        if name not in SETTINGS:
            raise ValueError(f"no setting {name!r}; settings: {', '.join(SETTINGS)}")
        value = SETTINGS[name].parse(text)
        self.values[name] = value
        return value

    def format(self, name: str) -> str:
        v = self.values[name]
        return ("on" if v else "off") if isinstance(v, bool) else str(v)
