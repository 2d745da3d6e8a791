"""The `nictune` command line: parses, calls one function per command, prints.

Each part registers its own sub-commands (`register(subparsers)` in
`nictune/<part>/cli.py`), so the parts stay independent. Bad input of any kind ends with
a one-line message and exit code 2; a failed run with exit code 1 (DESIGN §4).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from nictune import __version__
from nictune.errors import InputError, RunError, one_line

DESCRIPTION = ("Tune Linux NIC receive settings per data transmission: simulate, optimise, "
               "deploy over SSH with rollback, and validate with real traffic.")
PARTS = ("nictune.simulator.cli", "nictune.optimizer.cli", "nictune.deploy.cli",
         "nictune.validation.cli")


# A negative number, with or without a unit (`-1`, `-1.5e3`, `-1ms`): an option's value,
# refused by its range check, not an unknown option ("expected one argument").
NEGATIVE = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?[A-Za-zµ/%]*$")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump) and exit code 2; `-1ms` is a value."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


class CommandParser(Parser):
    """A sub-command's parser: arguments it does not know are its error, pointing to its
    own help (`nictune optimize: error: unrecognized arguments: --popluation 8 (see nictune
    optimize --help)`), not the top level's."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nictune", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"nictune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True
    for name in PARTS:
        importlib.import_module(name).register(sub)
    return parser


# commands that change hosts (or build the lab's): SIGTERM (a service manager, `timeout`)
# cleans up as Ctrl-C does — hosts restored, results printed, a half-built lab torn down —
# instead of ending with a host left tuned
HOST_COMMANDS = ("probe", "deploy", "rollback", "validate", "calibrate", "lab")


class _Terminated:
    """A SIGTERM handler that stops the command like Ctrl-C (KeyboardInterrupt in the
    main thread) and remembers that it was SIGTERM, for the exit code."""

    def __init__(self) -> None:
        self.pid, self.seen = os.getpid(), False

    def __call__(self, signum: int, _frame: object) -> None:
        if os.getpid() != self.pid:  # (a forked child: die as usual)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.seen = True
        raise KeyboardInterrupt


class _Output:
    """Standard output whose failed writes (a full disk, `> /dev/full`) are a RunError
    saying so, not a traceback; a reader that went away stays a BrokenPipeError."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        with self._failing():
            return self.stream.write(text)

    def flush(self) -> None:
        with self._failing():
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as exc:
            _quiet_stdout()
            raise RunError(f"cannot write the output: {exc.strerror or exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
    try:
        return _run(argv)
    finally:
        sys.stdout = stdout


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            sys.stdout.flush()  # (--help and --version: their output is written here)
            raise
    except RunError as exc:
        print(f"nictune: failed: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    term = _Terminated()
    previous = None
    if args.command in HOST_COMMANDS and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, term)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # (a failed write of the last buffered output is reported too)
        # (a command that handles Ctrl-C itself returns 130)
        return 128 + signal.SIGTERM if term.seen and code == 130 else code
    except InputError as exc:
        print(f"nictune {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except RunError as exc:
        print(f"nictune {args.command}: failed: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except MemoryError as exc:
        # (the DES holds ~80 bytes a packet of a core's window, or of every packet with
        # --exact, in each worker)
        why = f" ({one_line(exc)})" if str(exc) else ""
        hint = {"simulate": "; without --exact the DES simulates a window of each "
                            "transmission" if getattr(args, "exact", False) else "",
                "optimize": "; fewer --workers hold fewer DES runs at once"}
        print(f"nictune {args.command}: failed: out of memory{why}{hint.get(args.command, '')}",
              file=sys.stderr)
        return RunError.exit_code
    except KeyboardInterrupt:
        if term.seen:
            print(f"nictune {args.command}: terminated (SIGTERM)", file=sys.stderr)
            return 128 + signal.SIGTERM
        print(f"nictune {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_is_a_pipe():
            raise
        # the reader of our output went away (`| head`): stop as a shell tool does
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what
    could not be written is quiet."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)


def _stdout_is_a_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
