"""The process-pool map: order kept, and a dead worker or a failing task is a RunError."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from nictune.errors import RunError
from nictune.optimizer.parallel import dask_address, mapper


def square(x: int) -> int:
    return x * x


def die_on_three(x: int) -> int:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    return x


def fail_on_two(x: int) -> int:
    if x == 2:
        raise ValueError("no room")
    return x


def no_memory_on_two(x: int) -> int:
    if x == 2:
        raise MemoryError("no room")
    return x


def test_the_pool_keeps_the_order_of_its_inputs() -> None:
    with mapper(workers=2) as run:
        assert list(run(square, range(20))) == [x * x for x in range(20)]


def test_a_worker_that_dies_ends_the_run_instead_of_hanging_it() -> None:
    with pytest.raises(RunError, match="a worker process died"), mapper(workers=2) as run:
        list(run(die_on_three, range(6)))


def test_a_task_that_raises_is_a_run_error_naming_it() -> None:
    with pytest.raises(RunError, match="ValueError: no room"), mapper(workers=2) as run:
        list(run(fail_on_two, range(4)))


def test_a_worker_out_of_memory_stays_a_memory_error() -> None:
    """... but a worker's MemoryError reaches the command as one, for its one out-of-memory
    line (it was "a task failed in a worker process: MemoryError")."""
    with pytest.raises(MemoryError, match="no room"), mapper(workers=2) as run:
        list(run(no_memory_on_two, range(4)))


@pytest.mark.parametrize("address", ["tls://h:1", "ucx://h:1"])
def test_dask_schemes_without_their_setup_are_refused(address: str) -> None:
    pytest.importorskip("distributed")
    with pytest.raises(Exception, match="not supported"):
        dask_address(address)


def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_an_error_in_the_callers_block_stops_running_tasks_at_once() -> None:
    """Ctrl-C (or any error) while workers run minute-long DES tasks must not wait for them."""
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="stop"), mapper(workers=2) as run:
        results = run(sleep_for, [0.0, 60.0, 60.0])
        assert next(results) == 0.0
        raise RuntimeError("stop")
    assert time.monotonic() - started < 20


def test_stopping_the_pool_leaves_other_processes_alone() -> None:
    """Only the pool's workers are terminated: a process started beside it in the block
    (the first version took every child started since the pool) is not."""
    other = multiprocessing.Process(target=time.sleep, args=(30,))
    with pytest.raises(RuntimeError, match="stop"), mapper(workers=2) as run:
        results = run(sleep_for, [0.0, 60.0])
        assert next(results) == 0.0
        other.start()
        raise RuntimeError("stop")
    assert other.is_alive()
    other.terminate()
    other.join()
