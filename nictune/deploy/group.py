"""Run one function per host in a bounded thread pool; say which host succeeded and why
another failed."""

from __future__ import annotations

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


@dataclass
class GroupResult(Generic[T]):
    outcomes: dict[str, HostOutcome[T]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes.values())

    @property
    def succeeded(self) -> list[str]:
        return [h for h, o in self.outcomes.items() if o.ok]

    @property
    def failed(self) -> dict[str, str]:
        return {h: o.error for h, o in self.outcomes.items() if not o.ok}

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "succeeded": self.succeeded, "failed": self.failed}


def run_group(hosts: Iterable[HostInventory], fn: Callable[[HostInventory], T],
              workers: int = DEFAULT_WORKERS) -> GroupResult[T]:
    """`fn(host)` for every host, at most `workers` at a time.

    A host whose call raises, or returns an object whose `ok` is false (its `error` says
    why), is recorded as failed with the message; an
    unexpected exception type is recorded with its type name so nothing is lost, and the
    other hosts carry on.
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
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts))),
                            thread_name_prefix="nictune-host") as pool:
        for outcome in pool.map(one, hosts):
            result.outcomes[outcome.host] = outcome
    return result
