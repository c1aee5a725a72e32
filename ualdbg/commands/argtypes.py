"""argparse value types shared by the debugger commands and the shell command."""
from __future__ import annotations

import argparse


def _whole(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive(text: str) -> int:
    value = _whole(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def nonnegative(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {value}")
    return value
