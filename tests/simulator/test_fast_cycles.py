"""The compiled cycle-by-cycle follower of the fast engine's passive_wait (`Cycles`)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from nictune.simulator.fast_cycles import Cycles


def _random(rng: np.random.Generator, e: int) -> tuple[np.ndarray, ...]:
    period = np.exp(rng.uniform(np.log(1e-5), np.log(1e-2), e))
    lam = np.exp(rng.uniform(np.log(1e3), np.log(1e6), e))
    ws = rng.uniform(0.05, 0.9, e) / lam
    ti = rng.uniform(0.0, 3.0, e) * period
    ring = rng.choice([4.0, 64.0, 4096.0], e)
    delay = rng.choice([0.0, 1.0], e) * rng.uniform(0.0, 0.5, e) * period
    n = rng.integers(1, 3000, e).astype(float)
    return lam, ws, ti, period, ring, delay, n


def _state(c: Cycles) -> list[np.ndarray]:
    return [c.j, c.handled, c.late, c.wakes, c.taken, c.dropped, c.empty]


def test_each_element_is_followed_as_if_alone() -> None:
    """Elements end at different wake-ups; the ones still going are followed on their own
    (the loop drops the ended ones as it goes): the batch gives each element's own run."""
    args = _random(np.random.default_rng(3), 200)
    together = Cycles(*args)
    together.follow_to_end(256)
    assert 0 < (together.handled >= together.n).sum() < 200  # some end, some do not
    for e in (0, 7, 50, 199):
        alone = Cycles(*(a[e:e + 1] for a in args))
        alone.follow_to_end(256)
        for got, want in zip(_state(together), _state(alone), strict=True):
            np.testing.assert_array_equal(got[..., e:e + 1], want)
    unmasked = Cycles(*args)
    unmasked.follow(48, 8)
    for e in (3, 120):
        alone = Cycles(*(a[e:e + 1] for a in args))
        alone.follow(48, 8)
        np.testing.assert_array_equal(unmasked.late[:, e:e + 1], alone.late)
        assert unmasked.wakes[e] == 48 and unmasked.late[0, e] == 40


def test_a_ring_of_one_keeps_one_packet_a_tick() -> None:
    """Two packets a period, a ring of one slot and no handler time: the first tick finds
    three packets (it keeps one), each later one two; n = 2k + 1 packets take k wake-ups,
    k packets kept and k + 1 dropped."""
    k = np.array([1.0, 5.0, 40.0])
    n = 2.0 * k + 1.0
    one = np.ones(3)
    c = Cycles(2000.0 * one, 1e-9 * one, 0.0 * one, 1e-3 * one, one, 0.0 * one, n)
    c.follow_to_end(1024)
    np.testing.assert_array_equal(c.handled, n)
    np.testing.assert_array_equal(c.wakes, k)
    np.testing.assert_array_equal(c.taken, k)
    np.testing.assert_array_equal(c.dropped, k + 1.0)
    np.testing.assert_array_equal(c.empty, 0.0 * k)
    # stopped at the horizon: the second half counts in `late`
    short = Cycles(2000.0 * one, 1e-9 * one, 0.0 * one, 1e-3 * one, one, 0.0 * one, n)
    short.follow_to_end(10)
    np.testing.assert_array_equal(short.wakes, np.minimum(k, 10.0))
    assert short.late[0, 2] == 5 and short.handled[2] < n[2]


def test_the_loops_run_where_their_machine_code_cannot_be_cached() -> None:
    """A read-only install run by a user without a writable home: numba finds nowhere to
    cache (simulated by allowing only its zip-file locator), and the engine compiles its
    loops in the process instead of failing at import."""
    code = """
import numpy as np
from nictune.simulator.fast_cycles import Cycles, _follow
print(type(_follow._cache).__name__)
c = Cycles(*(np.full(2, v) for v in (2000.0, 1e-9, 0.0, 1e-3, 1.0, 0.0, 11.0)))
c.follow_to_end(64)
print(c.wakes.tolist())
"""
    def run(env: dict[str, str]) -> list[str]:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stdout.split("\n")

    assert run(dict(os.environ))[0] == "FunctionCache"  # (cached where it can be)
    nowhere = {**os.environ, "NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}
    assert run(nowhere)[:2] == ["NullCache", "[5.0, 5.0]"]
