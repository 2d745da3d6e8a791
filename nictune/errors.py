"""The two kinds of failure every command distinguishes (DESIGN §4 exit codes), and the
one way input files are read so that every bad file gets the same one-line message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class InputError(Exception):
    """Bad input: a config, inventory, plan, option or remote output. Exit code 2.

    The message is one line naming the file, the field and what was expected.
    """

    exit_code = 2


class RunError(Exception):
    """The run itself failed (a host, a check). Exit code 1."""

    exit_code = 1


def read_yaml(path: Path, what: str, error: type[InputError] = InputError) -> Any:
    """A YAML file's document; an unreadable file or bad YAML raises `error` with one line
    naming the file (and the line of the YAML problem). `what` says which file it was
    meant to be (`plan`, `inventory`, or where a config referred to it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"{what}: cannot read {path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error(f"{path}: invalid YAML{at}: {problem}") from None
