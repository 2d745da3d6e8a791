"""The fast engine agrees with the DES on a fixed random grid (issue 3's fidelity bounds).

A small version of benchmarks/fidelity.py (fixed seed, exact DES runs), so the engines
cannot drift apart unnoticed. The issue's bounds — median ≤ 2 %, 95th percentile ≤ 5 % of
the relative error — hold for throughput over all rows and for interrupts on one host
(benchmarks/fidelity.py over 26 grids of 500 cases: p95 1.92 % and 1.43 %). For shared
cores (a neighbour's drains meeting a consumer's, see docs/engines.md) the median is ≈ 0
but the tail is long (95th percentile 22 %), and on this short grid (6 000 packets, a few
hundred wake-ups) one-host passive_wait is noisy; those rows are held to a looser bound
(median ≤ 2 %, 75th percentile ≤ 4 %; the grid gives 1.6 %) that still catches a
regression. CPU busy time: p95 ≤ 5 %.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nictune.simulator import simulate
from nictune.simulator.fidelity import (
    NEIGHBOURS,
    Case,
    archetype_cases,
    band_error,
    burst_watermark_cases,
    compare,
    nic_pair_cases,
    on_defaults,
    random_cases,
    slower_cores,
)
from nictune.simulator.metrics import ends_on_timeout

SEED, CASES, PACKETS = 3, 80, 6000


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    cases = random_cases(CASES, seed=SEED, packets=PACKETS, shared_share=0.2)
    return [r for case in cases for r in compare(case)]


def stats(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values)
    return float(np.median(v)), float(np.percentile(v, 95))


def test_grid_covers_modes_arrivals_and_shared_hosts(rows: list[dict]) -> None:
    assert {r["des"]["setting"]["mode"] for r in rows} == {
        "active_wait", "passive_wait", "watermark", "busy_poll"}
    assert {r["arrival"] for r in rows} == {"cbr", "poisson", "onoff"}
    assert any(r["kind"] == "shared" for r in rows)
    assert any(r["des"]["packets_dropped"] > 0 for r in rows)  # overload is in the grid


def test_throughput_within_the_issue_bounds(rows: list[dict]) -> None:
    median, p95 = stats([r["errors"]["throughput"] for r in rows])
    assert median <= 0.02 and p95 <= 0.05, (median, p95)


def test_interrupts_within_the_issue_bounds_where_the_model_is_exact(rows: list[dict]) -> None:
    exact = [r["errors"]["interrupts"] for r in rows
             if r["kind"] == "single" and r["des"]["setting"]["mode"] != "passive_wait"]
    median, p95 = stats(exact)
    assert median <= 0.02 and p95 <= 0.05, (median, p95)


def test_interrupts_of_passive_wait_and_shared_cores_stay_close(rows: list[dict]) -> None:
    """A regression guard, not the issue's bound: the tail here is documented (engines.md)."""
    rest = np.asarray([r["errors"]["interrupts"] for r in rows
                       if r["kind"] == "shared" or r["des"]["setting"]["mode"] == "passive_wait"])
    assert np.median(rest) <= 0.02 and np.percentile(rest, 75) <= 0.04, np.percentile(
        rest, [50, 75, 95])


def test_cpu_and_drops_agree(rows: list[dict]) -> None:
    median, p95 = stats([r["errors"]["cpu"] for r in rows])
    assert median <= 0.02 and p95 <= 0.05, (median, p95)
    median, p95 = stats([r["errors"]["drops"] for r in rows])
    assert median <= 0.01 and p95 <= 0.03, (median, p95)


def test_latency_agrees_on_one_host(rows: list[dict]) -> None:
    """Mean latency (the optimizer holds plans to `max_latency_p99` with the fast engine's
    latencies): the grid gives a median of 1.8 % and 91 % of rows within 20 %; before the
    seventh session's latency model the median was ~18 %."""
    v = np.asarray([r["errors"]["latency"] for r in rows if r["kind"] == "single"])
    assert np.median(v) <= 0.05 and np.mean(v <= 0.2) >= 0.85, np.percentile(v, [50, 90])


