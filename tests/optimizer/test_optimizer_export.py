"""The plan's flags: when the engines disagree enough to warn about it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nictune.cli import main
from nictune.model import NicSetting, load_config
from nictune.optimizer.export import _disagreements, _latency_bound, _timeout_tail
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


def test_a_transfer_that_ends_on_its_watermark_timeout_is_flagged(metrics: Metrics) -> None:
    """The last packets below the watermark waited for the 0.5 s timeout: the transfer
    ended at least half of it after its last arrival (40 ms here)."""
    default = NicSetting("watermark", watermark=128, watermark_timeout=0.5)
    tail = replace(metrics, duration_s=0.53)
    flags = _timeout_tail("default", 0.04, default, tail)
    assert len(flags) == 1 and flags[0].startswith("timeout_tail: the default setting")
    assert "490 ms" in flags[0] and "500 ms" in flags[0] and "92 %" in flags[0]
    assert _timeout_tail("default", 0.04, default, replace(metrics, duration_s=0.2)) == []
    # (a wait of 0.5 s at the end of a 20 s transfer is 2.4 % of it: not flagged)
    assert _timeout_tail("default", 20.0, default, replace(metrics, duration_s=20.49)) == []
    assert _timeout_tail("optimized", 0.04, NicSetting("busy_poll"), tail) == []
    assert _timeout_tail("optimized", 0.04, replace(default, watermark_timeout=0.0), tail) == []


def test_optimize_flags_a_default_that_waits_for_its_timeout(tmp_path: Path) -> None:
    """A 3 000-packet transfer of a few ms: on PF_RING's default its last packets wait
    0.5 s for the timeout in the DES, and the plan says so."""
    config = tmp_path / "short.yaml"
    config.write_text(
        "hosts:\n  h: {cores: 1, costs: {irq: 4us, per_packet: 0.6us, per_byte: 0.1ns}}\n"
        "nics:\n  n0: {host: h, link: 10Gbit/s}\n"
        "transmissions:\n"
        "  - {id: a, nic: n0, size: 3MB, packet_size: 1000, rate: 300000, arrival: cbr}\n")
    assert main(["optimize", str(config), "--out", str(tmp_path / "out"), "--population",
                 "8", "--generations", "1", "--json"]) == 0
    plan = (tmp_path / "out" / "plan.yaml").read_text()
    assert "timeout_tail: the default setting" in plan
