"""A busy-polled NIC keeps one core busy, however many transmissions it carries, in both
engines (`costs.pollers_cpu`): its transmissions share that core's time. Busy-polled NICs
on one core are charged a core each, as a poller needs one to itself."""

from __future__ import annotations

import numpy as np
import pytest

from nictune.model import NicSetting, parse_config
from nictune.simulator import simulate
from nictune.simulator.costs import pollers_cpu
from nictune.simulator.metrics import core_load

POLL = NicSetting("busy_poll")


def config(nics: list[int], starts: list[float] | None = None):
    """One host of 4 cores; transmission i (20 000 packets of 1000 B at 100 kpps) on the
    10G NIC n{nics[i]}."""
    costs = {"irq": "4us", "per_packet": "0.6us", "per_byte": "0.25ns", "poll_check": "0.05us"}
    return parse_config({
        "hosts": {"h": {"cores": 4, "costs": costs,
                        "power": {"nic_idle": "10W", "core_busy": "15W"}}},
        "nics": {f"n{k}": {"host": "h", "link": "10Gbit/s"} for k in sorted(set(nics))},
        "transmissions": [{"id": f"t{i}", "nic": f"n{k}", "size": 20_000_000,
                           "packet_size": 1000, "rate": "100kpps", "arrival": "cbr",
                           "start": (starts or [0.0] * len(nics))[i]}
                          for i, k in enumerate(nics)],
    }, "test.yaml")


def test_a_nics_pollers_split_the_idle_time_of_its_core():
    start, end = np.zeros(3), np.ones(3)
    work = np.array([0.1, 0.2, 0.3])
    nic = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=bool)  # t2 does not poll
    # the NIC's two pollers: their work and half of the 0.7 s left idle each
    assert pollers_cpu(start, end, work, nic).tolist() == pytest.approx([0.45, 0.55, 0.3])
    # a NIC each: every poller spins for its whole span
    assert pollers_cpu(start, end, work, np.eye(3, dtype=bool)).tolist() == [1.0] * 3
    # one that works more than half the time leaves the other less to spin in
    heavy = pollers_cpu(start, end, np.array([0.8, 0.1, 0.0]), nic)
    assert heavy.tolist() == pytest.approx([0.85, 0.15, 0.0])
    # more work than the span: nothing idle, each keeps its work
    over = pollers_cpu(start, end, np.array([0.8, 0.5, 0.0]), nic)
    assert over.tolist() == pytest.approx([0.8, 0.5, 0.0])
    # one there for the second half of the other's span: the first spins alone before
    both = np.ones((2, 2), dtype=bool)
    late = pollers_cpu(np.array([0.0, 0.5]), np.ones(2), np.zeros(2), both)
    assert late.tolist() == pytest.approx([0.75, 0.25])
    # rows are independent (the fast engine's population)
    rows = pollers_cpu(start, np.stack([end, 2 * end]), np.stack([work, work]),
                       np.stack([nic, np.eye(3, dtype=bool)]))
    assert rows[0].tolist() == pytest.approx([0.45, 0.55, 0.3])
    assert rows[1].tolist() == pytest.approx([2.0, 2.0, 2.0])


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_one_busy_polled_nic_is_one_core_whatever_it_carries(engine):
    one_nic = simulate(config([0, 0]), {"t0": POLL, "t1": POLL}, engine=engine, exact=True)
    span = max(m.duration_s for m in one_nic)
    assert sum(m.cpu_busy_s for m in one_nic) == pytest.approx(span, rel=1e-6)
    for m in one_nic:
        assert m.cpu_util == pytest.approx(0.5, rel=0.01)
    # one busy core of 15 W for the span, not two
    cores = sum(m.energy_j - 10.0 * m.duration_s for m in one_nic)
    assert cores == pytest.approx(15.0 * span, rel=1e-6)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_busy_polled_nics_on_one_core_are_charged_a_core_each(engine):
    shared = simulate(config([0, 1]), {"t0": POLL, "t1": POLL}, engine=engine, exact=True)
    beside = simulate(config([0, 1]), {"t0": POLL, "t1": NicSetting(
        "watermark", watermark=32, watermark_timeout=1e-3)}, engine=engine, exact=True)
    for m in [*shared, beside[0]]:
        assert m.cpu_util == pytest.approx(1.0)
    assert 0.05 < beside[1].cpu_util < 0.2  # (the watermark's own work)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_a_nics_later_transmission_shares_its_core_only_while_both_arrive(engine):
    first, second = simulate(config([0, 0], starts=[0.0, 0.1]), {"t0": POLL, "t1": POLL},
                             engine=engine, exact=True)
    both = first.duration_s - 0.1  # (each span lasts about 0.2 s)
    assert first.cpu_busy_s == pytest.approx(0.1 + both / 2, rel=0.01)
    assert second.cpu_busy_s == pytest.approx(both / 2 + (second.duration_s - both), rel=0.01)


def test_a_nan_span_spoils_only_its_own_transmission():
    start, end = np.zeros(3), np.array([1.0, 1.0, np.nan])  # t2 does not poll
    nic = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=bool)
    cpu = pollers_cpu(start, end, np.array([0.1, 0.2, np.nan]), nic)
    assert cpu[:2].tolist() == pytest.approx([0.45, 0.55])
    assert np.isnan(cpu[2])
    # a poller's NaN work: its NIC-mate still gets a number (the review found NaN)
    mate = pollers_cpu(start, np.ones(3), np.array([0.1, np.nan, 0.3]), nic)
    assert np.isfinite(mate[0]) and np.isnan(mate[1]) and mate[2] == pytest.approx(0.3)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_a_nics_pollers_on_different_cores_are_a_core_each(engine):
    apart = simulate(config([0, 0]), {"t0": POLL, "t1": NicSetting("busy_poll", irq_core=1)},
                     engine=engine, exact=True)
    for m in apart:
        assert m.cpu_util == pytest.approx(1.0)


def test_core_load_counts_busy_polled_nics_not_transmissions():
    cfg = config([0, 0, 1])
    settings = {"t0": POLL, "t1": POLL, "t2": POLL}
    metrics = simulate(cfg, settings, engine="fast", exact=True)
    load = core_load(metrics, cfg.transmissions)
    assert load.busy_polling == 2
    assert load.describe().endswith(" + 2 busy-polled NICs")
    assert core_load(metrics[:2], cfg.transmissions[:2]).describe().endswith(
        " + 1 busy-polled NIC")