def test_nic_pair_cases_put_two_transmissions_on_one_nic() -> None:
    """benchmarks/fidelity.py --pairs: one NIC, two transmissions, one setting."""
    cases = nic_pair_cases(20, seed=1, packets=2000)
    assert any(len(c.raw["transmissions"]) == 3 for c in cases)
    for case in cases:
        config = case.config()
        settings = case.nic_settings(config)
        on_n0 = [t.id for t in config.transmissions if t.nic == "n0"]
        assert len(on_n0) == 2 and settings[on_n0[0]] == settings[on_n0[1]]
        assert case.kind == "shared"


def test_archetype_cases_put_a_batched_consumer_beside_each_kind_of_neighbour() -> None:
    """benchmarks/fidelity_archetypes.py: two transmissions on the one core of a host, a
    batched consumer and a Poisson neighbour of each mode in turn, arriving all along."""
    cases = archetype_cases(12, seed=4, packets=2000)
    assert [c.settings["t1"]["mode"] for c in cases] == [*NEIGHBOURS] * 3
    for case in cases:
        config = case.config()
        consumer, neighbour = config.transmissions
        settings = case.nic_settings(config)
        assert config.hosts["h"].cores == 1 and case.kind == "shared"
        assert settings["t0"].mode in ("passive_wait", "watermark")
        assert settings["t0"].irq_core == settings["t1"].irq_core == 0
        assert neighbour.arrival == "poisson" and consumer.packets == 2000
        assert neighbour.packets / neighbour.rate >= consumer.packets / consumer.rate
    assert archetype_cases(3, seed=4) == archetype_cases(3, seed=4)
    assert archetype_cases(3, seed=4) != archetype_cases(3, seed=5)


def test_archetypes_stay_where_the_model_has_them() -> None:
    """A regression guard, not the issue's bound: beside one neighbour on its core the
    fast engine misses about a third of the consumers' wake-up counts by more than 5 %
    (fidelity_archetypes.py over 800 cases: 285, the DES against itself 87; fast.md,
    "One consumer beside one neighbour"), and half on this short set; throughput
    agrees."""
    rows = [r for case in archetype_cases(40, seed=1, packets=6000) for r in compare(case)
            if r["transmission"] == "t0"]
    interrupts = np.array([r["errors"]["interrupts"] for r in rows])
    throughput = np.array([r["errors"]["throughput"] for r in rows])
    assert np.median(interrupts) <= 0.08 and np.percentile(interrupts, 75) <= 0.2
    assert np.median(throughput) <= 0.01 and np.percentile(throughput, 90) <= 0.05


def test_watermarks_above_a_burst_agree() -> None:
    """benchmarks/fidelity.py --bursts: onoff alone on a core, a watermark above a burst.
    Before the ninth session's burst groups the interrupts' p95 was 67 % and throughput's
    127 % on 300 such cases; now both p95 are within 5 % on every seed tried (the rest:
    groups that start mid-burst drift, fast.md)."""
    cases = burst_watermark_cases(60, seed=3)
    for case in cases:
        t, setting = case.raw["transmissions"][0], case.settings["t0"]
        assert t["arrival"] == "onoff"
        assert setting["watermark"] > t["rate"] * (t["onoff"]["on"] + t["onoff"]["off"])
    rows = [r for case in cases for r in compare(case)]
    for metric in ("throughput", "interrupts"):
        median, p95 = stats([r["errors"][metric] for r in rows])
        assert median <= 0.02 and p95 <= 0.05, (metric, median, p95)


def test_on_defaults_runs_every_transmission_on_pfring_s_default() -> None:
    """benchmarks/fidelity.py --defaults: the same configs on their default setting, and
    `ends_on_timeout` tells a transfer whose last packets waited for the timeout (a
    100-packet transfer below the watermark of 128 always does) from one that did not."""
    cases = on_defaults(nic_pair_cases(4, seed=2, packets=2000))
    few = on_defaults([replace(nic_pair_cases(1, seed=2, packets=200)[0], name="few")])
    for case in cases + few:
        config = case.config()
        for t, s in case.nic_settings(config).items():
            assert s == config.default_setting(config.transmission(t))
    rows = [r for case in cases + few for r in compare(case)]
    assert all(ends_on_timeout(r["after_arrivals_s"][run], 0.5) for r in rows
               if r["case"] == "few" for run in ("des", "fast"))
    # (half a timeout to one and a half after the last arrival; longer is a backlog)
    assert [ends_on_timeout(after, 0.5) for after in (0.01, 0.3, 0.7, 1.0)] == [
        False, True, True, False]
    assert not ends_on_timeout(0.3, 0.0) and not ends_on_timeout(0.3, None)
    noise = compare(cases[0], noise=True)
    assert [r["des"] for r in noise] == [r["des"] for r in compare(cases[0])]
    assert {r["fast"]["engine"] for r in noise} == {"des"}  # (a second DES run, seed 1)


