"""The compiled phases of a shared core (`fast_phases`), on fluid cases with closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from nictune.simulator.fast_phases import _waterfill, phases, wake_load


def test_waterfill_serves_a_small_ask_in_full_and_shares_the_rest_by_request() -> None:
    pairs = np.ones((2, 2))
    w = np.array([1e-6, 2e-6])
    # both backlogged: one packet each in turn, so equal packet rates 1 / (w1 + w2)
    r = _waterfill(pairs, np.array([1e30, 1e30]), w, np.ones(2), np.ones(2))
    np.testing.assert_allclose(r, 1.0 / w.sum())
    # the second asks for less than its turn: in full (inf), the first gets the rest
    r = _waterfill(pairs, np.array([1e30, 1e5]), w, np.ones(2), np.ones(2))
    assert r[1] == np.inf
    assert r[0] == pytest.approx((1.0 - 1e5 * 2e-6) / 1e-6)
    # active_wait with a backlog of 4 requests: four packets to the other's one
    r = _waterfill(pairs, np.array([1e30, 1e30]), w, np.ones(2), np.array([4.0, 1.0]))
    assert r[0] == pytest.approx(4.0 * r[1])
    assert r[0] * w[0] + r[1] * w[1] == pytest.approx(1.0)
    # the core keeps up: nobody is limited
    assert (_waterfill(pairs, np.array([1e5, 1e5]), w, np.ones(2), np.ones(2)) == np.inf).all()


def _host(inflow: list[float], cap: list[float]) -> dict[str, np.ndarray]:
    """Two transmissions arriving over [0, 1] s on one core, 1 µs of work a packet, no
    interrupts or wake-ups; one row per entry of `cap`."""
    rows, m = len(cap), 2
    zeros, ones = np.zeros((rows, m)), np.ones((rows, m))
    return dict(edges=np.array([0.0, 1.0]), arriving=np.ones((1, m)),
                inflow=np.array(inflow), end=np.ones(m), same=np.ones((rows, m, m)),
                wj=1e-6 * ones, irq=zeros, sq=zeros, cap=np.array(cap).reshape(rows, 1) * ones,
                weight=ones, held=zeros, wake_local=np.zeros(m), wake_ti=np.zeros(m),
                period=ones, n_wake=ones, pas=zeros > 0, wat=zeros > 0, delay=zeros,
                sleeps=zeros, ticking=ones)


def test_a_saturated_core_queues_drops_and_drains_after_the_arrivals() -> None:
    """1.4 cores of work: the second's 0.4 is served in full, the first gets 0.6 and queues
    the rest (4e5 packets), or drops what its ring cannot hold; after the arrivals the
    queue drains at the whole core."""
    t = phases(**_host([1e6, 4e5], [1e9, 1e5]))
    np.testing.assert_allclose(t.taken_own[:, 0], 6e5)
    np.testing.assert_allclose(t.taken_own[:, 1], 4e5)
    np.testing.assert_allclose(t.q_end[:, 0], [4e5, 1e5])
    np.testing.assert_allclose(t.dropped[:, 0], [0.0, 3e5], atol=1e-6)
    np.testing.assert_allclose(t.fin[:, 0], [1.4, 1.1])
    np.testing.assert_allclose(t.fin[:, 1], 1.0)
    np.testing.assert_allclose(t.behind[:, 0], 1.0)
    np.testing.assert_allclose(t.behind[:, 1], 0.0)
    # the others' use of the core while each arrives
    np.testing.assert_allclose(t.rho, [[0.4, 0.6], [0.4, 0.6]])
    np.testing.assert_allclose(t.awake_t[:, 1], 1.0)


def test_a_core_that_keeps_up_queues_nothing() -> None:
    t = phases(**_host([3e5, 4e5], [1e9]))
    np.testing.assert_allclose(t.taken_own, [[3e5, 4e5]])
    np.testing.assert_allclose(t.q_end + t.dropped + t.behind, 0.0)
    np.testing.assert_allclose(t.fin, 1.0)
    np.testing.assert_allclose(t.rho, [[0.4, 0.3]])


def test_an_active_wait_backlog_takes_a_packet_per_request_it_queues() -> None:
    """Both saturate the core (2 cores of work over 1 s); active_wait queues a request per
    packet of its backlog (`weight` 3 here) against the other's one: 3 packets to 1 while
    both arrive; after, its backlog (2.5e5) empties at 1/3 s and the other's 6.7e5 alone
    at the whole core, done at 2 s."""
    host = _host([1e6, 1e6], [1e9])
    host["weight"] = np.array([[3.0, 1.0]])
    t = phases(**host)
    np.testing.assert_allclose(t.taken_own, [[7.5e5, 2.5e5]])
    np.testing.assert_allclose(t.q_end, [[2.5e5, 7.5e5]])
    np.testing.assert_allclose(t.fin, [[1.0 + 1.0 / 3.0, 2.0]])


def test_transmissions_on_different_cores_do_not_meet() -> None:
    host = _host([1.5e6, 4e5], [1e9])
    host["same"] = np.eye(2)[None]
    t = phases(**host)
    np.testing.assert_allclose(t.taken_own, [[1e6, 4e5]])  # the first alone on its core
    np.testing.assert_allclose(t.q_end, [[5e5, 0.0]])
    np.testing.assert_allclose(t.rho, 0.0)
    np.testing.assert_allclose(t.fin, [[1.5, 1.0]])


def test_the_wake_up_load_is_ti_once_per_cycle() -> None:
    """`wake_load`: λ = 10⁵/s, Ti = 5 µs, w = 2 µs (λw = 0.2). passive_wait every 10 µs
    after a 5 µs wait: the drain cycle (Ti + wait)/(1 − λw) = 12.5 µs takes k = 2 ticks, so
    Ti / 20 µs = 0.25; a 3 µs wait fits one tick: 0.5. A watermark of 10: λTi / (n_w +
    λ(Ti + n_w·w)/(1 − λw)) = 0.5 / 13.125. The other modes: none."""
    one = np.ones((1, 4))
    load = wake_load(np.array([1e5] * 4), np.array([5e-6] * 4), 2e-6 * one, 1e-5 * one,
                     np.array([[1.0, 1.0, 10.0, 1.0]]),
                     np.array([[True, True, False, False]]),
                     np.array([[False, False, True, False]]),
                     np.array([[5e-6, 3e-6, 0.0, 0.0]]))
    np.testing.assert_allclose(load, [[0.25, 0.5, 0.5 / 13.125, 0.0]], rtol=1e-12)
    # a wait given once for every element
    np.testing.assert_allclose(wake_load(np.array([1e5]), np.array([5e-6]), 2e-6 * one[:, :1],
                                         1e-5 * one[:, :1], one[:, :1], one[:, :1] > 0,
                                         one[:, :1] < 0, 5e-6), [[0.25]])
