"""Shared cores whose consumers all sleep (passive_wait, watermark), followed wake-up by
wake-up together (compiled): the joint state of their drains decides which ticks a drain
outlasts, which no average of the neighbours' load captures (docs/engines.md, "Shared
hosts").

The arrivals are the DES's (`arrival_times`, the same seed) over a window of each host's
transmissions: every one shortened by one factor, its start too, as the DES's window does,
so the phases of the core keep their order. Between events the core serves the draining
consumers in turn, packet by packet, as a fluid (each at one packet per Σ w); a wake-up's
interrupt (Ti, FIFO) stops packet work while it runs; an arrival that finds the ring full
is lost; a drain ends when the ring is empty, and the consumer then sleeps to its next tick
or watermark by the DES's rules (`Core._sleep`). Only the wake-ups (interrupts, empty
wake-ups, and with them the CPU time) come from here; drops, throughput and latency stay
the closed form's. A window too short for a consumer's ticks or watermarks, or holding
more than MAX_WAKES of them, a core past MAX_EVENTS, or a core with an active_wait or
busy_poll consumer keeps the closed form.

Cost: a drain that no arrival can overflow before its queue is served jumps there at once
(the arrivals counted by a galloping search), and a tick that finds the ring empty on an
idle core counts the empty ticks up to the next arrival or wake-up at once, as the DES
does; so the events are about the wake-ups, not the packets.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from nictune.model import Config, Transmission
from nictune.simulator.arrivals import arrival_times, full_span, onoff_bursts
from nictune.simulator.batch import PASSIVE, WATERMARK, SettingBatch
from nictune.simulator.compiled import compiled

if TYPE_CHECKING:
    from nictune.simulator.fast_base import Workload

WINDOW_PACKETS = 20_000  # a host's window holds about this many packets per transmission
MIN_PACKETS = 100  # a shortened window holds this many packets of each transmission ...
ONOFF_CYCLES = 10  # ... and bursts of an onoff one ...
WAKE_UPS = 100  # a shortened window holds this many ticks of each passive_wait consumer ...
BATCHES = 16  # ... and watermarks of each watermark consumer, else the closed form stays
MAX_WAKES = 50_000  # a core's window holds at most this many ticks and watermarks ...
MAX_EVENTS = 400_000  # a core's followed events at most (beyond: the closed form stays)
LOOK_AHEAD = 64  # steps a drain looks ahead per event (a long one advances in as many events)
LOTS = 16  # lots of cores per thread (they take uneven time: small lots even it out)
CACHED = 100_000  # cores whose results are kept (a search meets the same ones again)
_SLEEP, _WAKING, _DRAIN, _DONE = 0, 1, 2, 3  # a consumer's state
_IRQ_END, _IRQ_START, _WAKE, _DRAINED, _STEP = 0, 1, 2, 3, 4  # what happens next
_INF = math.inf


class Windows:
    """Each shared host's arrivals over its window, end to end (`times[offset[c]:][:count[c]]`
    for column c), its `span`, what share of the whole transmission's time (`scale_t`) and
    packets (`scale_n`) it holds — the DES's window scales ticks by the one, the rest by the
    other —, whether it is too short to scale (`thin`: fewer than MIN_PACKETS, or an onoff
    window of fewer than ONOFF_CYCLES bursts), and the cores followed so far (`done`:
    their members and settings -> their counts)."""

    def __init__(self, config: Config, transmissions: list[Transmission],
                 groups: tuple[np.ndarray, ...], seed: int) -> None:
        index = {t.id: k for k, t in enumerate(config.transmissions)}
        size = len(transmissions)
        self.scale_t, self.scale_n = np.ones(size), np.ones(size)
        self.thin = np.zeros(size, dtype=bool)
        self.offset = np.zeros(size, dtype=np.int64)
        self.count = np.zeros(size, dtype=np.int64)
        parts, at = [], 0
        for cols in groups:
            packets = sum(transmissions[c].packets for c in cols)
            f = min(1.0, WINDOW_PACKETS * cols.size / packets)
            for c in cols.tolist():
                t = transmissions[c]
                nic = config.nic_of(t)
                a = arrival_times(replace(t, start=t.start * f), nic, seed, index[t.id],
                                  max(1, math.ceil(t.packets * f)))
                self.offset[c], self.count[c] = at, a.size
                if a.size < t.packets:
                    full = full_span(t, nic, a[-1] - a[0], a.size)
                    self.scale_t[c] = (a[-1] - a[0]) / full if full > 0 else 1.0
                    self.scale_n[c] = a.size / t.packets
                    bursts = (a.size / onoff_bursts(t, nic)[1] if t.arrival == "onoff"
                              else math.inf)
                    self.thin[c] = a.size < MIN_PACKETS or bursts < ONOFF_CYCLES
                parts.append(a)
                at += a.size
        self.times = np.concatenate(parts) if parts else np.zeros(0)
        self.span = np.array([self.times[o + c - 1] - self.times[o] if c else 0.0
                              for o, c in zip(self.offset, self.count, strict=True)])
        self.done: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}


def joint_wakes(wl: Workload, b: SettingBatch, w: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Wake-ups and empty wake-ups (P, T) of every consumer on a shared core whose
    consumers are two or more and all batched (`w`: their work per packet); NaN elsewhere
    (and where the core's window is too short or too busy, or its events pass
    MAX_EVENTS)."""
    windows, core, ring = wl.windows, b.irq_core, b.ring_slots.astype(np.float64)
    passive = b.mode == PASSIVE
    batched = passive | (b.mode == WATERMARK)
    period = np.where(passive, b.poll_interval, 1.0)
    wm = np.where(batched & ~passive, np.maximum(b.watermark, 1.0), 1.0)
    tau = np.where(batched & ~passive, b.watermark_timeout, 0.0)
    shape = core.shape
    wakes, empty = np.full(shape, np.nan), np.full(shape, np.nan)
    members: list[np.ndarray] = []
    rows: list[int] = []
    keys: list[bytes] = []
    first: dict[bytes, tuple[int, np.ndarray]] = {}
    again: list[tuple[tuple[int, np.ndarray], int, np.ndarray]] = []
    for cols in wl.groups:
        on, bat = core[:, cols], batched[:, cols]
        same = on[:, :, None] == on[:, None, :]
        mates = same.sum(axis=2)
        alone_or_mixed = (same & ~bat[:, None, :]).any(axis=2)
        ok = bat & (mates >= 2) & ~alone_or_mixed
        # a window too short for its consumers' ticks or watermarks spoils the whole core,
        # and so does one holding too many of them (and timeouts) to follow in good time
        span, pas = windows.span[cols], passive[:, cols]
        ticks = span / period[:, cols]
        batches = windows.count[cols] / wm[:, cols]
        short = (windows.scale_n[cols] < 1.0) & (
            windows.thin[cols] | np.where(pas, ticks < WAKE_UPS, batches < BATCHES))
        timeouts = span / np.where(tau[:, cols] > 0, tau[:, cols], np.inf)
        busy = np.where(pas, ticks, batches + timeouts)
        ok &= ~(same & short[:, None, :]).any(axis=2)
        ok &= (same * busy[:, None, :]).sum(axis=2) <= MAX_WAKES
        for p, j in zip(*np.nonzero(ok), strict=True):
            if same[p, j, :j].any():  # (a core once, at its first member)
                continue
            m = cols[np.flatnonzero(same[p, j])]
            key = m.tobytes() + np.stack([a[p, m] for a in (w, ring, passive, period, wm, tau)]
                                         ).astype(np.float64).tobytes()
            if key in windows.done:
                wakes[p, m], empty[p, m] = windows.done[key]
                continue
            if key in first:  # (the same core again in this batch: followed once)
                again.append((first[key], int(p), m))
                continue
            first[key] = (int(p), m)
            members.append(m)
            rows.append(int(p))
            keys.append(key)
    if not members:
        return wakes, empty
    width = max(m.size for m in members)
    gm = np.full((len(members), width), -1, dtype=np.int64)
    for g, m in enumerate(members):
        gm[g, :m.size] = m
    scale = np.where(passive, windows.scale_t[None, :], windows.scale_n[None, :])
    gp = np.array(rows, dtype=np.int64)

    def follow(part: slice) -> None:
        _follow_cores(windows.times, windows.offset, windows.count, scale, gp[part], gm[part],
                      w, wl.ti, ring, passive, period, wm, tau, MAX_EVENTS, wakes, empty)

    # the cores are independent (each writes its own cells) and uneven: handed out to the
    # CPUs in small lots as they free up
    n = min(_cpus(), gp.size)
    if n > 1:
        lot = max(1, gp.size // (LOTS * n))
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(follow, [slice(i, i + lot) for i in range(0, gp.size, lot)]))
    else:
        follow(slice(None))
    for (p0, m0), p, m in again:
        wakes[p, m], empty[p, m] = wakes[p0, m0], empty[p0, m0]
    if len(windows.done) > CACHED:
        windows.done.clear()
    for key, p, m in zip(keys, rows, members, strict=True):
        windows.done[key] = wakes[p, m], empty[p, m]
    return wakes, empty


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


