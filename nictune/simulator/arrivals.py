"""Seeded packet arrival times (docs/model.md, "Arrivals").

Every engine draws the arrivals of the k-th transmission of a config from
`numpy.random.default_rng([seed, k])`, so a transmission's arrivals do not depend on which
other transmissions are simulated with it.
"""

from __future__ import annotations

import math

import numpy as np

from nictune.model import WIRE_OVERHEAD_BYTES, Nic, Transmission


def link_packet_rate(t: Transmission, nic: Nic) -> float:
    """Packets/s the NIC's link carries at `t`'s packet size (frames cost 20 wire bytes)."""
    return nic.link / (8.0 * (t.packet_size + WIRE_OVERHEAD_BYTES))


def onoff_bursts(t: Transmission, nic: Nic) -> tuple[float, int, float]:
    """(peak packets/s, packets per burst, s from one burst's start to the next) of an
    onoff transmission. Inside a burst packets come at λ·(on+off)/on, capped by the link;
    a burst holds whole packets (⌈on·peak⌉, at least one), and the cycle is per_burst/λ,
    so the mean rate stays what the config asks (λ, which the config caps at the link):
    a burst shorter than one packet is one packet every 1/λ, and where the link caps the
    peak the bursts last longer than `on` and the gaps are shorter than `off` (the cycle
    had kept on+off there: 8 Gbit/s on/off 100 µs on a 10 Gbit/s link ran at 5)."""
    on, off = t.onoff_on, t.onoff_off
    peak = min(t.rate * (on + off) / on, link_packet_rate(t, nic))
    per_burst = max(1, math.ceil(on * peak - 1e-9))
    return peak, per_burst, per_burst / t.rate


def arrivals_span(t: Transmission, nic: Nic, count: int) -> float | None:
    """s from the first to the `count`-th arrival of `t` where that is fixed (cbr, onoff:
    exactly what `arrival_times` gives); None for poisson."""
    if t.arrival == "cbr":
        return (count - 1) / t.rate
    if t.arrival == "onoff":
        peak, per_burst, cycle = onoff_bursts(t, nic)
        return (count - 1) // per_burst * cycle + (count - 1) % per_burst / peak
    return None


def full_span(t: Transmission, nic: Nic, span: float, n: int, m: int | None = None
              ) -> float:
    """s from `t`'s first arrival to its last (or its `m`-th), from a window of `n` of them
    spanning `span` s: exact for cbr and onoff (a window inside one burst would miss every
    pause: an onoff transmission in 200 s bursts came out at half its duration), else the
    window's mean spacing (poisson)."""
    m = t.packets if m is None else m
    if n >= m or n < 2:
        return span
    fixed = arrivals_span(t, nic, m)
    return fixed if fixed is not None else span * (m - 1) / (n - 1)


def arrival_times(t: Transmission, nic: Nic, seed: int, k: int, count: int | None = None
                  ) -> np.ndarray:
    """Arrival times (s, ascending) of the first `count` packets (default: all) of `t`.

    cbr: start + i/λ. poisson: exponential gaps of mean 1/λ from `start`. onoff: bursts of
    `onoff_bursts` packets, evenly spaced at the peak rate λ·(on+off)/on capped at the
    link's packet rate, a burst every per_burst / λ s (the mean rate is λ).
    """
    n = t.packets if count is None else min(count, t.packets)
    lam = t.rate
    if t.arrival == "cbr":
        return t.start + np.arange(n, dtype=np.float64) / lam
    if t.arrival == "poisson":
        rng = np.random.default_rng([seed, k])
        return t.start + np.cumsum(rng.exponential(1.0 / lam, n))
    if t.arrival == "onoff":
        peak, per_burst, cycle = onoff_bursts(t, nic)
        i = np.arange(n, dtype=np.int64)
        return t.start + (i // per_burst) * cycle + (i % per_burst) / peak
    raise ValueError(f"unknown arrival process {t.arrival!r}")
