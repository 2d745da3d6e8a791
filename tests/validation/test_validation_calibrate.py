"""The calibration fit on synthetic sweeps with known costs: what it recovers, which sweeps
it refuses (they cannot tell the coefficients apart), and what it flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from nictune.deploy.inventory import HostInventory, Inventory, InventoryError
from nictune.errors import RunError
from nictune.model import Costs, NicSetting
from nictune.validation import calibrate

BLOCKING = ("active_wait", "passive_wait", "watermark")
TRUTH = {"irq": 5e-6, "per_packet": 2e-6, "per_byte": 0.5e-9}


def _sweep(modes: tuple[str, ...] = BLOCKING, sizes: tuple[int, ...] = (200, 1400),
           rates: tuple[int, ...] = (2000, 5000, 10000), costs: dict[str, float] = TRUTH,
           per_run: float = 0.02, noise: float = 0.02, seed: int = 0) -> list[dict]:
    """One-second points with the wake-ups each mode makes (passive_wait: a 1 ms timer;
    watermark: every 32 packets) and CPU = costs + a per-run constant, times 1 + noise."""
    rng = np.random.default_rng(seed)
    points = []
    for mode in modes:
        for size in sizes:
            for n in rates:
                wakeups = {"active_wait": n, "passive_wait": 1000, "watermark": n / 32,
                           "busy_poll": 0}[mode]
                cpu = (costs["irq"] * wakeups + costs["per_packet"] * n
                       + costs["per_byte"] * n * size + per_run)
                points.append({"mode": mode, "wakeups": wakeups, "packets_received": n,
                               "bytes_received": n * size,
                               "cpu_s": cpu * (1 + noise * rng.standard_normal())})
    return points


@pytest.mark.parametrize("modes", [BLOCKING, ("passive_wait", "watermark"),
                                   ("active_wait", "watermark")])
def test_fit_recovers_known_costs(modes: tuple[str, ...]) -> None:
    f = calibrate.fit(_sweep(modes))
    for key, value in TRUTH.items():
        assert f[key] == pytest.approx(value, rel=0.15), key
    assert f["per_run_s"] == pytest.approx(0.02, rel=0.05)
    assert f["r2"] > 0.99 and f["condition"] < 10 and f["warnings"] == []


@pytest.mark.parametrize("sweep, mixed", [
    ({"sizes": (1400,)}, "packets and bytes"),  # bytes = 1400 · packets
    ({"modes": ("active_wait",)}, "wake-ups and packets"),  # one wake-up per packet
    ({"rates": (5000,)}, "packets and the per-run constant"),  # the same count everywhere
    ({"modes": ("passive_wait",)}, "wake-ups and the per-run constant"),  # 1000 per second
    ({"sizes": (1400, 1420)}, "packets and bytes"),  # told apart only by the noise
])
def test_fit_refuses_points_that_cannot_tell_costs_apart(sweep: dict, mixed: str) -> None:
    with pytest.raises(RunError, match=f"cannot tell the costs of {mixed} apart"):
        calibrate.fit(_sweep(**sweep))


def test_busy_poll_only_has_no_points_to_fit() -> None:
    with pytest.raises(RunError, match="got 0"):
        calibrate.fit(_sweep(("busy_poll",)))


def test_a_fit_that_charges_no_cost_is_refused() -> None:
    """CPU that falls with load (here: noise around a constant) leaves all to the constant;
    a profile of zero costs would simulate no CPU."""
    points = _sweep(costs=dict.fromkeys(TRUTH, 0.0), noise=0.0)
    for p in points:
        p["cpu_s"] -= 1e-7 * p["packets_received"]
    with pytest.raises(RunError, match="charges nothing to wake-ups, packets or bytes"):
        calibrate.fit(points)


def test_a_fit_that_charges_nothing_to_packets_is_refused() -> None:
    """Wake-ups cost, packets and bytes fitted as 0: no config takes that profile (the
    models need work per packet), and calibrate ended on a config error about
    '<calibration point>' instead of saying what the fit found."""
    points = _sweep(costs={**TRUTH, "per_packet": 0.0, "per_byte": 0.0}, noise=0.0)
    for p in points:  # (CPU that falls a little with the packets: both at their bound, 0)
        p["cpu_s"] -= 1e-9 * (p["packets_received"] + p["bytes_received"])
    with pytest.raises(RunError, match="charges nothing to packets or bytes"):
        calibrate.fit(points)


def test_zero_costs_and_low_r2_are_flagged_in_the_profile(tmp_path: Path) -> None:
    """Short runs on a host that copies for free: noise around the per-run constant."""
    f = calibrate.fit(_sweep(costs={**TRUTH, "per_byte": 0.0}, per_run=0.2, noise=0.1,
                             seed=5))
    assert f["per_byte"] == 0 and f["r2"] < calibrate.MIN_R2
    assert [w.split(":")[0] for w in f["warnings"]] == [
        "per_byte fitted as 0", f"R² {f['r2']:.3g} < 0.5"]
    errors = dict.fromkeys(("throughput_bps", "wakeups", "cpu_s"))
    result = {"sender": "s", "receiver": "r", "nic": "n", "iface": "eth0", "fit": f,
              "costs": {k: f[k] for k in TRUTH}, "error_before": errors,
              "error_after": errors, "points": []}
    calibrate.write_profile(result, tmp_path / "p.yaml")
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["fit"]["warnings"] == f["warnings"]
    assert "  warning: R² " in calibrate.summary(result)
    # an undefined figure anywhere in the fit is written as null, never as .nan
    result["fit"] = {**f, "r2": float("nan")}
    result["error_after"] = {**errors, "cpu_s": float("nan")}
    calibrate.write_profile(result, tmp_path / "p.yaml")
    fit = yaml.safe_load((tmp_path / "p.yaml").read_text())["fit"]
    assert fit["r2"] is None and fit["error_after"]["cpu_s"] is None


def test_a_free_running_block_timer_is_averaged_over_its_phase() -> None:
    """Linux 6.18's TPACKET_V3 block timer ticks freely: the last partial block waits
    0..τ after the last packet (a mean of τ/2), not τ after the block's first packet.
    5 714 packets of 1 400 B at 2 500/s with W = 130 and τ = 500 ms: 124 packets in the
    last block, so τ after its first packet is 451 ms after the last one."""
    setting = NicSetting("watermark", watermark=128, watermark_timeout=0.5, ring_slots=4096)
    ring = {"ring": "tpacket_v3", "packets_per_block": 130, "block_timeout_ms": 500}
    point = {"arrival_rate_pps": 2500.0, "packet_size": 1400, "packets_received": 5714,
             "ring": ring}
    pfring = calibrate.predict(Costs(), point, setting)
    free = calibrate.predict(Costs(), {**point, "ring": {**ring, "block_timer": "free-running"}},
                             setting)
    span = 5713 / 2500
    assert 8 * 5714 * 1400 / pfring["throughput_bps"] == pytest.approx(span + 0.451, abs=0.005)
    assert 8 * 5714 * 1400 / free["throughput_bps"] < span + 0.3  # a mean wait of ~0.25 s
    assert free["wakeups"] > pfring["wakeups"]  # ticks in mid-stream retire partial blocks
    assert calibrate.realized(setting, {**ring, "block_timeout_ms": 1}).watermark_timeout == 0.001
    # the agent says when the ring (and its timer) started: ticks at 0.4 + 0.5 k s after
    # the first arrival, so the last block retires at 2.4 s
    known = calibrate.predict(Costs(), {**point, "first_arrival": 100.0, "ring": {
        **ring, "block_timer": "free-running", "block_timer_start": 99.9}}, setting)
    assert 8 * 5714 * 1400 / known["throughput_bps"] == pytest.approx(2.4, abs=0.002)


def test_an_unknown_nic_names_the_inventory_file() -> None:
    """Every inventory error names its file; `--nic zz` named only the host."""
    hosts = {n: HostInventory(n, "192.0.2.1" if n == "tx" else "192.0.2.2",
                              nics={"nic-1": "eth1"}) for n in ("tx", "rx")}
    inventory = Inventory(hosts=hosts, path=Path("lab/inventory.yaml"))
    with pytest.raises(InventoryError, match=r"^lab/inventory\.yaml: host rx: no nic 'zz'"):
        calibrate.calibrate(inventory, "tx", "rx", calibrate.Options(nic="zz"))
