"""The fast engine on edge inputs a fuzz run found: finite, possible and close to the DES."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nictune.model import MODES, PLACEMENTS, Config, load_config, parse_config
from nictune.simulator import simulate
from nictune.simulator.fast import SettingBatch, evaluate_batch

DATA = Path(__file__).with_name("data")


def host(t: dict[str, Any], costs: dict[str, Any] | None = None, link: str = "10Gbit/s",
         cores: int = 1, nics: int = 1) -> Config:
    """One host of `cores` cores; `nics` copies of transmission `t` (t0, t1, ...), one NIC
    each."""
    return parse_config({
        "hosts": {"h": {"cores": cores, "costs": costs or {}}},
        "nics": {f"n{i}": {"host": "h", "link": link, "min_ring_slots": 2}
                 for i in range(nics)},
        "transmissions": [{**t, "id": f"t{i}", "nic": f"n{i}"} for i in range(nics)],
    }, "edge.yaml")


def both(cfg: Config) -> tuple[Any, Any]:
    """(fast, DES) metrics of the first transmission, under its default setting."""
    settings = {t.id: cfg.default_setting(t) for t in cfg.transmissions}
    return tuple(simulate(cfg, settings, engine=e)[0] for e in ("fast", "des"))


def finite(m: Any) -> bool:
    return all(math.isfinite(v) for v in m.to_json().values()
               if isinstance(v, float))


def test_onoff_bursts_of_billions_of_packets_under_a_watermark_of_one():
    """W = 1 in bursts of 2.8·10⁹ packets: W / burst is below the burst index's tolerance,
    which made every group of bursts empty — NaN metrics, and `simulate` raised."""
    cfg = host({"size": "400GB", "packet_size": 64, "rate": "7Mpps", "arrival": "onoff",
                "onoff": {"on": "200s", "off": "200s"},
                "default": {"mode": "watermark", "watermark": 1, "watermark_timeout": 0,
                            "ring_slots": 4096}}, {"per_packet": "10ns", "per_byte": 0})
    fast, des = both(cfg)
    assert finite(fast) and fast.packets_delivered == des.packets_delivered
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.01)


def test_busy_poll_past_its_core_pays_no_interrupt():
    """busy_poll takes no interrupt; past saturation the engine added one to every
    packet's latency and to the duration (irq 1 ms: 1.04 ms latency, the DES 37 µs)."""
    fast, des = both(host({"size": "640kB", "packet_size": 64, "rate": "1.7Mpps",
                           "arrival": "cbr", "default": {"mode": "busy_poll",
                                                         "ring_slots": 64}},
                          {"irq": "1ms"}))
    assert fast.packets_dropped > 0 and fast.packets_delivered == des.packets_delivered
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)


def test_a_packet_waits_at_least_for_its_own_work():
    """One packet, no interrupt cost: its 616 ns of work (the latency was capped at a
    duration taken before it was raised to the work: 60 ns)."""
    fast, des = both(host({"size": "64B", "packet_size": 64, "rate": "1.8Mpps",
                           "arrival": "cbr", "default": {"mode": "active_wait"}},
                          {"irq": 0}))
    assert fast.latency_mean_s == fast.latency_p99_s == pytest.approx(616e-9)
    assert des.latency_mean_s == pytest.approx(616e-9)


@pytest.mark.parametrize("watermark", [1, 2])
def test_a_light_poisson_watermark_strands_nothing_it_cannot(watermark):
    """20 packets at 100/s, W = 1 or 2, no timeout: every drain takes exactly W packets,
    so 20/W wake-ups and nothing left (the normal sums without a continuity correction
    left half a packet for W = 1 and one for W = 2, which cannot be)."""
    fast, des = both(host({"size": "30kB", "packet_size": 1500, "rate": "100pps",
                           "arrival": "poisson", "default": {
                               "mode": "watermark", "watermark": watermark,
                               "watermark_timeout": 0, "ring_slots": 4096}}))
    assert fast.packets_stranded == des.packets_stranded == 0
    assert fast.interrupts == pytest.approx(des.interrupts, rel=1e-6) == 20 / watermark


