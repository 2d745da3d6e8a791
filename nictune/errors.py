"""The two kinds of failure every command distinguishes (DESIGN §4 exit codes), and the
one way input files are read so that every bad file gets the same one-line message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# (Python reads no integer of more than 4 300 digits: int_max_str_digits)
TOO_LONG = "an integer of more digits than can be read (4 300)"


class InputError(Exception):
    """Bad input: a config, inventory, plan, option or remote output. Exit code 2.

    The message is one line naming the file, the field and what was expected.
    """

    exit_code = 2


class RunError(Exception):
    """The run itself failed (a host, a check). Exit code 1."""

    exit_code = 1


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last
    one silently: a host listed twice lost its address, a setting with two `mode:` lines
    took the second)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # (`<<: *anchor`: its keys yield to the mapping's own)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float):
                continue  # (unhashable keys fail in the base class)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        """An integer as SafeLoader reads it; refused past 4 300 digits, which Python
        neither reads in decimal nor prints (hex, octal and binary get past the first)."""
        try:
            value = super().construct_yaml_int(node)
        except ValueError:
            value = _TOO_BIG
        if abs(value) >= _TOO_BIG:
            raise yaml.constructor.ConstructorError(None, None, TOO_LONG, node.start_mark)
        return value


_TOO_BIG = 10 ** 4300
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int",
                                 _UniqueKeyLoader.construct_bounded_int)


MAX_YAML_BYTES = 64 << 20  # configs, plans and inventories are far smaller


def read_yaml(path: Path, what: str, error: type[InputError] = InputError) -> Any:
    """A YAML file's document; an unreadable file or bad YAML raises `error` with one line
    naming the file (and the line of the YAML problem). `what` says which file it was
    meant to be (`plan`, `inventory`, or where a config referred to it). Duplicate keys
    are bad YAML here."""
    try:
        with open(path, "rb") as fh:  # (read to a bound: `/dev/zero` filled the memory)
            data = fh.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            raise error(f"{what}: {path} is larger than {MAX_YAML_BYTES >> 20} MiB: not a "
                        "file nictune reads")
        text = data.decode("utf-8")
    except OSError as exc:
        raise error(f"{what}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except ValueError:  # (a NUL byte in the name, from a config's `profile`)
        raise error(f"{what}: cannot read {str(path)!r}: not a file name") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error(f"{path}: invalid YAML{at}: {problem}") from None
    except RecursionError:
        raise error(f"{path}: invalid YAML: nested too deeply") from None
    except ValueError as exc:  # (a date that does not exist: 2020-02-30)
        raise error(f"{path}: invalid YAML: {exc}") from None


def one_line(text: object) -> str:
    """`text` on one line: names from files and output from hosts can hold newlines and
    other control characters (a terminal's cursor moves among them) that would print as
    lines of their own; each is shown escaped (\\n, \\x1b)."""
    return "".join(c if c.isprintable() or c == "\t" else c.encode("unicode_escape").decode()
                   for c in str(text))
