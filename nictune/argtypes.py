"""argparse types shared by the commands: a bad option is one line and exit code 2 before
anything runs (NaN and infinity are never in range)."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number of at least `low` (and at most `high`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
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
    return _writable(text, directory=True)


def out_file(text: str) -> Path:
    """A file to write, in a directory that exists or can be made."""
    return _writable(text, directory=False)


def _writable(text: str, directory: bool) -> Path:
    """`text` as a path we may create or overwrite: not the other kind of file, and the
    nearest existing ancestor a directory we may write in (a path we may not even look
    at is refused the same way, not with a traceback)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    path = Path(text)
    try:
        if directory and path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a file, not a directory")
        if not directory and path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
        here = (path if directory else path.parent).absolute()
        while not here.exists():
            here = here.parent
        usable = here.is_dir() and os.access(here, os.W_OK | os.X_OK)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {text}: {e.strerror}") from None
    if not here.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: {here} is not a directory")
    if not usable:
        raise argparse.ArgumentTypeError(f"cannot write {text}: no write permission in {here}")
    try:  # (root passes os.access everywhere, even where nothing can be made, as in /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".nictune-check-", dir=here))
    except OSError as e:
        raise argparse.ArgumentTypeError(
            f"cannot write {text}: nothing can be made in {here} ({e.strerror})") from None
    return path