def test_a_tiny_ring_never_wakes_more_often_than_its_timer():
    """A 4-slot ring at 140 packets a tick (λw 0.86): the binned chain's wrapped normal of
    drains much longer than the ring's content lost mass, and its mean cycle came out
    below the poll period — 818 wake-ups in 715 ticks. (What it delivers there is still
    off: the drains' model ignores a ring that overflows during a drain.)"""
    fast, des = both(host({"size": "6.4MB", "packet_size": 64, "rate": "1.4Mpps",
                           "arrival": "poisson", "default": {
                               "mode": "passive_wait", "poll_interval": "100us",
                               "ring_slots": 4}}))
    assert fast.interrupts <= fast.duration_s / 100e-6 + 1
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.02)


def test_sparse_onoff_packets_under_a_fast_timer():
    """100 packets at 20/s inside 1 s bursts, a tick every 10 µs: packets 5 000 ticks apart,
    more than the cycles followed hold, gave 9.5·10¹³ wake-ups and a duration of years."""
    fast, des = both(host({"size": "150kB", "packet_size": 1500, "rate": "10pps",
                           "arrival": "onoff", "onoff": {"on": "1s", "off": "1s"},
                           "default": {"mode": "passive_wait", "poll_interval": "10us"}},
                          link="1Gbit/s"))
    assert fast.duration_s == pytest.approx(des.duration_s, rel=1e-3)
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.03)
    assert fast.interrupts - fast.empty_wakeups == pytest.approx(100)



def test_a_row_is_the_same_alone_and_in_a_population():
    """The row sums of the shared-core shares were einsum's, whose path depends on the
    number of rows: t2's wake-ups were 2.438 alone and 2.253 beside a copy of itself."""
    cfg = load_config(DATA / "batch-threshold.yaml")
    row = [cfg.default_setting(t) for t in cfg.transmissions]
    one, two = (evaluate_batch(cfg, cfg.transmissions, SettingBatch.from_settings(rows))
                for rows in ([row], [row, row]))
    for key in one:
        np.testing.assert_array_equal(one[key][0], two[key][0], err_msg=key)
        np.testing.assert_array_equal(two[key][0], two[key][1], err_msg=key)


def test_rack_rows_alone_and_together_agree():
    """Every row of a random rack.yaml population evaluated alone gives its row of the
    whole (to rounding: BLAS products may still differ in the last bits)."""
    rack = load_config(Path(__file__).resolve().parents[2] / "configs" / "rack.yaml")
    rng, p, t = np.random.default_rng(5), 8, len(rack.transmissions)
    ring = rng.choice([64.0, 512.0, 4096.0], size=(p, t))
    batch = SettingBatch(
        mode=rng.integers(0, len(MODES), (p, t)),
        poll_interval=np.exp(rng.uniform(np.log(2e-6), np.log(1e-2), (p, t))),
        watermark=np.maximum(1, np.floor(rng.uniform(0, 1, (p, t)) * ring / 2)),
        watermark_timeout=rng.choice([0.0, 1e-4, 1e-2], size=(p, t)),
        ring_slots=ring, irq_core=rng.integers(0, 2, (p, t)),
        placement=rng.integers(0, len(PLACEMENTS), (p, t)))
    whole = evaluate_batch(rack, rack.transmissions, batch)
    for row in range(p):
        alone = evaluate_batch(rack, rack.transmissions,
                               SettingBatch(*(a[row:row + 1] for a in batch.arrays())))
        for key in alone:
            np.testing.assert_allclose(alone[key][0], whole[key][row], rtol=1e-9, atol=1e-6,
                                       err_msg=key)


