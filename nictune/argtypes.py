"""argparse types shared by the commands: a bad option is one line and exit code 2 before
anything runs (NaN and infinity are never in range)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def count(low: int) -> Callable[[str], int]:
    """A whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def number(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """A number from `low` to `high` (both included)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low:g}..{high:g}{unit}, got {text}")
        return value

    return parse