def test_slower_cores_scale_every_cpu_cost_and_nothing_else() -> None:
    case = random_cases(1, seed=4, packets=500)[0]
    config = case.config()
    slow = slower_cores(config, 1.25)
    for name, host in config.hosts.items():
        for cost in ("irq", "per_packet", "per_byte", "poll_check"):
            assert getattr(slow.hosts[name].costs, cost) == pytest.approx(
                1.25 * getattr(host.costs, cost))
        assert replace(slow.hosts[name], costs=host.costs) == host
    assert slow.nics == config.nics and slow.transmissions == config.transmissions
    with pytest.raises(ValueError, match="positive"):
        slower_cores(config, 0.0)


def test_the_des_on_slower_cores_keeps_its_arrivals() -> None:
    """`compare(noise=True, slower=f)`: the second DES run has the same seed (the same
    arrivals) on cores f times slower, so a consumer that keeps up delivers the same
    packets for f times the CPU."""
    raw = {"hosts": {"h": {"cores": 1, "costs": {"irq": 2e-6, "per_packet": 0.5e-6}}},
           "nics": {"n0": {"host": "h", "link": "10Gbit/s"}},
           "transmissions": [{"id": "t0", "nic": "n0", "size": 3000 * 1000,
                              "packet_size": 1000, "rate": 50_000, "arrival": "poisson"}]}
    case = Case(name="light", kind="single", raw=raw,
                settings={"t0": {"mode": "active_wait", "ring_slots": 1024}})
    (row,) = compare(case, noise=True, slower=1.02)
    (base,) = compare(case)
    assert row["des"] == base["des"] and row["fast"]["engine"] == "des"
    assert row["fast"]["packets_delivered"] == row["des"]["packets_delivered"] == 3000
    assert row["fast"]["cpu_busy_s"] == pytest.approx(1.02 * row["des"]["cpu_busy_s"])
    # the same arrivals, not seed 1's (whose span differs by 1.5 ms here)
    assert row["fast"]["duration_s"] == pytest.approx(row["des"]["duration_s"], abs=1e-5)
    assert row["after_arrivals_s"]["fast"] == pytest.approx(
        row["after_arrivals_s"]["des"], abs=1e-5)
    with pytest.raises(ValueError, match="noise=True"):
        compare(case, slower=1.02)


def test_band_error_is_the_distance_outside_the_des_s_range() -> None:
    assert band_error(105.0, 100.0, (100.0, 96.0, 110.0)) == 0.0
    assert band_error(120.0, 100.0, (100.0, 96.0, 110.0)) == pytest.approx(0.10)
    assert band_error(90.0, 100.0, (100.0, 96.0, 110.0)) == pytest.approx(0.06)
    assert band_error(3.0, 0.0, (0.0, 1.0)) == pytest.approx(2.0)  # (floor 1: small counts)


@pytest.mark.parametrize(("grid", "name"), [(22, "case-165"), (25, "case-177"),
                                            (25, "case-429")])
def test_on_one_host_the_fast_engine_follows_the_des_over_an_edge(grid: int, name: str
                                                                   ) -> None:
    """`fidelity.py --condition`: wake-up counts that a core 1 % slower or faster moves by
    a quarter or more in the DES itself — passive_wait whose drains end near a tick, a
    watermark at the edge of catching up (fidelity grids 22 and 25). On one host with
    evenly spaced arrivals the fast engine follows the DES at all three speeds: there it
    takes the same ticks, not an average of them."""
    case = next(c for c in random_cases(500, seed=grid, packets=30_000) if c.name == name)
    counts = []
    for slower in (0.99, 1.0, 1.01):
        config = slower_cores(case.config(), slower)
        settings = case.nic_settings(config)
        (des,) = simulate(config, settings, engine="des", exact=True)
        (fast,) = simulate(config, settings, engine="fast")
        assert fast.interrupts == pytest.approx(des.interrupts, rel=0.01), slower
        counts.append(des.interrupts)
    assert max(counts) > 1.25 * min(counts), counts  # (the edge is there)
