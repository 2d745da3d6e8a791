"""Seeded packet arrival times (docs/model.md, "Arrivals").

Every engine draws the arrivals of the k-th transmission of a config from
`numpy.random.default_rng([seed, k])`, so a transmission's arrivals do not depend on which
other transmissions are simulated with it.
"""

from __future__ import annotations

import math
from typing import Any

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


SEEK_PIECE = 1 << 20  # gaps drawn at a time to reach an arrival not where a stream is


def arrival_times(t: Transmission, nic: Nic, seed: int, k: int, count: int | None = None
                  ) -> np.ndarray:
    """Arrival times (s, ascending) of the first `count` packets (default: all) of `t`.

    cbr: start + i/λ. poisson: exponential gaps of mean 1/λ from `start`. onoff: bursts of
    `onoff_bursts` packets, evenly spaced at the peak rate λ·(on+off)/on capped at the
    link's packet rate, a burst every per_burst / λ s (the mean rate is λ).
    """
    out = np.empty(t.packets if count is None else max(0, min(count, t.packets)))
    ArrivalStream(t, nic, seed, k).fill(out, 0)
    return out


class ArrivalStream:
    """`arrival_times` of `t` from any arrival on. A poisson transmission's generator
    (`default_rng([seed, k])`) and sum go on from where the last `fill` stopped, so a
    longer window draws only the arrivals it adds; `mark` keeps them at a count of
    arrivals to go back to (elsewhere, the gaps before are drawn again)."""

    def __init__(self, t: Transmission, nic: Nic, seed: int, k: int) -> None:
        if t.arrival not in ("cbr", "poisson", "onoff"):
            raise ValueError(f"unknown arrival process {t.arrival!r}")
        self.t, self.nic = t, nic
        self._rng = np.random.default_rng([seed, k])
        self._first = self._rng.bit_generator.state
        self._at, self._sum = 0, 0.0  # the gaps drawn so far, and their sum
        self._marks: dict[int, tuple[dict[str, Any], float]] = {}

    def fill(self, out: np.ndarray, i: int) -> None:
        """Arrivals i, i + 1, ... into `out` (a contiguous float64 array; as many as it
        holds, also past the transmission's last packet)."""
        t, n = self.t, out.size
        if t.arrival == "cbr":
            np.divide(np.arange(i, i + n, dtype=np.float64), t.rate, out=out)
            out += t.start
        elif t.arrival == "onoff":
            peak, per_burst, cycle = onoff_bursts(t, self.nic)
            j = np.arange(i, i + n, dtype=np.int64)
            np.add(t.start, j // per_burst * cycle, out=out)
            out += j % per_burst / peak
        elif n:
            self._seek(i)
            self._at = -1  # (until the draw is done: one cut short seeks again)
            self._rng.standard_exponential(out=out)  # (exponential(1/λ): the same numbers)
            out *= 1.0 / t.rate
            out[0] += self._sum  # (the sum goes on in the same order)
            np.cumsum(out, out=out)
            self._at, self._sum = i + n, float(out[-1])
            out += t.start

    def mark(self) -> None:
        """Keep the generator's state and sum at the arrivals drawn so far."""
        self._marks[self._at] = (self._rng.bit_generator.state, self._sum)

    def _seek(self, i: int) -> None:
        """The generator and sum at i gaps: where they are, or drawn on to it from where
        they are or the last mark before it (or the start), whichever is nearer."""
        if i == self._at:
            return
        at = max((m for m in self._marks if m <= i), default=0)
        if not at <= self._at < i:
            self._at = -1  # (until both are set)
            self._rng.bit_generator.state, self._sum = self._marks.get(at, (self._first, 0.0))
            self._at = at
        while self._at < i:  # (in pieces of at most SEEK_PIECE gaps)
            self.fill(np.empty(min(i - self._at, SEEK_PIECE)), self._at)
