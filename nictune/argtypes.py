"""argparse types shared by the commands: a bad option is one line and exit code 2 before
anything runs (NaN and infinity are never in range)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


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


def out_dir(text: str) -> Path:
    """A directory to write into: an existing one, or one that can be made (checked when
    the command starts, not after minutes of measuring)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory")
    _writable_ancestor(path, text)
    return path


def out_file(text: str) -> Path:
    """A file to write, in a directory that exists or can be made."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    _writable_ancestor(path.parent, text)
    return path


def _writable_ancestor(path: Path, text: str) -> None:
    """`path` or the nearest of its ancestors that exists is a directory we may write in."""
    here = path.absolute()
    while not here.exists():
        here = here.parent
    if not here.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: {here} is not a directory")
    if not os.access(here, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: no write permission in {here}")
