"""The plan's flags: when the engines disagree enough to warn about it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nictune.cli import main
from nictune.model import NicSetting, load_config
from nictune.optimizer.export import _disagreements, _latency_bound, _timeout_tail
from nictune.simulator import simulate
from nictune.simulator.des import after_arrivals
from nictune.simulator.metrics import Metrics


@pytest.fixture
def metrics(small_config: Path) -> Metrics:
    config = load_config(small_config)
    return simulate(config, {"a": NicSetting("watermark", watermark=64)}, engine="fast")[0]


def test_throughput_and_interrupts_off_by_more_than_5_percent_are_flagged(
        metrics: Metrics) -> None:
    des = replace(metrics, interrupts=1000.0)
    assert _disagreements("default", replace(des, interrupts=1040.0), des) == []
    slower = replace(des, interrupts=1100.0, throughput_bps=des.throughput_bps * 0.9)
    flags = _disagreements("optimized", slower, des)
    assert [f.split()[:3] for f in flags] == [
        ["engines_disagree:", "optimized", "throughput_bps"],
        ["engines_disagree:", "optimized", "interrupts"]]


def test_interrupts_below_one_per_10000_packets_are_not_a_disagreement(
        metrics: Metrics) -> None:
    """A consumer that hardly wakes: 1 vs 29 wake-ups in 4 million packets is one
    prediction; 1 vs 500 is not."""
    des = replace(metrics, packets_offered=4_000_000, interrupts=29.0)
    assert _disagreements("default", replace(des, interrupts=1.0), des) == []
    des = replace(des, interrupts=500.0)
    assert len(_disagreements("default", replace(des, interrupts=1.0), des)) == 1


def test_a_plan_past_max_latency_p99_in_the_des_is_flagged(metrics: Metrics) -> None:
    des = replace(metrics, latency_p99_s=6e-3)
    assert _latency_bound(None, des) == []
    assert _latency_bound(10e-3, des) == []
    flags = _latency_bound(5e-3, des)
    assert len(flags) == 1 and flags[0].startswith("latency_bound:")
    assert "6 ms" in flags[0] and "5 ms" in flags[0]


SHORT = ("hosts:\n  h: {cores: 1, costs: {irq: 4us, per_packet: 0.6us, per_byte: 0.1ns}}\n"
         "nics:\n  n0: {host: h, link: 10Gbit/s}\n  n1: {host: h, link: 10Gbit/s}\n"
         "transmissions:\n"
         "  - {id: a, nic: n0, size: 3MB, packet_size: 1000, rate: 300000, arrival: cbr}\n")


def test_a_transfer_that_ends_on_its_watermark_timeout_is_flagged(tmp_path: Path) -> None:
    """3 000 packets in 10 ms on PF_RING's default: the last ones below the watermark
    wait 0.5 s for the timeout in the DES. Not a timeout's: a wait under half of it, or
    far over it (a backlog draining), or 5 % of the duration or less."""
    (tmp_path / "short.yaml").write_text(SHORT)
    config = load_config(tmp_path / "short.yaml")
    default = config.default_setting(config.transmissions[0])
    (m,) = simulate(config, {"a": default}, engine="des")
    (flag,) = _timeout_tail("default", config, 0, [default], [m])[0]
    after = after_arrivals(config, config.transmissions[0], m, 0)
    assert 0.49 < after < 0.51 and flag.startswith("timeout_tail: the default setting ends")
    assert "500 ms watermark timeout: 98 %" in flag and "shared core" not in flag
    span = m.duration_s - after
    for duration in (span + 0.1, span + 2.0):
        assert _timeout_tail("default", config, 0, [default], [replace(m, duration_s=duration)]
                             ) == [[]]
    busy = NicSetting("busy_poll")
    assert _timeout_tail("optimized", config, 0, [busy], [m]) == [[]]


def test_the_timeout_tail_flag_says_a_shared_core_makes_it_a_coin_flip(tmp_path: Path) -> None:
    (tmp_path / "two.yaml").write_text(
        SHORT + "  - {id: b, nic: n1, size: 1MB, packet_size: 500, rate: 100000, "
        "arrival: poisson}\n")
    config = load_config(tmp_path / "two.yaml")
    settings = [config.default_setting(t) for t in config.transmissions]
    runs = simulate(config, dict(zip("ab", settings, strict=True)), engine="des")
    flags = _timeout_tail("default", config, 0, settings, runs)
    assert flags[0] and "on this shared core whether they wait can change" in flags[0][0]


def test_optimize_flags_a_default_that_waits_for_its_timeout(tmp_path: Path) -> None:
    """A 3 000-packet transfer of a few ms: on PF_RING's default its last packets wait
    0.5 s for the timeout in the DES, and the plan says so."""
    config = tmp_path / "short.yaml"
    config.write_text(SHORT)
    assert main(["optimize", str(config), "--out", str(tmp_path / "out"), "--population",
                 "8", "--generations", "1", "--json"]) == 0
    plan = (tmp_path / "out" / "plan.yaml").read_text()
    assert "timeout_tail: the default setting" in plan
