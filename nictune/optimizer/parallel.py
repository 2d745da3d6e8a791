"""A swappable `map` (DEAP style): serial, a process pool (`--workers N`) or Dask
(`--dask ADDRESS|local`). Every map keeps the order of its inputs, and the tasks are
deterministic, so the result never depends on where they ran. Results are yielded in
that order as they come in, so a caller can count progress; read them inside the
`mapper` block (the pool or the Dask client is gone after it).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from nictune.errors import InputError, RunError
from nictune.model import Config, NicSetting
from nictune.simulator.metrics import Metrics

Map = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]


def serial_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    return (fn(x) for x in items)


@contextlib.contextmanager
def mapper(workers: int = 1, dask: str | None = None) -> Iterator[Map]:
    """A `map` over processes or a Dask cluster; `local` starts a 2-worker LocalCluster."""
    if dask:
        with _dask_map(dask) as fn:
            yield fn
    elif workers > 1:
        with _pool_map(workers) as fn:
            yield fn
    else:
        yield serial_map


@contextlib.contextmanager
def _pool_map(workers: int) -> Iterator[Map]:
    """A process pool's ordered map; an interrupt or error stops the workers at once (a
    finished run lets them exit normally). A worker that dies (the OOM killer: a DES task
    can take ~2 GB) or a task that raises ends the run with a RunError, never a hang."""
    started: Any = multiprocessing.SimpleQueue()  # each worker's pid, as it starts
    pool = ProcessPoolExecutor(workers, initializer=_worker, initargs=(started,))

    def run(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
        # one task each: DES tasks are seconds long and uneven, so handing them out as
        # workers free up balances better than chunks (rack.yaml's verification: 23 →
        # 19 s on 2 workers)
        futures = [pool.submit(fn, item) for item in items]
        for future in futures:
            try:
                yield future.result()
            except BrokenProcessPool:
                raise RunError("a worker process died (out of memory? a DES run can take "
                               "~2 GB); try fewer --workers") from None
            except MemoryError:
                raise  # (the command's one line says so, as for one in this process)
            except Exception as exc:
                raise RunError(f"a task failed in a worker process: {type(exc).__name__}: "
                               f"{exc}") from None

    try:
        yield run
    except BaseException:
        # running tasks would otherwise finish first (minutes for a DES run)
        while not started.empty():
            pid = started.get()
            if _our_child(pid):  # (a broken pool reaped its workers: their pids are free)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _our_child(pid: int) -> bool:
    """Whether `pid` is a live child of this process (Linux: its /proc stat's parent)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        return False


def _worker(started: Any) -> None:
    """A worker's start: it tells the parent its pid (to be stopped by it, and only it, if
    the run is) and leaves Ctrl-C to the parent, which stops the run and reports it once."""
    started.put(os.getpid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def dask_address(text: str) -> str:
    """`--dask`'s value: `local`, or a scheduler address `[SCHEME://]HOST:PORT` with a
    scheme Dask knows, checked before any work (a bad one was a ValueError traceback from
    distributed; one that does not answer is still a failed run, found when connecting)."""
    if text == "local":
        return text
    try:
        from distributed.comm.addressing import parse_address
        from distributed.comm.registry import get_backend
    except ImportError:
        raise argparse.ArgumentTypeError("needs Dask: pip install 'nictune[cluster]'") from None
    scheme, location = parse_address(text)
    host, _, port = location.rpartition(":")
    try:
        get_backend(scheme)
        if scheme != "tcp":  # tls/ucx need a security or UCX setup
            raise ValueError(f"scheme {scheme}:// is not supported (use tcp://)")
        if not (host and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError("not HOST:PORT with a port from 1 to 65535")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected 'local' or a scheduler address such as tcp://host:8786, got {text!r}: "
            f"{exc}") from None
    return text


@contextlib.contextmanager
def _dask_map(address: str) -> Iterator[Map]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise InputError("--dask needs Dask: pip install 'nictune[cluster]'") from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(address, timeout="10s")
    except OSError as exc:
        if cluster is not None:
            cluster.close()
        raise RunError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        def run(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
            for future in client.map(fn, list(items), pure=False):
                try:
                    yield future.result()
                except Exception as exc:  # a task's error, or the scheduler lost
                    raise RunError(f"a task failed on the Dask cluster at {address}: "
                                   f"{type(exc).__name__}: {exc}") from None

        yield run
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def simulate_task(task: tuple[Config, dict[str, NicSetting], str, int, int]) -> list[Metrics]:
    """One engine run of a group of transmissions (a host): (config, settings, engine,
    seed, window) → their `Metrics` in the order of `settings`."""
    from nictune.simulator import simulate

    config, settings, engine, seed, window = task
    results = simulate(config, settings, engine=engine, seed=seed, window=window)
    by_id = {m.transmission: m for m in results}
    return [by_id[tid] for tid in settings]
