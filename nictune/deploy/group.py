"""Run one function per host in a bounded thread pool; say which host succeeded and why
another failed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
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


@dataclass
class GroupResult(Generic[T]):
    outcomes: dict[str, HostOutcome[T]] = field(default_factory=dict)
    not_started: list[str] = field(default_factory=list)  # skipped after Ctrl-C

    @property
    def ok(self) -> bool:
        return not self.not_started and all(o.ok for o in self.outcomes.values())

    @property
    def succeeded(self) -> list[str]:
        return [h for h, o in self.outcomes.items() if o.ok]

    @property
    def failed(self) -> dict[str, str]:
        return {h: o.error for h, o in self.outcomes.items() if not o.ok}

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, "succeeded": self.succeeded, "failed": self.failed}
        return {**out, "not_started": self.not_started} if self.not_started else out


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
    result: GroupResult[T] = GroupResult()

    def one(host: HostInventory) -> HostOutcome[T]:
        started = time.monotonic()
        try:
            value = fn(host)
            ok = bool(getattr(value, "ok", True))  # a result object may report failure
            return HostOutcome(host.name, ok, value, "" if ok else str(
                getattr(value, "error", "failed")), time.monotonic() - started)
        except (RunError, InputError) as exc:
            error = str(exc)
        except Exception as exc:  # one host's bug must not stop the others
            error = f"{type(exc).__name__}: {exc}"
        return HostOutcome(host.name, False, None, error, time.monotonic() - started)

    if not hosts:
        return result
    futures: list[Future[HostOutcome[T]]] = []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts))),
                            thread_name_prefix="nictune-host") as pool:
        try:
            futures.extend(pool.submit(one, h) for h in hosts)
            for future in futures:
                outcome = future.result()
                result.outcomes[outcome.host] = outcome
        except KeyboardInterrupt:
            pool.shutdown(wait=True, cancel_futures=True)
            raise GroupInterrupted(_settled(hosts, futures)) from None
    return result


def _settled(hosts: list[HostInventory],
             futures: list[Future[HostOutcome[T]]]) -> GroupResult[T]:
    """The outcomes of the hosts that ran, the names of those that never started."""
    result: GroupResult[T] = GroupResult()
    for i, host in enumerate(hosts):
        future = futures[i] if i < len(futures) else None
        if future is None or future.cancelled():
            result.not_started.append(host.name)
        elif (exc := future.exception()) is not None:  # (a BaseException: cut short)
            result.outcomes[host.name] = HostOutcome(host.name, False,
                                                     error=f"{type(exc).__name__}")
        else:
            result.outcomes[host.name] = future.result()
    return result
