"""Run one function per host in a bounded thread pool; say which host succeeded and why
another failed."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from nictune.deploy.inventory import HostInventory
from nictune.errors import InputError, RunError

T = TypeVar("T")
DEFAULT_WORKERS = 16


@dataclass
class HostOutcome(Generic[T]):
    host: str
    ok: bool
    value: T | None = None
    error: str = ""
    seconds: float = 0.0
    exit_code: int = 0  # the failure's (2: bad input, such as unreadable remote output)


@dataclass
class GroupResult(Generic[T]):
    outcomes: dict[str, HostOutcome[T]] = field(default_factory=dict)
    not_started: list[str] = field(default_factory=list)  # skipped after Ctrl-C
    interrupted: bool = False  # Ctrl-C stopped the group (even if every host had started)

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(o.ok for o in self.outcomes.values())

    @property
    def succeeded(self) -> list[str]:
        return [h for h, o in self.outcomes.items() if o.ok]

    @property
    def failed(self) -> dict[str, str]:
        return {h: o.error for h, o in self.outcomes.items() if not o.ok}

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, "succeeded": self.succeeded, "failed": self.failed}
        return {**out, "not_started": self.not_started} if self.interrupted else out


_POOLS = itertools.count()  # tells one call's worker threads from another's


class GroupInterrupted(KeyboardInterrupt):
    """Ctrl-C reached `run_group`: hosts not yet started were skipped, running ones were
    let finish (a transaction is not cut in half); `result` holds what finished."""

    def __init__(self, result: GroupResult[Any]):
        super().__init__("interrupted")
        self.result = result


def run_group(hosts: Iterable[HostInventory], fn: Callable[[HostInventory], T],
              workers: int = DEFAULT_WORKERS) -> GroupResult[T]:
    """`fn(host)` for every host, at most `workers` at a time.

    A host whose call raises, or returns an object whose `ok` is false (its `error` says
    why), is recorded as failed with the message; an
    unexpected exception type is recorded with its type name so nothing is lost, and the
    other hosts carry on. On Ctrl-C the hosts not started yet are skipped, the running ones
    finish, and GroupInterrupted carries their outcomes.
    """
    hosts = list(hosts)
    done: dict[str, HostOutcome[T]] = {}  # each host's outcome, written as it ends

    def one(host: HostInventory) -> HostOutcome[T]:
        started = time.monotonic()
        try:
            value = fn(host)
            ok = bool(getattr(value, "ok", True))  # a result object may report failure
            outcome = HostOutcome(host.name, ok, value, "" if ok else str(
                getattr(value, "error", "failed")), time.monotonic() - started)
        except (RunError, InputError) as exc:
            outcome = HostOutcome(host.name, False, None, str(exc), time.monotonic() - started,
                                  exc.exit_code)
        except Exception as exc:  # one host's bug must not stop the others
            outcome = HostOutcome(host.name, False, None, f"{type(exc).__name__}: {exc}",
                                  time.monotonic() - started)
        except BaseException as exc:  # cut short: recorded, then passed on
            done[host.name] = HostOutcome(host.name, False, None, type(exc).__name__,
                                          time.monotonic() - started)
            raise
        done[host.name] = outcome
        return outcome

    if not hosts:
        return GroupResult()
    prefix = f"nictune-host-{next(_POOLS)}"
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts))),
                            thread_name_prefix=prefix) as pool:
        try:
            futures = [pool.submit(one, h) for h in hosts]
            for future in futures:
                future.result()
        except KeyboardInterrupt:
            # The running hosts finish (a transaction is not cut in half); the others never
            # start. Ctrl-C can come inside a submit, after its thread started but before
            # the pool knew of it, so every thread of this pool is joined, and what ran is
            # read from `done`, not from the futures.
            pool.shutdown(wait=False, cancel_futures=True)
            _join(prefix)
            raise GroupInterrupted(GroupResult(
                {h.name: done[h.name] for h in hosts if h.name in done},
                [h.name for h in hosts if h.name not in done], interrupted=True)) from None
    return GroupResult({h.name: done[h.name] for h in hosts})


def _join(prefix: str) -> None:
    """Wait for every thread of the pool `prefix`, however often Ctrl-C (or SIGTERM) comes
    again: a second one had cut the wait short and left a host half-applied until its
    timer fired, with no results printed."""
    told = False
    while True:
        try:  # (polled: a join that Ctrl-C interrupts marks a running thread as ended)
            while any(t.is_alive() for t in threading.enumerate()
                      if t.name.startswith(prefix + "_")):
                time.sleep(0.05)
            return
        except KeyboardInterrupt:
            if not told:
                print("nictune: letting the running hosts finish their transactions "
                      "(Ctrl-C again is ignored)", file=sys.stderr)
                told = True
