"""A busy-poller's CPU time is the share of its core the others leave it, in both engines:
a core's transmissions never use more than its time (DESIGN §4: cpu_util on the NIC's
core)."""

from __future__ import annotations

import numpy as np
import pytest

from nictune.model import NicSetting, parse_config
from nictune.simulator import simulate
from nictune.simulator.costs import pollers_cpu

POLL = NicSetting("busy_poll")


def config(rates: list[str], starts: list[float] | None = None):
    """One host of 4 cores, one 10G NIC and 20 000 packets of 1000 B per rate."""
    costs = {"irq": "4us", "per_packet": "0.6us", "per_byte": "0.25ns", "poll_check": "0.05us"}
    return parse_config({
        "hosts": {"h": {"cores": 4, "costs": costs,
                        "power": {"nic_idle": "10W", "core_busy": "15W"}}},
        "nics": {f"n{i}": {"host": "h", "link": "10Gbit/s"} for i in range(len(rates))},
        "transmissions": [{"id": f"t{i}", "nic": f"n{i}", "size": 20_000_000,
                           "packet_size": 1000, "rate": r, "arrival": "cbr",
                           "start": (starts or [0.0] * len(rates))[i]}
                          for i, r in enumerate(rates)],
    }, "test.yaml")


def test_the_share_splits_a_core_between_pollers_and_leaves_others_their_work():
    start = np.zeros(3)
    end = np.array([1.0, 1.0, 1.0])
    work = np.array([0.1, 0.2, 0.3])
    one = np.ones((3, 3), dtype=bool)
    # two pollers and a drain on one core: the drain keeps its 0.3 s, the pollers their
    # work and half of the 0.4 s left idle each
    cpu = pollers_cpu(start, end, work, np.array([True, True, False]), one)
    assert cpu.tolist() == pytest.approx([0.3, 0.4, 0.3])
    # each on a core of its own: every poller spins for its whole span
    apart = np.eye(3, dtype=bool)
    assert pollers_cpu(start, end, work, np.ones(3, bool), apart).tolist() == [1.0] * 3
    # a poller that works more than half the time leaves the other less to spin in
    busy = pollers_cpu(start, end, np.array([0.8, 0.1, 0.0]), np.array([True, True, False]), one)
    assert busy.tolist() == pytest.approx([0.85, 0.15, 0.0])
    # an overloaded core: nothing idle, each keeps its work
    over = pollers_cpu(start, end, np.array([0.8, 0.5, 0.0]), np.array([True, True, False]), one)
    assert over.tolist() == pytest.approx([0.8, 0.5, 0.0])
    # a poller there for half the other's span: splits only that half
    cpu = pollers_cpu(np.array([0.0, 0.5]), np.array([1.0, 1.0]), np.zeros(2), np.ones(2, bool),
                      np.ones((2, 2), bool))
    assert cpu.tolist() == pytest.approx([0.75, 0.25])
    # rows are independent (the fast engine's population)
    rows = pollers_cpu(start, np.stack([end, 2 * end]), np.stack([work, work]),
                       np.array([[True, True, False]] * 2), np.stack([one, apart]))
    assert rows[0].tolist() == pytest.approx([0.3, 0.4, 0.3])
    assert rows[1].tolist() == pytest.approx([2.0, 2.0, 0.3])


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_two_pollers_on_one_core_use_one_core(engine):
    cfg = config(["100kpps", "100kpps"])
    apart = simulate(cfg, {"t0": POLL, "t1": NicSetting("busy_poll", irq_core=1)},
                     engine=engine, exact=True)
    shared = simulate(cfg, {"t0": POLL, "t1": POLL}, engine=engine, exact=True)
    for m in apart:  # (a core each)
        assert m.cpu_util == pytest.approx(1.0)
    span = max(m.duration_s for m in shared)
    assert sum(m.cpu_busy_s for m in shared) == pytest.approx(span, rel=1e-6)
    for m in shared:
        assert m.cpu_util == pytest.approx(0.5, rel=0.01)
    # one busy core of 15 W for the span, not two
    cores = sum(m.energy_j - 10.0 * m.duration_s for m in shared)
    assert cores == pytest.approx(15.0 * span, rel=1e-6)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_a_poller_spins_in_what_a_drain_leaves(engine):
    cfg = config(["100kpps", "300kpps"])
    out = simulate(cfg, {"t0": POLL, "t1": NicSetting("watermark", watermark=32,
                                                       watermark_timeout=1e-3)},
                   engine=engine, exact=True)
    poller, drain = out
    assert drain.cpu_util > 0.1
    assert poller.cpu_busy_s == pytest.approx(poller.duration_s - drain.cpu_busy_s * min(
        1.0, poller.duration_s / drain.duration_s), rel=0.02)
    assert poller.cpu_busy_s + drain.cpu_busy_s <= max(m.duration_s for m in out) * (1 + 1e-9)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_a_poller_after_another_spins_alone_once_it_is_gone(engine):
    """Spans that overlap in part: the core is split only while both are there."""
    cfg = config(["100kpps", "100kpps"], starts=[0.0, 0.1])
    first, second = simulate(cfg, {"t0": POLL, "t1": POLL}, engine=engine, exact=True)
    both = first.duration_s - 0.1  # (both spans last about 0.2 s)
    assert first.cpu_busy_s == pytest.approx(0.1 + both / 2, rel=0.01)
    assert second.cpu_busy_s == pytest.approx(both / 2 + (second.duration_s - both), rel=0.01)