@pytest.mark.parametrize("rate", ["6Gbit/s", "8Gbit/s"])
def test_onoff_bursts_the_link_caps_arrive_at_the_capped_mean(rate):
    """Bursts the link caps at 822 000 packets/s arrive alike whatever the config's rate
    above that (6 and 8 Gbit/s gave 94 000 and 129 000 delivered: the model took the
    config's mean rate, the arrivals were at 411 000/s)."""
    fast, des = both(host({"size": "150MB", "packet_size": 1500, "rate": rate,
                           "arrival": "onoff", "default": {
                               "mode": "passive_wait", "poll_interval": "50ms"}}))
    assert fast.offered_bps == des.offered_bps == pytest.approx(float(rate[0]) * 1e9)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.15)


def test_past_livelock_the_backlog_waits_for_the_last_arrival():
    """1 Mpps at 4 µs an interrupt: packet work gets no time while packets arrive, so the
    1 000 packets of the backlog are served after the last arrival and wait about the
    whole duration (the engine said half of it: 50.6 ms, the DES 116 ms)."""
    fast, des = both(host({"size": "6.4MB", "packet_size": 64, "rate": "1Mpps",
                           "arrival": "cbr", "default": {"mode": "active_wait",
                                                         "ring_slots": 4096}}))
    assert fast.packets_delivered == des.packets_delivered == 1000
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.02)
    assert fast.latency_p99_s == pytest.approx(des.latency_p99_s, rel=0.02)


def overrun(size: str, poll: str, on: str = "10ms", off: str = "90ms", rate: str = "2Mpps",
            ring: int = 4096) -> tuple[Any, Any]:
    """(fast, exact DES) of 64 B onoff bursts faster than a core of 1 Mpps (by default at
    the link's 14.9 Mpps: λw ≈ 15), passive_wait with a ring polled every `poll`."""
    cfg = host({"size": size, "packet_size": 64, "rate": rate, "arrival": "onoff",
                "onoff": {"on": on, "off": off},
                "default": {"mode": "passive_wait", "poll_interval": poll,
                            "ring_slots": ring}},
               {"per_packet": "1us", "per_byte": 0, "irq": "5us"})
    settings = {t.id: cfg.default_setting(t) for t in cfg.transmissions}
    return (simulate(cfg, settings, engine="fast")[0],
            simulate(cfg, settings, engine="des", exact=True)[0])


@pytest.mark.parametrize(("size", "poll"), [("19048kB", "5ms"), ("19048kB", "30ms"),
                                          ("19048kB", "100ms"), ("64MB", "300ms")])
def test_bursts_that_outrun_the_core_under_any_poll_period(size, poll):
    """10 ms bursts every 100 ms, a tick within a burst, after it, or only after several
    bursts (the ring then carries over). Below a burst's length the engine followed every
    burst from its first tick but missed a tick within Ti before a burst, which takes its
    first packets (5 ms: 0 delivered for the DES's 23 188); above it, it took the consumer
    as awake all through every burst, a wake-up each (30 ms: 28 197 for 8 197; 300 ms:
    95 872 for 25 385)."""
    fast, des = overrun(size, poll)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.01)
    assert fast.interrupts == des.interrupts
    assert fast.empty_wakeups == des.empty_wakeups
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)
    assert fast.latency_p99_s == pytest.approx(des.latency_p99_s, rel=0.05)


def test_the_last_burst_holds_what_is_left():
    """148 813 packets in bursts of 148 810: the second burst holds 3. Taken as a whole
    burst it lost more than the transmission holds (0 delivered, the DES 9 094)."""
    fast, des = overrun("9524kB", "5ms")
    assert des.packets_delivered == 9094
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.01)
    assert fast.interrupts == des.interrupts


def test_many_bursts_end_on_the_grid_tick():
    """145 bursts of 2.3 Mpps, a tick every 13 of them: the first bursts are followed and
    the last ones too (the transmission ends on the tick that drains the last burst: 3.6
    s, not the 3.39 s that extrapolating from the first bursts gave)."""
    fast, des = overrun("64MB", "300ms", on="3ms", off="20ms", rate="300kpps", ring=512)
    assert fast.duration_s == pytest.approx(des.duration_s, rel=1e-3)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.05)
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.05)


