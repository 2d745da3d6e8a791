"""The plan's flags: when the engines disagree enough to warn about it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nictune.model import NicSetting, load_config
from nictune.optimizer.export import _disagreements, _latency_bound
from nictune.simulator import simulate
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
