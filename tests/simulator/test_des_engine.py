"""The DES engine reproduces the rules of docs/model.md."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from nictune.errors import InputError
from nictune.model import NicSetting, parse_config
from nictune.simulator import arrivals, des, simulate
from nictune.simulator.arrivals import ArrivalStream, arrival_times

IRQ, PER_PACKET, PER_BYTE = 4e-6, 0.6e-6, 0.25e-9

SETTINGS = {
    "active_wait": NicSetting("active_wait"),
    "passive_wait": NicSetting("passive_wait", poll_interval=100e-6),
    "watermark": NicSetting("watermark", watermark=64, watermark_timeout=1e-3),
    "watermark_no_timeout": NicSetting("watermark", watermark=100, watermark_timeout=0.0),
    "busy_poll": NicSetting("busy_poll"),
}


def config(packets: int = 20_000, rate: Any = "100kpps", arrival: str = "poisson",
           size: int = 1000, per_byte: Any = "0.25ns", backlog: int = 1000, extra: int = 0,
           **host: Any):
    """One host, one 10G NIC per transmission, `1 + extra` transmissions t0, t1, ..."""
    costs = {"irq": "4us", "per_packet": "0.6us", "per_byte": per_byte, "poll_check": "0.05us"}
    nics = {f"n{i}": {"host": "h", "link": "10Gbit/s"} for i in range(1 + extra)}
    return parse_config({
        "hosts": {"h": {"cores": 4, "costs": costs, "backlog_slots": backlog,
                        "power": {"nic_idle": "10W", "core_busy": "15W"}, **host}},
        "nics": nics,
        "transmissions": [{"id": f"t{i}", "nic": f"n{i}", "size": packets * size,
                           "packet_size": size, "rate": rate, "arrival": arrival}
                          for i in range(1 + extra)],
    }, "test.yaml")


def run(setting: NicSetting, **kw: Any):
    cfg = config(**{k: v for k, v in kw.items() if k not in ("exact", "seed", "vectorised")})
    return des.simulate(cfg, {"t0": setting}, exact=kw.get("exact", True),
                        seed=kw.get("seed", 0), vectorised=kw.get("vectorised", True))[0]


def conserved(m) -> bool:
    return m.packets_offered == m.packets_delivered + m.packets_dropped + m.packets_stranded


@pytest.mark.parametrize("arrival", ["cbr", "poisson", "onoff"])
@pytest.mark.parametrize("mode", list(SETTINGS))
@pytest.mark.parametrize(("rate", "ring"), [("100kpps", 4096), ("2Mpps", 64)])
def test_conservation_every_mode(mode, arrival, rate, ring):
    s = replace(SETTINGS[mode], ring_slots=ring)
    if s.watermark:
        s = replace(s, watermark=min(s.watermark, ring // 2))
    m = run(s, packets=5000, rate=rate, arrival=arrival, backlog=100)
    assert conserved(m)
    assert m.packets_delivered > 0
    assert m.bytes_delivered == m.packets_delivered * 1000
    if rate == "2Mpps":  # beyond what one core can take: the ring (or backlog) overflows
        assert m.packets_dropped > 0
    assert m.energy_j == pytest.approx(10 * m.duration_s + 15 * m.cpu_busy_s)
    assert m.throughput_bps == pytest.approx(8 * m.bytes_delivered / m.duration_s)


def test_active_wait_one_interrupt_per_packet_below_saturation():
    m = run(SETTINGS["active_wait"], packets=20_000, rate="100kpps")
    assert m.interrupts == m.packets_offered == m.packets_delivered == 20_000
    assert m.empty_wakeups == 0
    w = PER_PACKET + 1000 * PER_BYTE
    assert m.cpu_busy_s == pytest.approx(20_000 * (IRQ + w))
    assert m.latency_p99_s >= IRQ + w


def test_passive_wait_interrupts_follow_the_timer():
    for interval in (50e-6, 200e-6, 1e-3):
        m = run(NicSetting("passive_wait", poll_interval=interval), packets=50_000,
                rate="200kpps")
        assert m.packets_delivered == 50_000
        assert m.interrupts == pytest.approx(m.duration_s / interval, rel=0.01)
        assert m.latency_p99_s <= interval + IRQ + 2 * interval * 200e3 * 1e-6


def test_passive_wait_counts_empty_wakeups_at_low_rate():
    m = run(NicSetting("passive_wait", poll_interval=20e-6), packets=2000, rate="5kpps")
    assert m.interrupts == pytest.approx(m.duration_s / 20e-6, rel=0.01)
    assert m.empty_wakeups == pytest.approx(m.interrupts - 2000, rel=0.01)


@pytest.mark.parametrize(("n", "w"), [(10_000, 100), (10_050, 100), (9_999, 64), (777, 7)])
def test_watermark_without_timeout_strands_the_remainder(n, w):
    m = run(NicSetting("watermark", watermark=w, watermark_timeout=0.0), packets=n,
            rate="10kpps", arrival="cbr")
    assert m.interrupts == n // w
    assert m.packets_stranded == n % w
    assert m.packets_delivered == n - n % w
    assert m.empty_wakeups == 0


def test_watermark_timeout_flushes_the_tail():
    """A watermark of 100 at 10 kpps fills in 10 ms; the 20 ms timeout only flushes the tail,
    a 2 ms timeout fires first every time (first packet + 2 ms: 21 packets queued)."""
    m = run(NicSetting("watermark", watermark=100, watermark_timeout=20e-3), packets=10_050,
            rate="10kpps", arrival="cbr")
    assert m.packets_stranded == 0 and m.packets_delivered == 10_050
    assert m.interrupts == 101
    assert m.duration_s == pytest.approx(10_049e-4 - 49e-4 + 20e-3 + IRQ + 50 * 0.85e-6)
    m = run(NicSetting("watermark", watermark=100, watermark_timeout=2.05e-3), packets=10_500,
            rate="10kpps", arrival="cbr")
    assert m.interrupts == 10_500 / 21 and m.packets_delivered == 10_500



def test_a_free_running_timeout_wakes_at_its_ticks():
    """Linux 6.18's TPACKET_V3 block timer: a batch ends at the timer's next tick, not τ
    after its first packet. W = 1 000 never fills at 10 kpps in 20 ms; ticks at
    (0.27 + k)·20 ms wake the consumer from 5.4 ms to 1 005.4 ms, the first tick after the
    last packet (1 004.9 ms), which is when the last batch of ~193 packets starts."""
    cfg = config(packets=10_050, rate="10kpps", arrival="cbr")
    s = NicSetting("watermark", watermark=1000, watermark_timeout=20e-3)
    m = des.simulate(cfg, {"t0": s}, exact=True, timer_phase=0.27)[0]
    assert m.interrupts == 51 and m.packets_delivered == 10_050
    assert 1005.4e-3 + IRQ + 190 * 0.85e-6 < m.duration_s < 1005.4e-3 + IRQ + 196 * 0.85e-6
    pfring = des.simulate(cfg, {"t0": s}, exact=True)[0]  # τ after each batch's first
    assert pfring.interrupts == 50 and pfring.duration_s > m.duration_s + 4e-3


@pytest.mark.parametrize("phase", [0.2, 0.4, 0.6, 0.8])
def test_a_free_running_tick_on_an_arrival_ends_the_run(phase):
    """Arrivals every 8 ms fall on 5 ms ticks, and (k + φ)·τ can round one float step
    below the arrival: with no interrupt cost to cover that, the consumer woke before its
    packet and slept again at the same tick, forever (a review's find)."""
    cfg = parse_config({
        "hosts": {"h": {"cores": 1, "costs": {"irq": 0, "per_packet": "1us", "per_byte": 0}}},
        "nics": {"n": {"host": "h", "link": "10Gbit/s"}},
        "transmissions": [{"id": "t0", "nic": "n", "size": 200 * 1000, "packet_size": 1000,
                           "rate": "125pps", "arrival": "cbr"}]}, "test.yaml")
    s = NicSetting("watermark", watermark=1000, watermark_timeout=5e-3)
    m = des.simulate(cfg, {"t0": s}, exact=True, timer_phase=phase)[0]
    assert m.packets_delivered == 200 and m.interrupts == 200


def test_timer_phase_is_for_exact_runs_in_0_1():
    s = NicSetting("watermark", watermark=64, watermark_timeout=1e-3)
    for phase, exact in ((1.0, True), (-0.1, True), (0.5, False)):
        with pytest.raises(InputError, match="timer_phase"):
            des.simulate(config(packets=100), {"t0": s}, exact=exact, timer_phase=phase)

def test_busy_poll_has_no_interrupts_and_a_busy_core():
    m = run(SETTINGS["busy_poll"], packets=20_000, rate="100kpps")
    assert m.interrupts == 0 and m.empty_wakeups == 0
    assert m.cpu_util == pytest.approx(1.0)
    assert m.cpu_busy_s == pytest.approx(m.duration_s)
    w = PER_PACKET + 1000 * PER_BYTE
    assert m.latency_mean_s == pytest.approx(0.025e-6 + w, rel=0.2)


def livelock(rate: float) -> float:
    return rate if rate <= 1 / (IRQ + PER_PACKET) else max(0.0, (1 - rate * IRQ) / PER_PACKET)


def test_receive_livelock_curve():
    """cbr, per_byte 0, ring large: delivered rate = λ up to 1/(Ti+Tp), then (1−λTi)/Tp."""
    knee = 1 / (IRQ + PER_PACKET)
    rates = [50e3, 100e3, 150e3, 200e3, 0.95 * knee, 1.03 * knee, 225e3, 235e3]
    assert sum(r > knee for r in rates) >= 3
    for rate in rates:
        m = run(NicSetting("active_wait", ring_slots=32768), packets=200_000, rate=rate,
                arrival="cbr", size=64, per_byte=0)
        delivered = m.packets_delivered / m.duration_s
        assert delivered == pytest.approx(livelock(rate), rel=0.05), rate
        assert (m.packets_dropped > 0) == (rate > knee)


def test_same_seed_same_result_other_seed_other_result():
    a = run(SETTINGS["passive_wait"], seed=7).to_json()
    assert run(SETTINGS["passive_wait"], seed=7).to_json() == a
    assert run(SETTINGS["passive_wait"], seed=8).to_json() != a


def test_window_extrapolates_within_2_percent_of_exact():
    cfg = config(packets=1_000_000, rate="300kpps")
    setting = {"t0": NicSetting("passive_wait", poll_interval=100e-6)}
    exact = des.simulate(cfg, setting, exact=True)[0]
    win = des.simulate(cfg, setting)[0]
    assert (win.window_packets, win.extrapolated) == (200_000, True)
    assert (exact.window_packets, exact.extrapolated) == (1_000_000, False)
    assert conserved(win)
    for key in ("packets_delivered", "duration_s", "throughput_bps", "interrupts",
                "cpu_busy_s", "energy_j", "latency_p99_s"):
        assert getattr(win, key) == pytest.approx(getattr(exact, key), rel=0.02), key


def test_window_scales_the_steady_state_not_the_end_effects():
    """Stranding (after the last wake-up) and the tail after the last arrival happen once:
    they are not multiplied by N/window. (A wake-up every 0.15 s: 20 000 packets hold the
    100 wake-ups a window needs at least.)"""
    cfg = config(packets=50_050, rate="1kpps", arrival="cbr")
    s = {"t0": NicSetting("watermark", watermark=150, watermark_timeout=0.0)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=20_000)[0]
    assert exact.packets_stranded == 50_050 % 150
    assert win.window_packets == 20_000
    assert win.packets_stranded == 20_000 % 150
    assert conserved(win)
    assert abs(win.duration_s - exact.duration_s) < 150 / 1e3  # stranded: < W arrivals
    assert win.throughput_bps == pytest.approx(exact.throughput_bps, rel=2e-3)
    s = {"t0": NicSetting("watermark", watermark=150, watermark_timeout=0.4)}
    exact, win = (des.simulate(cfg, s, window=w)[0] for w in (50_050, 20_000))
    # the tail (≤ 0.4 s) comes once; scaled with the window it would add ~0.6 s
    assert abs(win.duration_s - exact.duration_s) < 0.1


def test_an_onoff_window_ending_on_a_stranded_packet_keeps_its_last_pause():
    """An onoff window holds whole bursts and the next burst's first packet; below a
    watermark without timeout that packet is stranded after a whole pause, and the
    duration, measured to the last arrival, lost that pause (2.6 % too short in a
    review's case). 200 000 packets in bursts of 4 000 (10 ms on, 10 ms off)."""
    cfg = config(packets=200_000, rate="200kpps", arrival="onoff", size=64)
    s = {"t0": NicSetting("watermark", watermark=8, watermark_timeout=0.0)}
    exact, win = (des.simulate(cfg, s, exact=e, window=20_000)[0] for e in (True, False))
    assert win.window_packets == 40_001 and win.packets_stranded == 1
    assert exact.packets_stranded == 0
    assert win.duration_s == pytest.approx(exact.duration_s, rel=1e-3)
    assert win.throughput_bps == pytest.approx(exact.throughput_bps, rel=1e-3)


def test_window_holds_100_wake_ups_at_least():
    """A tick every 50 ms over a 20 s transmission: 100 ticks need 5 s of it, more than the
    window's 20 000 packets; a core cannot be made to simulate more than 20 windows."""
    assert des.window_fraction([200_000], 20_000, [0.05 / 20]) == pytest.approx(0.25)
    assert des.window_fraction([200_000], 20_000, [0.001 / 20]) == 0.1  # the packets'
    assert des.window_fraction([10_000_000], 20_000, [1.0]) == pytest.approx(0.04)
    cfg = config(packets=200_000, rate="10kpps", arrival="cbr")
    s = {"t0": NicSetting("passive_wait", poll_interval=0.05)}
    win = des.simulate(cfg, s, window=20_000)[0]
    assert win.window_packets == 50_000
    assert win.interrupts == pytest.approx(20.0 / 0.05, rel=0.01)


def test_window_counts_the_start_up_once():
    """The first tick, 1 ms in, finds 300 packets for 256 slots and drops 46; after it the
    drains keep the ring below 256. Scaled with the window (×20) those 46 would be 920.
    (Interrupts and CPU scale whole: a start-up's few extra wake-ups are noise.)"""
    cfg = config(packets=400_000, rate="300kpps", arrival="cbr")
    s = {"t0": NicSetting("passive_wait", poll_interval=1e-3, ring_slots=256)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=20_000)[0]
    assert win.extrapolated and conserved(win)
    assert 0 < exact.packets_dropped < 100
    assert win.packets_dropped == pytest.approx(exact.packets_dropped, abs=2)
    for key in ("interrupts", "cpu_busy_s", "throughput_bps"):
        assert getattr(win, key) == pytest.approx(getattr(exact, key), rel=0.01), key


def test_window_counts_a_late_starters_start_up_once(monkeypatch):
    """t1 starts 1 s after t0 on the same core: its own first tick drops too, once; scaled
    with the window (×20) it said 5 120 lost against 4 532 exactly. (t0's count, with the
    change of phase when t1 joins scaled like the rest, is 16 % low: 3 806 vs 4 510; its
    drops begin late, so the window is made longer — kept as it is here, to check the
    window's own counting.)"""
    monkeypatch.setattr(des, "WINDOW_GROWTHS", 0)
    cfg = config(packets=600_000, rate="300kpps", arrival="cbr", extra=1)
    cfg = replace(cfg, transmissions=[cfg.transmissions[0],
                                      replace(cfg.transmissions[1], start=1.0)])
    s = NicSetting("passive_wait", poll_interval=1e-3, ring_slots=256)
    exact = des.simulate(cfg, {"t0": s, "t1": s}, exact=True)[1]
    win = des.simulate(cfg, {"t0": s, "t1": s}, window=20_000)[1]
    assert win.extrapolated and conserved(win)
    assert win.packets_dropped == pytest.approx(exact.packets_dropped, rel=0.1)
    assert win.interrupts == pytest.approx(exact.interrupts, rel=0.01)


def test_a_short_transmission_beside_a_long_one_keeps_its_packets():
    """10 packets beside 10⁷ on one core: the core's factor left it one packet, stretched
    to a throughput ten times its offered rate (and 10 wake-ups for 90)."""
    cfg = config(packets=10, rate="100pps", arrival="cbr", extra=1)
    big = replace(cfg.transmissions[1], size=10_000_000 * 1000, rate=100_000.0)
    cfg = replace(cfg, transmissions=[cfg.transmissions[0], big])
    s = NicSetting("passive_wait", poll_interval=1e-3)
    tiny = des.simulate(cfg, {"t0": s, "t1": s})[0]
    alone = des.simulate(config(packets=10, rate="100pps", arrival="cbr"), {"t0": s},
                         exact=True)[0]
    assert (tiny.window_packets, tiny.extrapolated) == (10, False)
    assert tiny.throughput_bps == pytest.approx(alone.throughput_bps, rel=0.02)
    assert tiny.interrupts == alone.interrupts == 90


def test_a_watermark_window_holds_16_watermarks():
    """W = 2 048 of 300 000 packets beside a long neighbour: a window of 1 200 packets
    never filled the watermark (every packet stranded, throughput 0)."""
    cfg = config(packets=300_000, rate="10kpps", arrival="cbr", extra=1)
    big = replace(cfg.transmissions[1], size=10**9 * 1000, rate=100_000.0)
    cfg = replace(cfg, transmissions=[cfg.transmissions[0], big])
    s = {"t0": NicSetting("watermark", watermark=2048, watermark_timeout=0.0, ring_slots=4096),
         "t1": NicSetting("passive_wait", poll_interval=1e-3)}
    assert des.window_fraction([300_000, 10**9], 200_000, [0.2 / 30, 1e-3 / 1e4]) * 300_000 \
        < 2048
    m = des.simulate(cfg, s)[0]
    assert m.window_packets == 16 * 2048 and m.extrapolated and conserved(m)
    assert m.packets_stranded < 2048
    assert m.interrupts == pytest.approx(300_000 / 2048, rel=0.02)  # (stranded don't scale)


def test_an_exact_run_too_large_for_memory_is_refused_before_it_starts():
    cfg = config(packets=60_000_000, rate="10Mpps", arrival="cbr", extra=1)
    s = NicSetting("busy_poll")
    with pytest.raises(InputError, match=r"core 0 of host h takes 120,000,000 packets"):
        des.simulate(cfg, {"t0": s, "t1": s}, exact=True)


def test_a_livelocked_window_counts_its_tail_once():
    """Past livelock nothing is delivered while packets arrive: the ring and backlog are
    served after the last arrival, once. Scaled with the window (×10) the DES said 10×
    the deliveries, 1.8× the interrupts and a core 180 % busy."""
    cfg = config(packets=200_000, rate="400kpps", arrival="cbr", size=64, per_byte=0)
    s = {"t0": NicSetting("active_wait", ring_slots=2048)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=20_000)[0]
    assert win.extrapolated and conserved(win) and win.cpu_util <= 1.0
    assert exact.packets_delivered < 0.02 * exact.packets_offered
    assert win.packets_delivered == pytest.approx(exact.packets_delivered, rel=0.05)
    for key in ("interrupts", "cpu_busy_s", "duration_s"):
        assert getattr(win, key) == pytest.approx(getattr(exact, key), rel=0.02), key


@pytest.mark.parametrize("mode", ["busy_poll", "passive_wait"])
def test_a_window_that_fills_its_ring_late_is_not_taken_as_steady(mode):
    """A core 10 % past its capacity (1 µs a packet) fills a 1 024-slot ring over the first
    10 000 packets, half the window: the window is simulated longer (×4 while its drops
    began late or its queue still grew), and the packets beyond it drop at the rate after
    the ring filled (scaled whole, drops were 19 % low and throughput above capacity)."""
    cfg = config(packets=400_000, rate="1.1Mpps", arrival="cbr", size=64, per_byte=0)
    cfg = replace(cfg, hosts={"h": replace(cfg.hosts["h"], costs=replace(
        cfg.hosts["h"].costs, per_packet=1e-6))})
    setting = {"busy_poll": NicSetting("busy_poll", ring_slots=1024),
               "passive_wait": NicSetting("passive_wait", poll_interval=50e-6,
                                          ring_slots=1024)}[mode]
    exact = des.simulate(cfg, {"t0": setting}, exact=True)[0]
    win = des.simulate(cfg, {"t0": setting}, window=20_000)[0]
    assert win.window_packets == 80_000 and conserved(win)
    assert win.packets_dropped == pytest.approx(exact.packets_dropped, rel=0.01)
    assert win.throughput_bps == pytest.approx(exact.throughput_bps, rel=0.002)


def test_a_window_grows_only_within_its_packet_budget(monkeypatch):
    """The unsettled window of the test above would grow to 80 000 packets; with a budget
    of 50 000 per core it stays at its first 20 000 (memory bounded, not an error)."""
    cfg = config(packets=400_000, rate="1.1Mpps", arrival="cbr", size=64, per_byte=0)
    cfg = replace(cfg, hosts={"h": replace(cfg.hosts["h"], costs=replace(
        cfg.hosts["h"].costs, per_packet=1e-6))})
    monkeypatch.setattr(des, "GROWN_PACKETS", 50_000)
    win = des.simulate(cfg, {"t0": NicSetting("busy_poll", ring_slots=1024)}, window=20_000)[0]
    assert win.window_packets == 20_000 and conserved(win)


def test_an_onoff_windows_last_drain_is_one_of_many():
    """onoff bursts fill the ring and it drains after each: the drain after the window's
    last arrival is one of them, scaled with the rest (counted once, the window said 11 %
    fewer deliveries and 9 % fewer interrupts). A queue that never empties keeps its tail
    once (the livelock test above)."""
    cfg = config(packets=200_000, rate="229514pps", arrival="onoff", size=64, per_byte=0)
    cfg = replace(cfg, transmissions=[replace(cfg.transmissions[0], onoff_on=1e-3,
                                              onoff_off=10e-3)])
    s = {"t0": NicSetting("active_wait", ring_slots=1024)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=20_000)[0]
    for key in ("packets_delivered", "interrupts", "cpu_busy_s"):
        assert getattr(win, key) == pytest.approx(getattr(exact, key), rel=0.02), key


def test_a_window_inside_one_onoff_burst_keeps_the_pauses():
    """Bursts of 100 000 packets every second, 20 of them: a window of 50 000 lay inside
    the first, and scaling its spacing lost every pause (1.0 s for 19.5 s). The span of
    cbr and onoff arrivals is known exactly (only poisson's is estimated), and a window
    holds 10 bursts with their pauses at least (their empty ticks: the interrupts)."""
    cfg = config(packets=2_000_000, rate="100kpps", arrival="onoff")
    cfg = replace(cfg, transmissions=[replace(cfg.transmissions[0], onoff_on=0.5,
                                              onoff_off=0.5)])
    s = {"t0": NicSetting("passive_wait", poll_interval=100e-6)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=50_000)[0]
    # (whole bursts and the next one's first packet, its ticks scaled with the time: ending
    # on a burst's last packet, 9 pauses in 10 bursts made the empty ticks 5 % low; what
    # is left is the whole transmission's last burst, which has no pause: 20 bursts, 19
    # pauses, against 10 and 10)
    assert win.window_packets == 1_000_001 and exact.duration_s == pytest.approx(19.5, rel=0.01)
    for key in ("duration_s", "throughput_bps", "interrupts"):
        assert getattr(win, key) == pytest.approx(getattr(exact, key), rel=0.01), key
    assert win.empty_wakeups == pytest.approx(exact.empty_wakeups, rel=0.03)


def test_onoff_drops_alone_scale_over_whole_bursts():
    """busy_poll 10 % past its core in 40 bursts of 50 000 packets: the ring fills and
    drains in every burst, so the window's drops scale as they are — taken as one ring
    that filled once (the rate after its first drop), or with the first burst's counted
    once as a start-up, they came out 8 % high (review)."""
    on = 50_000 / 1.1e6
    cfg = config(packets=2_000_000, rate=f"{1.1e6 * on / (on + 0.5):.3f}pps",
                 arrival="onoff", size=64, per_byte=0)
    cfg = replace(cfg, hosts={"h": replace(cfg.hosts["h"], costs=replace(
        cfg.hosts["h"].costs, per_packet=1e-6))},
        transmissions=[replace(cfg.transmissions[0], onoff_on=on, onoff_off=0.5)])
    s = {"t0": NicSetting("busy_poll", ring_slots=4096)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s)[0]
    assert win.extrapolated
    assert win.packets_dropped == pytest.approx(exact.packets_dropped, rel=0.005)


def test_a_core_is_not_rerun_for_a_transmission_simulated_whole(monkeypatch):
    """100 packets at 2 Mpps beside 2 M packets of light passive_wait: the short one is
    simulated whole and its queue fills by nature; only extrapolated transmissions can
    make the core's window longer (the neighbour was re-run every packet for nothing)."""
    cfg = config(packets=2_000_000, rate="100kpps", arrival="cbr", extra=1)
    cfg = replace(cfg, transmissions=[replace(cfg.transmissions[0], size=100 * 1000,
                                              rate=2e6), cfg.transmissions[1]])
    s = NicSetting("passive_wait", poll_interval=100e-6)
    runs: list[list[int]] = []
    real = des.run_core
    monkeypatch.setattr(des, "run_core", lambda cs, *a, **k: (
        runs.append([c.n for c in cs]), real(cs, *a, **k))[1])
    des.simulate(cfg, {"t0": s, "t1": s}, window=20_000)
    assert len(runs) == 1


def test_busy_poll_far_past_capacity_serves_its_ring_once():
    """4 Mpps at 0.6 µs a packet: nearly everything is dropped, and the ring served after
    the last arrival comes once (scaled, the window said 12 % more deliveries and a
    throughput above the core's)."""
    cfg = config(packets=2_000_000, rate="4Mpps", arrival="cbr", size=64, per_byte=0)
    s = {"t0": NicSetting("busy_poll", ring_slots=4096)}
    exact = des.simulate(cfg, s, exact=True)[0]
    win = des.simulate(cfg, s, window=20_000)[0]
    assert win.extrapolated
    assert win.packets_delivered == pytest.approx(exact.packets_delivered, rel=0.002)


def test_window_fraction_shortens_a_cores_transmissions_alike():
    assert des.window_fraction([1_000_000], 200_000) == 0.2  # alone: the first window
    assert des.window_fraction([1_000, 5_000], 200_000) == 1.0  # all fit: exact
    # the shortest keeps a window, unless that is more than two windows per transmission
    assert des.window_fraction([400_000, 800_000], 200_000) == 0.5
    # (200 transmissions of 1 M: a window each would be 40 M packets; 20 M at most)
    assert des.window_fraction([1_000_000] * 200, 200_000) == pytest.approx(0.1)
    assert des.window_fraction([400_000, 10_000_000], 200_000) == pytest.approx(
        2 * 2 * 200_000 / 10_400_000)


def test_window_on_a_shared_core_keeps_its_phases():
    """t1 ends a tenth of the way into t0: both overload the core while t1 arrives, t0 then
    has it to itself. The windowed DES shortens both alike, so t0's drops and wake-ups
    come from both phases in the right proportion (the first 6 000 packets of each would
    see only the crowded start: t0 would drop ~15 % and wake ~10 times)."""
    cfg = config(packets=6_000, rate="700kpps", extra=1)
    cfg = replace(cfg, transmissions=[replace(cfg.transmissions[0], size=60_000 * 1000),
                                      cfg.transmissions[1]])
    s = NicSetting("passive_wait", poll_interval=50e-6, ring_slots=64)
    settings = {"t0": s, "t1": s}
    exact = des.simulate(cfg, settings, exact=True)
    win = des.simulate(cfg, settings, window=6_000)
    assert [m.window_packets for m in win] == [35_000, 3_500]  # 100 ticks of t1
    assert all(m.extrapolated and conserved(m) for m in win)
    drops = [[m.packets_dropped / m.packets_offered for m in r] for r in (exact, win)]
    assert drops[0][0] < 0.03 and drops[0][1] > 0.1  # the phases differ
    assert drops[1][0] == pytest.approx(drops[0][0], abs=0.004)
    assert drops[1][1] == pytest.approx(drops[0][1], abs=0.03)  # (by seed: 13.5-17.5 %)
    assert win[0].interrupts == pytest.approx(exact[0].interrupts, rel=0.05)
    assert win[0].throughput_bps == pytest.approx(exact[0].throughput_bps, rel=0.02)


@pytest.mark.parametrize("mode", list(SETTINGS))
@pytest.mark.parametrize("rate", ["150kpps", "900kpps"])
def test_fast_paths_change_nothing(mode, rate):
    """Vectorised drains and the solo paths agree with the per-packet event loop (costs
    with no common multiple, so no two events tie)."""
    s = replace(SETTINGS[mode], ring_slots=256)
    if mode == "passive_wait":
        s = replace(s, poll_interval=37.3e-6)
    kw = dict(packets=8000, rate=rate, backlog=100, per_byte="0.2371ns")
    a, b = run(s, **kw).to_json(), run(s, vectorised=False, **kw).to_json()
    for key, value in a.items():
        assert value == (pytest.approx(b[key], rel=1e-9) if isinstance(value, float)
                         else b[key]), key


def test_a_shared_core_is_shared():
    """Two transmissions on one core: each sees the other's interrupts and packet work."""
    cfg = config(packets=20_000, rate="300kpps", extra=1)
    alone = des.simulate(cfg, {"t0": NicSetting("active_wait")})[0]
    split = des.simulate(cfg, {"t0": NicSetting("active_wait"),
                               "t1": NicSetting("active_wait", irq_core=1)})
    shared = des.simulate(cfg, {"t0": NicSetting("active_wait"),
                                "t1": NicSetting("passive_wait", poll_interval=50e-6)})
    assert split[0].to_json() == alone.to_json()  # another core: no coupling
    assert all(conserved(m) for m in shared)
    assert shared[0].latency_mean_s > alone.latency_mean_s
    assert shared[0].cpu_busy_s + shared[1].cpu_busy_s <= max(m.duration_s for m in shared)
    v = des.simulate(cfg, {"t0": NicSetting("active_wait"),
                           "t1": NicSetting("passive_wait", poll_interval=50e-6)},
                     vectorised=False)
    assert [m.to_json() for m in v] == [m.to_json() for m in shared]


@pytest.mark.parametrize("rate", ["90kpps", "400kpps"])
def test_round_robin_drains_change_nothing(rate):
    """Several batched consumers on one core, partly saturated: the vectorised rounds equal
    the per-packet event loop."""
    cfg = config(packets=6000, rate=rate, extra=2, per_byte="0.2371ns")
    settings = {"t0": NicSetting("watermark", watermark=50, watermark_timeout=7.7e-5,
                                 ring_slots=200),
                "t1": NicSetting("passive_wait", poll_interval=41.3e-6, ring_slots=200),
                "t2": NicSetting("watermark", watermark=13, watermark_timeout=0.0)}
    a = [m.to_json() for m in des.simulate(cfg, settings)]
    b = [m.to_json() for m in des.simulate(cfg, settings, vectorised=False)]
    for x, y in zip(a, b, strict=True):
        for key, value in x.items():
            assert value == (pytest.approx(y[key], rel=1e-9) if isinstance(value, float)
                             else y[key]), key


SHARED_CORES = {
    "busy_poll pair beside a watermark": {
        "t0": NicSetting("busy_poll", ring_slots=64),
        "t1": NicSetting("busy_poll", ring_slots=64),
        "t2": NicSetting("watermark", watermark=40, watermark_timeout=9.1e-5, ring_slots=256)},
    "batched consumers taking turns": {
        "t0": NicSetting("watermark", watermark=50, watermark_timeout=7.7e-5, ring_slots=200),
        "t1": NicSetting("passive_wait", poll_interval=41.3e-6, ring_slots=200),
        "t2": NicSetting("passive_wait", poll_interval=29.9e-6, ring_slots=200)},
    "busy_poll beside passive_wait and active_wait": {
        "t0": NicSetting("busy_poll", ring_slots=32),
        "t1": NicSetting("passive_wait", poll_interval=23.7e-6, ring_slots=64),
        "t2": NicSetting("active_wait", ring_slots=64)},
}


@pytest.mark.parametrize("worth", [0, des.WORTH_COMPILING])
@pytest.mark.parametrize("arrival", ["cbr", "poisson"])
@pytest.mark.parametrize("rate", ["120kpps", "500kpps"])
@pytest.mark.parametrize("mix", list(SHARED_CORES))
def test_the_compiled_core_loop_changes_nothing(monkeypatch, mix, rate, arrival, worth):
    """A shared core's loop run by `core_loop` gives what `Core._advance` gives in Python,
    to the bit — interrupts preempting packets, round-robin turns, ring and backlog
    overflow, the hand-over to `_sleep` (at 500 kpps each the core
    saturates) — whether it runs every stretch (`worth` 0) or takes over from the Python
    loop and hands back to it as stretches grow and shrink."""
    cfg = config(packets=6000, rate=rate, extra=2, arrival=arrival, per_byte="0.2371ns",
                 backlog=50)
    settings = SHARED_CORES[mix]
    monkeypatch.setattr(des, "WORTH_COMPILING", worth)
    calls = []
    loop = des.core_loop
    monkeypatch.setattr(des, "core_loop", lambda *a: calls.append(1) or loop(*a))
    compiled = [m.to_json() for m in des.simulate(cfg, settings, exact=True)]
    monkeypatch.setattr(des, "core_loop", lambda *a: pytest.fail("compiled"))
    monkeypatch.setattr(des.Core, "_pool", lambda core: setattr(core, "pooled", []))
    interpreted = [m.to_json() for m in des.simulate(cfg, settings, exact=True)]
    assert calls  # (the compiled loop ran)
    assert compiled == interpreted
    if rate == "500kpps":
        assert sum(m["packets_dropped"] for m in compiled) > 0


def test_a_saturated_shared_core_drops_and_conserves():
    cfg = config(packets=5_000, rate="700kpps", extra=2, arrival="cbr")
    out = des.simulate(cfg, {"t0": NicSetting("busy_poll", ring_slots=128),
                             "t1": NicSetting("watermark", watermark=32, ring_slots=128,
                                              watermark_timeout=1e-4),
                             "t2": NicSetting("passive_wait", poll_interval=20e-6,
                                              ring_slots=128)})
    assert all(conserved(m) for m in out)
    assert sum(m.packets_dropped for m in out) > 0
    assert sum(m.packets_delivered for m in out) / max(m.duration_s for m in out) < 1.3e6


def test_arrival_processes():
    cfg = config(packets=100_000, rate="100kpps", arrival="cbr")
    t, nic = cfg.transmissions[0], cfg.nics["n0"]
    assert np.allclose(np.diff(arrival_times(t, nic, 0, 0)), 1e-5)
    p = arrival_times(replace(t, arrival="poisson"), nic, 3, 0)
    assert np.mean(np.diff(p)) == pytest.approx(1e-5, rel=0.02)
    assert np.array_equal(p, arrival_times(replace(t, arrival="poisson"), nic, 3, 0))
    assert not np.array_equal(p, arrival_times(replace(t, arrival="poisson"), nic, 3, 1))
    o = arrival_times(replace(t, arrival="onoff", onoff_on=2e-3, onoff_off=8e-3), nic, 0, 0)
    assert np.diff(o[:10]) == pytest.approx(np.full(9, 1e-5 * 2 / 10))  # peak = 5 λ
    assert (len(o) / (o[-1] - o[0])) == pytest.approx(1e5, rel=0.01)
    capped = arrival_times(replace(t, arrival="onoff", onoff_on=1e-6, onoff_off=1e-3), nic, 0, 0)
    assert np.diff(capped[:2])[0] == pytest.approx(8 * 1020 / 10e9)
    late = replace(t, arrival="poisson", start=0.25)  # (the draw every engine has used)
    np.testing.assert_array_equal(arrival_times(late, nic, 3, 7), 0.25 + np.cumsum(
        np.random.default_rng([3, 7]).exponential(1e-5, 100_000)))


@pytest.mark.parametrize("arrival", ["cbr", "poisson", "onoff"])
def test_an_arrival_stream_drawn_on_in_pieces_is_arrival_times(arrival, monkeypatch):
    """Filled in pieces, back to a marked count and on again, or from anywhere, a stream
    gives `arrival_times` to the bit (a longer window draws only the arrivals it adds)."""
    cfg = config(packets=50_000, rate="100kpps", arrival=arrival)
    t = replace(cfg.transmissions[0], start=0.37, onoff_on=2e-3, onoff_off=8e-3)
    nic = cfg.nics["n0"]
    whole = arrival_times(t, nic, 4, 2)
    stream = ArrivalStream(t, nic, 4, 2)
    out = np.empty(whole.size)
    stream.fill(out[:1000], 0)
    stream.mark()
    stream.fill(np.empty(7000), 1000)  # (drawn, then given back)
    for a, b in ((1000, 1001), (1001, 30_000), (30_000, whole.size)):
        stream.fill(out[a:b], a)
    np.testing.assert_array_equal(out, whole)
    monkeypatch.setattr(arrivals, "SEEK_PIECE", 1000)
    for a, b in ((12_345, 12_400), (5, 10), (40_000, 40_001), (1000, 1003)):
        piece = np.zeros(b - a)  # (not where it stopped: drawn on from a mark)
        stream.fill(piece, a)
        np.testing.assert_array_equal(piece, whole[a:b])


@pytest.mark.parametrize(("on", "off"), [(10e-6, 15e-6), (5e-6, 12e-6), (1e-6, 1e-6)])
def test_onoff_bursts_of_whole_packets_keep_the_mean_rate(on, off):
    """A burst holds whole packets: λ·(on+off) = 2.5 packets' worth is 3 packets with the
    cycle stretched to match, a burst shorter than a packet is one packet every 1/λ.
    Rounding the packets up at the nominal cycle ran these 20 %, 18 % and 400 % fast (a
    fuzz case at 52× its rate and 6× its link)."""
    cfg = config(packets=10_000, rate="100kpps", arrival="onoff")
    t, nic = replace(cfg.transmissions[0], onoff_on=on, onoff_off=off), cfg.nics["n0"]
    a = arrival_times(t, nic, 0, 0)
    assert (len(a) - 1) / (a[-1] - a[0]) == pytest.approx(1e5, rel=0.01)
    if 1e5 * (on + off) < 1:
        assert np.allclose(np.diff(a), 1e-5)


def test_onoff_bursts_the_link_caps_keep_the_mean_rate():
    """8 Gbit/s on/off 100 µs on a 10 Gbit/s link: the peak (16 Gbit/s) is capped at the
    link, so the bursts run 160 µs and the gaps 40 µs. The cycle had stayed 200 µs, and
    the transmission ran at 5 Gbit/s, none dropped (a review); both engines follow."""
    cfg = config(packets=3000, rate="714286pps", arrival="onoff", size=1400)
    t = replace(cfg.transmissions[0], onoff_on=100e-6, onoff_off=100e-6)
    a = arrival_times(t, cfg.nics["n0"], 0, 0)
    assert (len(a) - 1) / (a[-1] - a[0]) == pytest.approx(714_286, rel=0.01)
    cfg = replace(cfg, transmissions=[t])
    s = {"t0": NicSetting("busy_poll")}
    for m in (simulate(cfg, s, engine=e)[0] for e in ("des", "fast")):
        assert m.throughput_bps == pytest.approx(m.offered_bps, rel=0.01), m.engine


def test_arrivals_do_not_depend_on_the_selection():
    cfg = config(packets=5000, extra=2)
    s = NicSetting("passive_wait", poll_interval=1e-4)
    alone = des.simulate(cfg, {"t2": replace(s, irq_core=2)})[0]
    together = des.simulate(cfg, {"t0": s, "t1": replace(s, irq_core=1),
                                  "t2": replace(s, irq_core=2)})[2]
    assert alone.to_json() == together.to_json()


def test_results_follow_the_settings_order_and_engines_dispatch():
    cfg = config(packets=2000, extra=1)
    settings = {"t1": NicSetting("busy_poll"), "t0": NicSetting("active_wait", irq_core=1)}
    out = simulate(cfg, settings)
    assert [m.transmission for m in out] == ["t1", "t0"]
    assert all(m.engine == "des" for m in out)
    assert all(m.engine == "fast" for m in simulate(cfg, settings, engine="fast"))
    with pytest.raises(InputError, match="engine must be one of des, fast"):
        simulate(cfg, settings, engine="warp")
    with pytest.raises(InputError, match="no transmission 'zz'"):
        simulate(cfg, {"zz": NicSetting("busy_poll")})
    with pytest.raises(InputError, match="window"):
        simulate(cfg, settings, window=0)


def test_memory_bus_and_placement_scale_per_byte_work():
    busy = config(packets=5000, rate="100kpps", memory={"bandwidth": "100MB/s"})
    calm = config(packets=5000, rate="100kpps")
    s = NicSetting("active_wait", ring_slots=32768)
    slow, fast = (des.simulate(c, {"t0": s})[0] for c in (busy, calm))
    far = des.simulate(calm, {"t0": replace(s, placement="cross_package")})[0]
    per_packet = [m.cpu_busy_s / m.packets_delivered - IRQ for m in (fast, far, slow)]
    assert per_packet[0] == pytest.approx(PER_PACKET + 1000 * PER_BYTE)
    assert per_packet[1] == pytest.approx(PER_PACKET + 1000 * PER_BYTE * 1.4)
    demand = 1e5 * 1000 * 3 / (0.65 * 1e8)
    assert per_packet[2] == pytest.approx(PER_PACKET + 1000 * PER_BYTE * demand)
    assert math.isfinite(slow.latency_p99_s)


def test_a_shared_core_serves_packet_work_round_robin():
    """Two watermark consumers woken together (same cbr arrivals, 250 us apart): interrupts
    FIFO, then their drains interleave packet by packet (FIFO by request), so neither waits
    for the other's whole drain."""
    cfg = config(packets=10_000, rate="4kpps", arrival="cbr", extra=1)
    s = NicSetting("watermark", watermark=100, watermark_timeout=0.0)
    a, b = des.simulate(cfg, {"t0": s, "t1": s})
    w = PER_PACKET + 1000 * PER_BYTE
    assert a.interrupts == b.interrupts == 100  # nothing arrives during the 2 drains
    # served one drain after the other, t1's packets would wait ~100 w longer on average
    assert abs(a.latency_mean_s - b.latency_mean_s) < 2 * w


def test_empty_ticks_on_a_shared_core_are_counted_at_once_exactly():
    """A fast timer on a quiet shared core: its runs of empty ticks are paid in bulk while
    the core has nothing else to do; the result equals one SimPy event per tick."""
    cfg = config(packets=3000, rate="20kpps", extra=1, per_byte="0.2371ns")
    settings = {"t0": NicSetting("passive_wait", poll_interval=7.3e-6),
                "t1": NicSetting("watermark", watermark=20, watermark_timeout=3.1e-4)}
    a = [m.to_json() for m in des.simulate(cfg, settings)]
    b = [m.to_json() for m in des.simulate(cfg, settings, vectorised=False)]
    assert a[0]["empty_wakeups"] > 5 * a[0]["packets_delivered"]
    for x, y in zip(a, b, strict=True):
        for key, value in x.items():
            assert value == (pytest.approx(y[key], rel=1e-9) if isinstance(value, float)
                             else y[key]), key


def _oracle(A: np.ndarray, s: NicSetting, w: float) -> dict[str, float]:
    """docs/model.md's passive_wait and watermark rules for one transmission alone on its
    core, written out packet by packet in plain Python (no shared code with des.py)."""
    ring: list[int] = []
    finish = [math.nan] * len(A)
    i = irqs = empty = dropped = 0
    head = 0

    def admit(until: float) -> None:
        nonlocal i, dropped
        while i < len(A) and A[i] <= until:
            if len(ring) - head < s.ring_slots:
                ring.append(i)
            else:
                dropped += 1
            i += 1

    def wake_at(x: float) -> float:  # the sleeping consumer's next wake-up after x
        if s.mode == "passive_wait":
            k = max(1, math.ceil((x - A[0]) / s.poll_interval) - 1)
            while A[0] + k * s.poll_interval < x:
                k += 1
            return A[0] + k * s.poll_interval
        j, queued = i, len(ring) - head
        first = A[ring[head]] if queued else (A[j] if j < len(A) else math.inf)
        deadline = first + s.watermark_timeout if s.watermark_timeout else math.inf
        while queued < s.watermark and j < len(A) and A[j] < deadline:
            queued, j = queued + 1, j + 1
        return max(x, A[j - 1]) if queued >= s.watermark else max(x, deadline)

    t = A[0]
    admit(t)
    while True:
        if head == len(ring) and i == len(A):
            break
        t = wake_at(t)
        if t == math.inf:
            break
        admit(t)
        t += IRQ
        irqs += 1
        admit(t)
        if head == len(ring):
            empty += 1
        while head < len(ring):
            idx = ring[head]
            head += 1
            t += w
            finish[idx] = t
            admit(t)
    done = [f - a for f, a in zip(finish, A, strict=True) if not math.isnan(f)]
    return {"packets_delivered": len(done), "packets_dropped": dropped, "interrupts": irqs,
            "empty_wakeups": empty, "latency_mean_s": float(np.mean(done)),
            "duration_s": max(f for f in finish if not math.isnan(f)) - A[0]}


@pytest.mark.parametrize("setting", [
    NicSetting("passive_wait", poll_interval=37.3e-6, ring_slots=64),
    NicSetting("passive_wait", poll_interval=2.9e-6, ring_slots=4096),
    NicSetting("watermark", watermark=29, watermark_timeout=1.13e-4, ring_slots=64),
    NicSetting("watermark", watermark=50, watermark_timeout=0.0, ring_slots=128),
], ids=["passive", "passive-fast-timer", "watermark", "watermark-no-timeout"])
@pytest.mark.parametrize("rate", ["60kpps", "700kpps", "1.5Mpps"])
def test_batched_modes_follow_the_rules_packet_by_packet(setting, rate):
    """Below, near and past what the core can take (1.5 Mpps overflows the small rings)."""
    cfg = config(packets=6000, rate=rate, per_byte="0.2371ns")
    t = cfg.transmissions[0]
    want = _oracle(arrival_times(t, cfg.nics["n0"], 0, 0), setting,
                   PER_PACKET + 1000 * 0.2371e-9)
    got = des.simulate(cfg, {"t0": setting}).pop().to_json()
    assert (got["packets_dropped"] > 0) == (rate == "1.5Mpps" and setting.ring_slots < 4096)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9), key


@pytest.mark.timeout(60)
def test_zero_cost_interrupts_never_serve_a_tick_twice():
    """irq 0 (a value validation accepts): an empty wake-up ends at its own tick, which the
    consumer must not take again. Two passive consumers on one core looped at one instant
    for ever (a fuzz run), or counted 149 wake-ups where 101 ticks fit."""
    raw = {"hosts": {"h": {"cores": 1, "costs": {"irq": 0}}},
           "nics": {"n": {"host": "h", "link": "10Gbit/s"}, "m": {"host": "h", "link": "10Gbit/s"}},
           "transmissions": [{"id": i, "nic": nic, "size": 3000, "packet_size": 1500,
                              "rate": "1000pps", "arrival": "cbr",
                              "default": {"mode": "passive_wait", "poll_interval": "10us"}}
                             for i, nic in (("a", "n"), ("b", "m"))]}
    cfg = parse_config(raw, "x.yaml")
    defaults = {t.id: cfg.default_setting(t) for t in cfg.transmissions}
    for m in simulate(cfg, defaults, engine="des", exact=True):
        assert m.packets_delivered == 2
        assert m.interrupts <= m.duration_s / 10e-6 + 1