@pytest.mark.parametrize("poll", ["2ms", "4ms", "30ms", "300ms"])
def test_bursts_the_core_keeps_up_with_under_a_few_ticks_a_burst(poll):
    """0.9 Mpps bursts of 10 ms every 30 ms on a 1 Mpps core, a 512-slot ring: a tick's
    drain catches up slowly (λw = 0.9), the consumer sleeps, and what arrives meanwhile
    waits for the next tick, within the burst or after it. Taken as an averaged cycle,
    the engine delivered 141 097, 105 823, 12 085 and 1 209 packets of the DES's
    123 019, 92 131, 82 053 and 5 627."""
    fast, des = overrun("9524kB", poll, off="20ms", rate="300kpps", ring=512)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.01)
    assert fast.interrupts == des.interrupts
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)
    assert fast.latency_p99_s == pytest.approx(des.latency_p99_s, rel=0.05)


def test_a_watermark_past_its_core_drains_from_its_watermark_on():
    """cbr at 1.7 times the core's rate woken at 8 019 packets: the consumer starts 11 ms
    in, so the ring of 16 384 fills before the arrivals end (979 dropped in the DES). The
    engine took it as draining from the first packet: none dropped, 72.2 ms for 81.0."""
    fast, des = both(host({"size": "270MB", "packet_size": 9000, "rate": "722324pps",
                           "arrival": "cbr", "default": {
                               "mode": "watermark", "watermark": 8019,
                               "watermark_timeout": 0, "ring_slots": 16384,
                               "placement": "cross_package"}},
                          {"irq": "2.8514us", "per_packet": "0.52986us",
                           "per_byte": "0.099356ns"}, link="100Gbit/s"))
    assert des.packets_dropped > 900
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.002)
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)


def test_a_poisson_consumer_busy_most_of_the_time_ends_with_its_drain():
    """Poisson at λw ≈ 1 under a 5.7 µs tick (grid 66, case-316): the chain's mean cycle is
    a long drain, and the last arrival falls in one almost surely, which then ends once
    the queue ahead is taken. The duration added half a mean cycle and a ring's drain
    after the last arrival, as if it fell in an idle stretch: 31.5 ms for the DES's 21.3."""
    fast, des = both(host({"size": "15360000B", "packet_size": 512, "rate": "1414333pps",
                           "arrival": "poisson", "default": {
                               "mode": "passive_wait", "poll_interval": "5.7336us",
                               "ring_slots": 4096, "placement": "cross_package"}},
                          {"irq": "2.5156us", "per_packet": "0.62673us",
                           "per_byte": "0.11169ns"}, link="100Gbit/s"))
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
    assert fast.throughput_bps == pytest.approx(des.throughput_bps, rel=0.01)


def onoff_passive(size: str, rate: str, on: str, off: str, poll: str, ring: int,
                  costs: dict[str, Any]) -> tuple[Any, Any]:
    """(fast, exact DES) of 64 B onoff arrivals under passive_wait."""
    cfg = host({"size": size, "packet_size": 64, "rate": rate, "arrival": "onoff",
                "onoff": {"on": on, "off": off},
                "default": {"mode": "passive_wait", "poll_interval": poll, "ring_slots": ring}},
               costs)
    settings = {t.id: cfg.default_setting(t) for t in cfg.transmissions}
    return (simulate(cfg, settings, engine="fast")[0],
            simulate(cfg, settings, engine="des", exact=True)[0])