@compiled
def _arrived(a: np.ndarray, o: int, n: int, k: int, t: float) -> int:
    """How many arrivals came by `t`, counting on from k of them: a galloping search, as
    most answers are a few arrivals on (np.searchsorted over the rest made rack.yaml's
    populations 17 % slower)."""
    if k >= n or a[o + k] > t:
        return k
    lo, step = k, 1  # (a[lo] <= t; a[hi] > t or hi == n)
    while lo + step < n and a[o + lo + step] <= t:
        lo += step
        step *= 2
    hi = min(lo + step, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[o + mid] <= t:
            lo = mid
        else:
            hi = mid
    return lo + 1


@compiled
def _admit(a: np.ndarray, o: int, n: int, nx: np.ndarray, q: np.ndarray, j: int,
           ring: float, t: float) -> None:
    """Arrivals up to `t` enter consumer j's ring (not served) while it has room."""
    k = _arrived(a, o, n, nx[j], t)
    q[j] = min(q[j] + (k - nx[j]), max(ring, q[j]))
    nx[j] = k


@compiled
def _sleep(a: np.ndarray, o: int, n: int, nx: np.ndarray, q: np.ndarray, st: np.ndarray,
           wake_at: np.ndarray, woke: np.ndarray, j: int, x: float, ring: float,
           passive: bool, period: float, wm: float, tau: float) -> None:
    """Consumer j found its ring empty at `x` (or starts): its next wake-up, as the DES's
    `Core._sleep`."""
    st[j] = _SLEEP
    _admit(a, o, n, nx, q, j, ring, x)
    if q[j] <= 1e-9 and nx[j] >= n:
        st[j] = _DONE  # ticks stop after the last delivery
        return
    if passive:
        t0 = a[o]
        k = max(1.0, math.ceil((x - t0) / period))
        while k > 1.0 and t0 + (k - 1.0) * period >= x:
            k -= 1.0
        while t0 + k * period < x or t0 + k * period <= woke[j]:
            k += 1.0
        wake_at[j] = t0 + k * period
        return
    qi = round(q[j])
    wake = _INF
    if qi >= wm:
        wake = x
    elif wm <= ring and nx[j] + wm - qi - 1 < n:
        wake = a[o + nx[j] + int(wm - qi) - 1]
    if tau > 0.0 and (qi > 0 or nx[j] < n):  # tau after the first packet queued
        wake = min(wake, max(x, a[o + nx[j] - int(qi)] + tau))
    if wake == _INF:
        st[j] = _DONE  # below the watermark with no timeout: stranded
        return
    wake_at[j] = wake


@compiled
def _empty_ticks(a: np.ndarray, o: int, n: int, nx: int, q: float, t: float, ti: float,
                 period: float, st: np.ndarray, wake_at: np.ndarray, who: int
                 ) -> tuple[int, float]:
    """A passive_wait consumer's tick at `t` on an idle core finds its ring empty: how
    many of its ticks from there on (one per interrupt: those during it are skipped) end
    their interrupt before its next arrival and by the others' next wake-up — empty
    wake-ups that nothing else on the core can meet (the DES's `Core._empty_ticks`) —,
    and the last of those ticks."""
    if q > 1e-9 or _arrived(a, o, n, nx, t) > nx:
        return 0, t
    until = _INF
    for j in range(st.size):
        if j != who and st[j] == _SLEEP:
            until = min(until, wake_at[j])
    nxt = a[o + nx] if nx < n else _INF
    span = max(1.0, math.ceil(ti / period - 1e-9)) * period
    m = 0
    while t + m * span + ti < nxt and t + m * span + ti <= until:
        m += 1
    return m, t + (m - 1) * span


@compiled
def _drain(a: np.ndarray, o: int, n: int, nx: int, q: float, t: float, r: float,
           ring: float, limit: float, most: int) -> tuple[float, int, float, float]:
    """A ring of q packets from `t`, served at r packets/s (0: not served), arrivals from
    index nx on entering while it has room: (when it runs empty, inf if not by `limit`;
    the arrivals come by then; what it holds then; the time up to which that is known —
    `limit`, or earlier after `most` steps).

    An arrival finding the ring full (within half a packet: the one in service has left
    it half-way) is lost; the ring is empty once the last packet taken is done before
    the next arrival (one at that instant is in time, as in the DES). The ring cannot run
    empty before its q packets are served, so where no arrival until then can find it
    full, one step takes it there (the arrivals counted by a search); else one arrival
    at a time."""
    at, k = t, nx
    if r <= 0.0:  # (no service: it fills)
        m = _arrived(a, o, n, k, limit) - k
        room = max(math.floor(ring - 0.5 - q) + 1.0, 0.0)
        return _INF, k + m, q + min(m, room), limit
    for _ in range(most):
        end = at + q / r
        stop = min(end, limit)
        m = _arrived(a, o, n, k, stop) - k
        if m == 0 or q + m - 1.0 <= ring - 0.5:  # every one of them finds room
            if stop < end:
                return _INF, k + m, q + m - r * (limit - at), limit
            if m == 0:
                return end, k, 0.0, end
            q, at, k = float(m), end, k + m
            continue
        nxt = a[o + k]  # (m > 0: one arrives before the ring could run empty)
        q -= r * (nxt - at)
        at = nxt
        if q <= ring - 0.5:
            q += 1.0
        k += 1
    return _INF, k, q, at


@compiled
def _follow_cores(a: np.ndarray, off: np.ndarray, cnt: np.ndarray, scale: np.ndarray,
                  gp: np.ndarray, gm: np.ndarray, w: np.ndarray, ti: np.ndarray,
                  ring: np.ndarray, passive: np.ndarray, period: np.ndarray,
                  wm: np.ndarray, tau: np.ndarray, max_events: int, wakes: np.ndarray,
                  empty: np.ndarray) -> None:
    """Each group g (row gp[g], columns gm[g] up to -1) followed event by event: a
    sleeper's wake-up, the start or end of an interrupt, a drain's end (before a wake-up
    at the same instant, as in the DES). Its counts over the window, past the first
    wake-up, are scaled to the whole transmission (`scale`: the window's share of it)."""
    for g in range(gp.size):
        p = gp[g]
        k = 0
        while k < gm.shape[1] and gm[g, k] >= 0:
            k += 1
        cs = gm[g, :k]
        st = np.zeros(k, dtype=np.int64)
        q, woke = np.zeros(k), np.full(k, -_INF)
        nx = np.zeros(k, dtype=np.int64)
        wake_at = np.full(k, _INF)
        nw, ne = np.zeros(k), np.zeros(k)
        queue = np.zeros(k + 1, dtype=np.int64)
        head, length, cur, irq_end = 0, 0, -1, _INF
        t = _INF
        for j in range(k):
            c = cs[j]
            t = min(t, a[off[c]])
            _sleep(a, off[c], cnt[c], nx, q, st, wake_at, woke, j, a[off[c]], ring[p, c],
                   passive[p, c], period[p, c], wm[p, c], tau[p, c])
        events = 0
        while events <= max_events:
            events += 1
            sw = 0.0
            for j in range(k):
                if st[j] == _DRAIN:
                    sw += w[p, cs[j]]
            r = 1.0 / sw if cur < 0 and sw > 0.0 else 0.0
            te, what, who = _INF, -1, -1
            if cur >= 0:
                te, what, who = irq_end, _IRQ_END, cur
            elif length > 0:
                te, what = t, _IRQ_START
            for j in range(k):
                if st[j] == _SLEEP and wake_at[j] < te:
                    te, what, who = wake_at[j], _WAKE, j
            if r > 0.0:
                for j in range(k):
                    if st[j] == _DRAIN:
                        c = cs[j]
                        e, _, _, known = _drain(a, off[c], cnt[c], nx[j], q[j], t, r,
                                                ring[p, c], te, LOOK_AHEAD)
                        if e < te or (e == te and what == _WAKE):
                            te, what, who = e, _DRAINED, j
                        elif known < te:  # (a step: scans stay short, drains long)
                            te, what, who = known, _STEP, -1
            if te == _INF:
                break
            for j in range(k):  # the drains up to te (the one that ends: below)
                if st[j] == _DRAIN and not (what == _DRAINED and j == who):
                    c = cs[j]
                    _, nx[j], q[j], _ = _drain(a, off[c], cnt[c], nx[j], q[j], t, r,
                                               ring[p, c], te, cnt[c])
            t = te
            if what == _IRQ_START:
                cur = queue[head]
                head, length = (head + 1) % (k + 1), length - 1
                irq_end = t + ti[cs[cur]]
            elif what == _IRQ_END:
                j, c = cur, cs[cur]
                cur, irq_end = -1, _INF
                nw[j] += 1.0
                st[j] = _DRAIN
                _admit(a, off[c], cnt[c], nx, q, j, ring[p, c], t)
                if q[j] <= 1e-9:
                    q[j] = 0.0
                    ne[j] += 1.0
                    _sleep(a, off[c], cnt[c], nx, q, st, wake_at, woke, j, t, ring[p, c],
                           passive[p, c], period[p, c], wm[p, c], tau[p, c])
            elif what == _WAKE:
                c = cs[who]
                m, last = 0, t
                if passive[p, c] and cur < 0 and length == 0 and sw == 0.0:
                    m, last = _empty_ticks(a, off[c], cnt[c], nx[who], q[who], t, ti[c],
                                           period[p, c], st, wake_at, who)
                if m > 0:  # (the core idle meanwhile: those wake-ups at once)
                    nw[who] += m
                    ne[who] += m
                    woke[who] = last
                    _sleep(a, off[c], cnt[c], nx, q, st, wake_at, woke, who, last + ti[c],
                           ring[p, c], True, period[p, c], wm[p, c], tau[p, c])
                else:
                    st[who], woke[who], wake_at[who] = _WAKING, t, _INF
                    queue[(head + length) % (k + 1)] = who
                    length += 1
            elif what == _DRAINED:
                c = cs[who]
                nx[who], q[who] = _arrived(a, off[c], cnt[c], nx[who], t), 0.0  # all taken
                _sleep(a, off[c], cnt[c], nx, q, st, wake_at, woke, who, t, ring[p, c],
                       passive[p, c], period[p, c], wm[p, c], tau[p, c])
        if events > max_events:
            continue
        for j in range(k):
            c = cs[j]
            f = scale[p, c]
            wakes[p, c] = 1.0 + (nw[j] - 1.0) / f if nw[j] >= 1.0 else 0.0
            empty[p, c] = ne[j] / f