@pytest.mark.parametrize("poll", ["50us", "3ms"])
def test_bursts_of_one_packet(poll):
    """Bursts of one packet every 2 ms (a review). The burst loop's first version counted
    λ·(first to last arrival) = 0 packets a burst: 1 wake-up for the DES's 1 333 at 3 ms;
    spreading the packet over λ's gap had it wait for the tick after (mean 1.9 ms for
    1.0); the averaged cycle before gave 1.5 ms, and 53 µs for 3 µs at 50 µs."""
    fast, des = onoff_passive("128000B", "500pps", "100us", "900us", poll, 64,
                              {"per_packet": "1us", "per_byte": 0, "irq": "2us"})
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.02)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.02)
    assert fast.latency_p99_s == pytest.approx(des.latency_p99_s, rel=0.02)


@pytest.mark.parametrize("poll", ["23ms", "83ms", "130ms", "290ms"])
def test_ticks_many_bursts_apart(poll):
    """1 000 bursts of 100 µs every 1 ms under ticks 23 to 290 bursts apart (a review):
    extrapolated from the first bursts' second half, which held a few ticks or none, the
    burst loop's first version gave 17.6 wake-ups in 13 ticks at 83 ms, and 1 for 8 at
    130 ms; the averaged cycle before it 66 332 packets for 69 008 at 130 ms, and a mean
    latency of 143 ms for 237 at 290 ms."""
    fast, des = onoff_passive("6.4MB", "100kpps", "100us", "900us", poll, 8192,
                              {"per_packet": "0.5us", "per_byte": 0, "irq": "3us"})
    assert fast.interrupts <= fast.duration_s / float(poll[:-2]) * 1e3 + 1
    assert fast.interrupts == pytest.approx(des.interrupts, rel=0.05)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.01)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)


def test_a_core_saturated_on_average_under_rare_ticks():
    """Bursts at 2.5 times the core, gaps too short for it to catch up, a tick every 100
    ms (a review): the DES wakes once and never sleeps. Extrapolated from bursts before
    the first tick, the burst loop's first version delivered 1 255 packets for 160 096;
    the fluid before it 200 000, woken once a burst: 1 000 times in 0.5 s of 100 ms
    ticks."""
    fast, des = onoff_passive("12.8MB", "400kpps", "100us", "400us", "100ms", 256,
                              {"per_packet": "2.5us", "per_byte": 0, "irq": "1us"})
    assert des.interrupts == 1
    assert fast.interrupts == pytest.approx(1.0)
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.01)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.05)


def test_a_late_drain_starts_after_the_wake_ups_handler():
    """cbr at 11 Mpps woken at 8 192 packets by a 900 µs handler (a review): service
    starts after the handler, so the ring overflows sooner (99 847 delivered for the
    DES's 90 846), and the handler is not paid again at the end nor by every packet
    (mean latency 2.10 ms for 1.65)."""
    fast, des = both(host({"size": "6400000B", "packet_size": 64, "rate": "11000000pps",
                           "arrival": "cbr", "default": {
                               "mode": "watermark", "watermark": 8192,
                               "watermark_timeout": 0, "ring_slots": 16384}},
                          {"irq": "900us", "per_packet": "0.1us", "per_byte": 0},
                          link="100Gbit/s"))
    assert fast.packets_delivered == pytest.approx(des.packets_delivered, rel=0.002)
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.005)
    assert fast.latency_mean_s == pytest.approx(des.latency_mean_s, rel=0.02)
    assert fast.latency_p99_s == pytest.approx(des.latency_p99_s, rel=0.05)


def test_a_poisson_transfer_much_longer_than_its_jitter_ends_on_the_grid():
    """50 000 Poisson packets under a 100 ms tick (a review): the span varies by 0.6 ms,
    so the last arrival comes 25 ms after a tick and waits 75 ms for the next, not half a
    mean cycle (173 ms for the DES's 203)."""
    fast, des = both(host({"size": "3200000B", "packet_size": 64, "rate": "400000pps",
                           "arrival": "poisson", "default": {
                               "mode": "passive_wait", "poll_interval": "100ms",
                               "ring_slots": 16384}},
                          {"irq": 0, "per_packet": "0.5us", "per_byte": 0}))
    assert fast.duration_s == pytest.approx(des.duration_s, rel=0.01)
