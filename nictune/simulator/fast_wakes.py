"""Shared cores of sleepers (passive_wait, watermark; busy-pollers and active_wait
consumers beside them too), followed wake-up by wake-up together (compiled): the joint
state of their drains decides which ticks a drain outlasts, which no average of the
neighbours' load captures (docs/engines.md, "Shared hosts").

The arrivals are the DES's (`arrival_times`, the same seed) over a window of each core's
transmissions: every one shortened by one factor, its start too, as the DES's window does,
so the phases of the core keep their order. The window holds about WINDOW_PACKETS of each
of the host's transmissions or, where that holds fewer than WAKE_UPS of a member's ticks,
LONGER of the members' longest sleeps (never more than the DES's window, CORE_PACKETS
packets or LONG_WAKES wake-ups in all); a saturated core's (work SATURATED of its time or
more: its rings fill for longer than the host's window lasts) is the DES's instead, up to
CORE_PACKETS packets and MAX_WAKES wake-ups.
Longer windows' arrivals are drawn on (`ArrivalStream`) when a core first needs them, host
by host, and kept between calls up to KEPT; a window never depends on what is kept, so a
host's counts depend on its own transmissions and settings alone.
Between events the core serves the draining consumers in turn, packet by packet, as a
fluid (each at one packet per Σ w); a wake-up's interrupt (Ti, FIFO) stops packet work
while it runs; an arrival that finds the ring full is lost; a drain ends when the ring is
empty, and the consumer then sleeps to its next tick or watermark by the DES's rules
(`Core._sleep`). A busy-poller takes its turns as the drains do from the packet it
notices (half a poll check after it comes), without an interrupt; while its turn comes
more often than its packets and no interrupt runs, it is a fluid taking its rate's share
of the core (the others drain at (1 − ρ)/Σ w), with no events of its own; else (an
interrupt runs, the drains leave it too few turns, or its arrivals are onoff) its packets
queue and drain as the others' do — alone on the core, served as they come
(`_polled`). An active_wait consumer's arrivals are events: each one its ring (the
interrupts not yet started) has room for queues an interrupt (FIFO with the wake-ups);
when it ends the packet joins the backlog (if it has room) and the backlog drains as a
request per packet — a turn each, so a drain gets one packet per round of them (as the
DES's requests). The sleepers' wake-ups (interrupts, empty wake-ups) and the share of their
arrivals that found the ring full (drops; with them throughput and CPU time) come from
here; their latency and duration stay the closed form's, and all of a busy-poller's
and an active_wait consumer's.
A window too short for a consumer's ticks (WAKE_UPS, LONG_TICKS in a
longer window; unless as long as the DES's) or watermarks, or too thin to scale, or
holding more than MAX_WAKES ticks, watermarks, onoff pollers' and active_wait
consumers' packets, a core past MAX_EVENTS, or a core with fewer than two sleepers (one
beside busy-pollers: the closed form's wait for a poller's one request is nearer the DES
at ticks of a few µs) keeps the closed form.

Cost: a drain that no arrival can overflow before its queue is served jumps there at once
(the arrivals counted by a galloping search; else it takes those arrivals one at a time,
a few operations each), and a tick that finds the ring empty on an idle core counts the
empty ticks up to the next arrival or wake-up at once, as the DES does; so the events are
about the wake-ups, not the packets (but for active_wait's: three events a packet). The
cores of a call are followed on a thread per CPU.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from nictune.model import Config, Transmission
from nictune.simulator.arrivals import ArrivalStream, onoff_bursts
from nictune.simulator.batch import ACTIVE, BUSY, PASSIVE, WATERMARK, SettingBatch
from nictune.simulator.compiled import compiled
from nictune.simulator.des import GROWN_PACKETS as DES_GROWN
from nictune.simulator.des import MAX_WINDOWS as DES_MAX_WINDOWS
from nictune.simulator.des import ONOFF_CYCLES as DES_ONOFF_CYCLES
from nictune.simulator.des import WAKE_UPS as DES_WAKE_UPS
from nictune.simulator.des import WINDOW as DES_WINDOW

if TYPE_CHECKING:
    from nictune.simulator.fast_base import Workload

WINDOW_PACKETS = 20_000  # a host's window holds about this many packets per transmission
MIN_PACKETS = 100  # a shortened window holds this many packets of each transmission ...
ONOFF_CYCLES = 10  # ... and bursts of an onoff one, else the closed form stays
WAKE_UPS = 100  # a shortened window holds this many ticks of each passive_wait consumer
LONG_TICKS = 25  # ... a longer one cut at CORE_PACKETS this many
LONGER = 200  # a core's window too short for them is made longer for this many ...
CORE_PACKETS = 2_000_000  # ... up to this many packets in all ...
LONG_WAKES = 5_000  # ... where it then holds at most this many wake-ups in all
BATCHES = 16  # a shortened window holds this many watermarks of each watermark consumer
MAX_WAKES = 50_000  # a core's window holds at most this many ticks, watermarks (and onoff
# busy-pollers' packets) ...
MAX_EVENTS = 400_000  # a core's followed events at most (beyond: the closed form stays)
FLUID_PACKETS = 4.0  # a busy-poller is a fluid only beside drains holding this many of
# its packets' time (or none)
SATURATED = 0.95  # a core with this share of its time's work or more is saturated (its
# longer window is the DES's, not LONGER's: past MAX_WAKES it keeps the host's window)
KEPT = 32_000_000  # arrivals of longer windows kept between calls (8 bytes each)
LOOK_AHEAD = 64  # steps a drain looks ahead per event (a long one advances in as many events)
LOTS = 16  # lots of cores per thread (they take uneven time: small lots even it out)
CACHED = 100_000  # cores whose results are kept (a search meets the same ones again)
_SLEEP, _WAKING, _DRAIN, _DONE, _FLOW = 0, 1, 2, 3, 4  # a consumer's state
_IRQ_END, _WAKE, _DRAINED, _STEP, _ARRIVE = 0, 1, 2, 3, 4  # what happens next
_INF = math.inf


class Windows:
    """The arrivals of each shared host's transmissions, drawn as the DES draws them from a
    start of 0 (host h's `buffers[h][offset[c]:][:drawn[c]]` for its column c; a window of
    a fraction f adds f · start): first each host's own window (`base`: WINDOW_PACKETS per
    transmission, `first` packets), then further as longer windows need them, up to
    `most[c]` (the draws of a longer window begin with those of a shorter one). Only the
    memory kept between calls depends on what came before (`trim`), never a window: a
    host's results depend on its own transmissions and settings alone. Also what a window
    of n packets spans (`span`) and holds of the whole transmission's time (`time_share`),
    and the cores followed so far (`done`: their members and settings -> their counts)."""

    def __init__(self, config: Config, transmissions: list[Transmission],
                 groups: tuple[np.ndarray, ...], seed: int) -> None:
        index = {t.id: k for k, t in enumerate(config.transmissions)}
        self.streams = [ArrivalStream(replace(t, start=0.0), config.nic_of(t), seed,
                                      index[t.id]) for t in transmissions]
        size = len(transmissions)
        self.groups = groups
        self.packets = np.array([t.packets for t in transmissions], dtype=np.int64)
        self.start = np.array([t.start for t in transmissions], dtype=np.float64)
        self.rate = np.array([t.rate for t in transmissions], dtype=np.float64)
        # a window of n spans (n - 1) // per_burst · cycle + (n - 1) % per_burst / peak
        self.per_burst = np.ones(size, dtype=np.int64)
        self.cycle, self.peak = 1.0 / self.rate, self.rate.copy()
        self.onoff = np.zeros(size, dtype=bool)
        for c, t in enumerate(transmissions):
            if t.arrival == "onoff":
                self.peak[c], self.per_burst[c], self.cycle[c] = onoff_bursts(t, config.nic_of(t))
                self.onoff[c] = True
        self.base = np.ones(size)
        self.first = np.zeros(size, dtype=np.int64)
        self.most = np.zeros(size, dtype=np.int64)
        for cols in groups:
            self.base[cols] = min(1.0, WINDOW_PACKETS * cols.size / self.packets[cols].sum())
            self.first[cols] = np.maximum(np.ceil(self.packets[cols] * self.base[cols]), 1)
            self.most[cols] = np.minimum(self.packets[cols],
                                         np.maximum(self.first[cols], CORE_PACKETS))
        self.buffers = [np.zeros(0) for _ in groups]
        self.offset = np.zeros(size, dtype=np.int64)
        self.drawn = np.zeros(size, dtype=np.int64)
        self._used: dict[int, None] = {}  # hosts with longer windows, least recently used first
        for h in range(len(groups)):
            self._resize(h, self.first)
        for stream in self.streams:
            stream.mark()  # (a longer window given back draws on from here again)
        self.done: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def missing(self, h: int, need: np.ndarray) -> int:
        """Arrivals host h lacks for `need` packets of its columns."""
        cols = self.groups[h]
        return int(np.clip(self._capped(h, need) - self.drawn[cols], 0, None).sum())

    def draw(self, h: int, need: np.ndarray) -> None:
        """Host h's arrivals drawn for at least `need` (capped at `most`) packets of each
        of its columns (twice as many as before at least: few draws as windows grow)."""
        cols = self.groups[h]
        need = self._capped(h, need)
        if (need > self.first[cols]).any():  # (a longer window: used last)
            self._used.pop(h, None)
            self._used[h] = None
        grow = need > self.drawn[cols]
        if grow.any():
            counts = self.drawn.copy()
            counts[cols] = np.where(grow, np.minimum(
                self.most[cols], np.maximum(need, 2 * self.drawn[cols])), self.drawn[cols])
            self._resize(h, counts)

    def _capped(self, h: int, need: np.ndarray) -> np.ndarray:
        """`need` of host h's columns, at most `most` each."""
        cols = self.groups[h]
        return np.minimum(need[cols], self.most[cols])

    def trim(self, keep: set[int]) -> None:
        """Hosts' longer windows given back, least recently used first, while more than
        KEPT arrivals beyond the hosts' own windows are kept (never those of `keep`)."""
        for h in list(self._used):
            if (self.drawn - self.first).sum() <= KEPT:
                return
            if h not in keep:
                del self._used[h]
                self._resize(h, self.first)

    def _resize(self, h: int, counts: np.ndarray) -> None:
        """Host h's buffer holding counts[c] arrivals of each of its columns c: those it
        holds kept, the others drawn on from them."""
        cols = self.groups[h]
        sizes = counts[cols]
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        buffer = np.empty(int(sizes.sum()))
        for c, o, n in zip(cols.tolist(), offset.tolist(), sizes.tolist(), strict=True):
            kept = min(n, int(self.drawn[c]))
            start = int(self.offset[c])
            buffer[o:o + kept] = self.buffers[h][start:start + kept]
            self.streams[c].fill(buffer[o + kept:o + n], kept)
        self.offset[cols], self.drawn[cols], self.buffers[h] = offset, sizes, buffer

    def span(self, n: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """s from the first to the n-th arrival of each column (cbr, onoff: exact; poisson:
        n - 1 mean gaps)."""
        k = np.maximum(n - 1, 0)
        pb = self.per_burst[cols]
        return k // pb * self.cycle[cols] + k % pb / self.peak[cols]

    def time_share(self, n: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The share of each column's whole time a window of n of its packets spans (1: all
        of them, or a window of one)."""
        whole = self.span(self.packets[cols], cols)
        part = self.span(n, cols)
        return np.where((n < self.packets[cols]) & (n >= 2) & (whole > 0),
                        part / np.where(whole > 0, whole, 1.0), 1.0)


def joint_wakes(wl: Workload, b: SettingBatch, w: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wake-ups, empty wake-ups and the share of its packets lost to a full ring (P, T;
    the last only where its window is as long as the DES's) of every sleeper on a shared
    core of two sleepers or more (passive_wait, watermark) and any busy-pollers and
    active_wait consumers (`w`: every element's work per packet); NaN elsewhere
    (busy-pollers and active_wait too, and where the core's window is too short or too
    busy, or its events pass MAX_EVENTS)."""
    windows, core, ring = wl.windows, b.irq_core, b.ring_slots.astype(np.float64)
    passive, poll, active = b.mode == PASSIVE, b.mode == BUSY, b.mode == ACTIVE
    flow = np.where(windows.onoff, 0.0, windows.rate)  # (a poller's packets as a fluid)
    batched = passive | (b.mode == WATERMARK)
    period = np.where(passive, b.poll_interval, 1.0)
    wm = np.where(batched & ~passive, np.maximum(b.watermark, 1.0), 1.0)
    tau = np.where(batched & ~passive, b.watermark_timeout, 0.0)
    shape = core.shape
    wakes, empty, lost = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    count = np.zeros(shape, dtype=np.int64)  # each one's packets in its core's window
    scale = np.ones(shape)  # what the window holds of each one's ticks or packets
    shift = np.zeros(shape)  # its start in the window
    as_des = np.zeros(shape, dtype=bool)  # its window as long as the DES's
    members: list[np.ndarray] = []
    rows: list[int] = []
    hosts: list[int] = []
    keys: list[bytes] = []
    seen: dict[bytes, tuple[int, np.ndarray]] = {}  # (each core's first row in the batch)
    again: list[tuple[tuple[int, np.ndarray], int, np.ndarray]] = []
    for h, cols in enumerate(wl.groups):
        on, bat = core[:, cols], batched[:, cols]
        same = on[:, :, None] == on[:, None, :]
        pol = poll[:, cols]
        sleepers = (same & bat[:, None, :]).sum(axis=2)
        ok = bat & (sleepers >= 2)
        pas = passive[:, cols]
        load = _loads(windows, cols, w[:, cols], wl.ti[cols], pas, pol, period[:, cols],
                      wm[:, cols])
        full = (same * load[:, None, :]).sum(axis=2) >= SATURATED
        args = (windows, cols, same, pas, pol, active[:, cols], period[:, cols], wm[:, cols],
                tau[:, cols], full)
        # the host's own window, or one made longer: where that keeps the closed form, for
        # the core's longest sleeps, holding at most LONG_WAKES wake-ups in all (more would
        # cost more than they tell); where the core is saturated, as long as the DES's
        # (its queues fill for longer than the host's window: its start is no sample of
        # the whole), holding at most MAX_WAKES
        f, n, spoiled, busy, whole = _sized(*args, longer=False)
        f_long, n_long, spoiled_long, busy_long, whole_long = _sized(*args, longer=True)
        long = (f_long > f) & ((spoiled & (busy_long <= LONG_WAKES))
                               | (full & (busy_long <= MAX_WAKES)))
        f, n = np.where(long, f_long, f), np.where(long, n_long, n)
        spoiled, busy = np.where(long, spoiled_long, spoiled), np.where(long, busy_long, busy)
        as_des[:, cols] = np.where(long, whole_long, whole)
        ok &= ~spoiled & (busy <= MAX_WAKES)
        count[:, cols] = n
        scale[:, cols] = np.where(pas, windows.time_share(n, cols), n / windows.packets[cols])
        # (a busy-poller's packets reach the core when it notices them: half a check on)
        shift[:, cols] = windows.start[cols] * f + np.where(pol, wl.tc[cols] / 2, 0.0)
        for p, j in zip(*np.nonzero(ok), strict=True):
            if (same[p, j, :j] & ok[p, :j]).any():  # (a core once, at its first sleeper)
                continue
            m = cols[np.flatnonzero(same[p, j])]
            # (a poller's flow and notice belong to its column, as the arrivals do)
            key = m.tobytes() + np.stack([a[p, m] for a in (w, ring, passive, poll, active,
                                                            period, wm, tau)]
                                         ).astype(np.float64).tobytes()
            if key in windows.done:
                wakes[p, m], empty[p, m], lost[p, m] = windows.done[key]
                continue
            if key in seen:  # (the same core again in this batch: followed once)
                again.append((seen[key], int(p), m))
                continue
            seen[key] = (int(p), m)
            members.append(m)
            rows.append(int(p))
            hosts.append(h)
            keys.append(key)
    if not members:
        return wakes, empty, lost
    width = max(m.size for m in members)
    gm = np.full((len(members), width), -1, dtype=np.int64)
    for g, m in enumerate(members):
        gm[g, :m.size] = m
    gp = np.array(rows, dtype=np.int64)
    followed = np.zeros(shape, dtype=bool)
    for p, m in zip(rows, members, strict=True):
        followed[p, m] = True
    need = np.where(followed, count, 0).max(axis=0)

    def follow(lot: tuple[int, np.ndarray]) -> None:
        h, g = lot
        _follow_cores(windows.buffers[h], windows.offset, count, shift, scale, gp[g], gm[g],
                      w, wl.ti, ring, passive, poll, active, wl.backlog, flow, period, wm, tau,
                      MAX_EVENTS, wakes, empty, lost)

    # the cores are independent (each writes its own cells) and uneven: handed out to the
    # CPUs in small lots as they free up, in `_rounds` that bound the arrivals drawn
    threads = min(_cpus(), gp.size)
    size = max(1, gp.size // (LOTS * threads))
    with ThreadPoolExecutor(threads) as pool:
        for drawn, lots in _rounds(windows, np.array(hosts), need, size):
            for h in sorted(drawn):
                windows.draw(h, need)
            list(pool.map(follow, lots))
            if drawn:
                windows.trim(drawn)
    # (the drops over a window shorter than the DES's are no sample of the whole: where
    # they start late, the DES grows its window; the closed form's stay)
    lost[~as_des] = np.nan
    for (p0, m0), p, m in again:
        wakes[p, m], empty[p, m], lost[p, m] = wakes[p0, m0], empty[p0, m0], lost[p0, m0]
    if len(windows.done) > CACHED:
        windows.done.clear()
    for key, p, m in zip(keys, rows, members, strict=True):
        windows.done[key] = wakes[p, m], empty[p, m], lost[p, m]
    return wakes, empty, lost


def _rounds(windows: Windows, on_host: np.ndarray, need: np.ndarray, size: int
            ) -> list[tuple[set[int], list[tuple[int, np.ndarray]]]]:
    """The groups (on host `on_host[g]`) in lots of `size` of one host each, in rounds:
    first those of the hosts whose arrivals for `need` are kept (marked as used), then
    the others in rounds of as many hosts as KEPT holds — each round's hosts (its set) to
    be drawn before it and given back after, so the memory stays bounded."""
    rounds: list[tuple[set[int], list[tuple[int, np.ndarray]]]] = [(set(), [])]
    held = 0
    for h in np.unique(on_host).tolist():
        g = np.flatnonzero(on_host == h)
        lots = [(h, g[i:i + size]) for i in range(0, g.size, size)]
        more = windows.missing(h, need)
        if not more:
            windows.draw(h, need)  # (all kept already: marked as used)
            rounds[0][1].extend(lots)
            continue
        if len(rounds) == 1 or held + more > KEPT:
            rounds.append((set(), []))
            held = 0
        rounds[-1][0].add(h)
        rounds[-1][1].extend(lots)
        held += more
    return rounds


def _sized(windows: Windows, cols: np.ndarray, same: np.ndarray, pas: np.ndarray,
           pol: np.ndarray, act: np.ndarray, period: np.ndarray, wm: np.ndarray,
           tau: np.ndarray, full: np.ndarray, longer: bool) -> tuple[np.ndarray, ...]:
    """(P, |cols|) each, of the window of every element's core (`_fraction`): its fraction,
    the element's packets in it, whether the core keeps the closed form for it, the
    ticks, watermarks and timeouts the core's window holds in all — and the packets of
    its active_wait consumers and onoff busy-pollers, each of which may be an event or
    three (the other pollers' packets take none
    while they are a fluid, and the events they take otherwise are not counted here:
    MAX_EVENTS bounds them).

    A window too short for a member's ticks (WAKE_UPS; a longer window, which CORE_PACKETS
    may cut, LONG_TICKS — the closed form is further off than counts over that many;
    none if it is as long as the DES's) or watermarks (the DES's window holds BATCHES of
    them at least), or too thin to scale, spoils the whole core. Last, whether the
    element's window is as long as the DES's."""
    f, des = _fraction(windows, cols, same, pas, pol, period, wm, tau, full, longer)
    packets = windows.packets[cols]
    n = np.clip(np.ceil(packets * f).astype(np.int64), 1, windows.most[cols])
    span = windows.span(n, cols)
    ticks = span / period
    batches = n / wm
    thin = (n < MIN_PACKETS) | (windows.onoff[cols] & (n / windows.per_burst[cols]
                                                      < ONOFF_CYCLES))
    least = LONG_TICKS if longer else WAKE_UPS
    short = (n < packets) & (thin | np.where(pas, ~des & (ticks < least),
                                              ~pol & (batches < BATCHES)))
    busy = np.where(pas, ticks, np.where(pol, np.where(windows.onoff[cols], n, 0),
                                         np.where(act, n, batches + span / np.where(
                                             tau > 0, tau, np.inf))))
    return (f, n, (same & short[:, None, :]).any(axis=2),
            (same * busy[:, None, :]).sum(axis=2), des)


def _loads(windows: Windows, cols: np.ndarray, w: np.ndarray, ti: np.ndarray,
           pas: np.ndarray, pol: np.ndarray, period: np.ndarray, wm: np.ndarray
           ) -> np.ndarray:
    """(P, |cols|): the share of its core's time each element's work takes: its packets
    (w each) and its wake-ups' interrupts (ti each: a tick per period, a wake-up per
    watermark's worth of packets — timeouts may add more; none for a busy-poller)."""
    rate = windows.rate[cols]
    wakes = np.where(pas, 1.0 / period, np.where(pol, 0.0, rate / wm))
    return rate * w + wakes * ti


def _fraction(windows: Windows, cols: np.ndarray, same: np.ndarray, pas: np.ndarray,
              pol: np.ndarray, period: np.ndarray, wm: np.ndarray, tau: np.ndarray,
              full: np.ndarray, longer: bool) -> tuple[np.ndarray, np.ndarray]:
    """(P, |cols|): the fraction of each core's transmissions its window holds, and whether
    that window is as long as the DES's (`des.window_fraction` for the DES's default window;
    then it holds the ticks the reference holds, however few — though not the longer
    window the DES takes where a queue has not settled). The host's own window (`base`) —
    if `longer`, made longer to hold LONGER of its members' longest time between
    wake-ups, or where the core is `full` (saturated) as long as the DES's, up to
    CORE_PACKETS in all —, never longer than the DES's (so it may be shorter than the
    host's own). The DES's rule is `des.window_fraction` with
    `des._wake_share`, here for every core of the batch at once (a test holds them equal)."""
    packets = windows.packets[cols].astype(np.float64)
    rate = windows.rate[cols]
    fill = wm / rate
    interval = np.where(pas, period, np.where(pol, 0.0, np.where(tau > 0,
                                                                 np.minimum(fill, tau), fill)))
    share = interval * rate / packets
    cycle_share = windows.cycle[cols] * rate / packets * DES_ONOFF_CYCLES / DES_WAKE_UPS
    share = np.where(windows.onoff[cols], np.maximum(share, cycle_share), share)
    total = (same * packets).sum(axis=2)
    fewest = np.where(same, packets, np.inf).min(axis=2)
    longest = np.where(same, share[:, None, :], 0.0).max(axis=2)
    by_packets = np.minimum(DES_WINDOW / fewest,
                            2.0 * DES_WINDOW * same.sum(axis=2) / total)
    by_wakes = np.minimum(DES_WAKE_UPS * longest, DES_MAX_WINDOWS * DES_WINDOW / total)
    des = np.minimum(np.minimum(1.0, np.maximum(by_packets, by_wakes)), DES_GROWN / total)
    more = np.minimum(np.where(full, np.inf, LONGER * longest), CORE_PACKETS / total
                      ) if longer else 0.0
    f = np.minimum(des, np.maximum(windows.base[cols], more))  # (within every one's `most`)
    return f, f >= des * (1.0 - 1e-9)


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


@compiled
def _arrived(a: np.ndarray, o: int, n: int, s: float, k: int, t: float) -> int:
    """How many arrivals (`a[o:o + n] + s`) came by `t`, counting on from k of them: a
    galloping search, as most answers are a few arrivals on (np.searchsorted over the rest
    made rack.yaml's populations 17 % slower)."""
    if k >= n or a[o + k] + s > t:
        return k
    lo, step = k, 1  # (a[lo] <= t; a[hi] > t or hi == n)
    while lo + step < n and a[o + lo + step] + s <= t:
        lo += step
        step *= 2
    hi = min(lo + step, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[o + mid] + s <= t:
            lo = mid
        else:
            hi = mid
    return lo + 1


@compiled
def _admit(a: np.ndarray, o: int, n: int, s: float, nx: np.ndarray, q: np.ndarray, j: int,
           ring: float, t: float, lost: np.ndarray) -> None:
    """Arrivals up to `t` enter consumer j's ring (not served) while it has room; the
    others add to its `lost`."""
    k = _arrived(a, o, n, s, nx[j], t)
    kept = min(q[j] + (k - nx[j]), max(ring, q[j]))
    lost[j] += q[j] + (k - nx[j]) - kept
    q[j], nx[j] = kept, k


@compiled
def _sleep(a: np.ndarray, o: int, n: int, s: float, nx: np.ndarray, q: np.ndarray,
           st: np.ndarray, wake_at: np.ndarray, woke: np.ndarray, j: int, x: float,
           ring: float, passive: bool, period: float, wm: float, tau: float,
           lost: np.ndarray) -> None:
    """Consumer j found its ring empty at `x` (or starts): its next wake-up, as the DES's
    `Core._sleep` (arrivals since then that found the ring full add to `lost`)."""
    st[j] = _SLEEP
    _admit(a, o, n, s, nx, q, j, ring, x, lost)
    if q[j] <= 1e-9 and nx[j] >= n:
        st[j] = _DONE  # ticks stop after the last delivery
        return
    if passive:
        t0 = a[o] + s
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
        wake = a[o + nx[j] + int(wm - qi) - 1] + s
    if tau > 0.0 and (qi > 0 or nx[j] < n):  # tau after the first packet queued
        wake = min(wake, max(x, a[o + nx[j] - int(qi)] + s + tau))
    if wake == _INF:
        st[j] = _DONE  # below the watermark with no timeout: stranded
        return
    wake_at[j] = wake


@compiled
def _empty_ticks(a: np.ndarray, o: int, n: int, s: float, nx: int, q: float, t: float,
                 ti: float, period: float, st: np.ndarray, wake_at: np.ndarray, who: int
                 ) -> tuple[int, float]:
    """A passive_wait consumer's tick at `t` on an idle core finds its ring empty: how
    many of its ticks from there on (one per interrupt: those during it are skipped) end
    their interrupt before its next arrival and by the others' next wake-up — empty
    wake-ups that nothing else on the core can meet (the DES's `Core._empty_ticks`) —,
    and the last of those ticks."""
    if q > 1e-9 or _arrived(a, o, n, s, nx, t) > nx:
        return 0, t
    until = _INF
    for j in range(st.size):
        if j != who and st[j] == _SLEEP:
            until = min(until, wake_at[j])
    nxt = a[o + nx] + s if nx < n else _INF
    span = max(1.0, math.ceil(ti / period - 1e-9)) * period
    m = 0
    while t + m * span + ti < nxt and t + m * span + ti <= until:
        m += 1
    return m, t + (m - 1) * span


@compiled
def _drain(a: np.ndarray, o: int, n: int, s: float, nx: int, q: float, t: float, r: float,
           ring: float, limit: float, most: int) -> tuple[float, int, float, float, float]:
    """A ring of q packets from `t`, served at r packets/s (0: not served), arrivals from
    index nx on entering while it has room: (when it runs empty, inf if not by `limit`;
    the arrivals come by then; what it holds then; the time up to which that is known —
    `limit`, or earlier after `most` steps; how many of those arrivals were lost).

    An arrival finding the ring full (within half a packet: the one in service has left
    it half-way) is lost; the ring is empty once the last packet taken is done before
    the next arrival (one at that instant is in time, as in the DES). The ring cannot run
    empty before its q packets are served, so where no arrival until then can find it
    full, one step takes it there (the arrivals counted by a search); else its arrivals
    until then one at a time (a step each)."""
    at, k, lost = t, nx, 0.0
    if r <= 0.0:  # (no service: it fills)
        m = _arrived(a, o, n, s, k, limit) - k
        room = max(math.floor(ring - 0.5 - q) + 1.0, 0.0)
        return _INF, k + m, q + min(m, room), limit, m - min(m, room)
    steps = 0
    while steps < most:
        end = at + q / r
        stop = min(end, limit)
        m = _arrived(a, o, n, s, k, stop) - k
        if m == 0 or q + m - 1.0 <= ring - 0.5:  # every one of them finds room
            if stop < end:
                return _INF, k + m, q + m - r * (limit - at), limit, lost
            if m == 0:
                return end, k, 0.0, end, lost
            q, at, k = float(m), end, k + m
            steps += 1
            continue
        # (all m arrive before the ring could run empty: no search between them)
        for _ in range(min(m, most - steps)):
            nxt = a[o + k] + s
            q -= r * (nxt - at)
            at = nxt
            if q <= ring - 0.5:
                q += 1.0
            else:
                lost += 1.0
            k += 1
            steps += 1
    return _INF, k, q, at, lost


@compiled
def _keeps_up(flow: float, wp: float, sw: float, work: float, rho: float, cur: int
              ) -> bool:
    """Whether a busy-poller of `flow` packets/s is taken as a fluid: it keeps up with
    its packets as they come while others drain (Σ w = `sw`, `work` s of packets queued),
    other pollers keep up taking `rho` of the core, and no interrupt runs (`cur` < 0): its
    turn, one packet in every round of the drains, comes more often than its packets, the
    core has room for them — and the drains, if any, last for FLUID_PACKETS of its
    packets or more (a drain that meets one or none is not slowed by its share: the DES
    delays only the drains a packet of it meets). `flow` 0: never (onoff arrivals)."""
    return (cur < 0 and flow > 0.0 and flow * (sw + wp) < 1.0 and rho + flow * wp < 1.0
            and (sw <= 0.0 or flow * work >= FLUID_PACKETS))


@compiled
def _queued(st: np.ndarray, q: np.ndarray, w: np.ndarray, cs: np.ndarray) -> float:
    """s of packet work the draining consumers hold."""
    work = 0.0
    for j in range(st.size):
        if st[j] == _DRAIN:
            work += q[j] * w[cs[j]]
    return work


@compiled
def _quiet(st: np.ndarray, wake_at: np.ndarray, who: int, t: float) -> float:
    """Until when nothing but consumer `who` needs the core (from `t`, which it needs
    now): the others' next wake-up, or `t` if one of them drains, flows (a poller) or
    waits for its interrupt (inf: they are all done)."""
    until = _INF
    for j in range(st.size):
        if j != who and st[j] == _SLEEP:
            until = min(until, wake_at[j])
        elif j != who and st[j] != _DONE:
            return t
    return until


@compiled
def _polled(a: np.ndarray, o: int, n: int, s: float, k: int, q: float, t: float,
            until: float, wp: float, ring: float) -> tuple[int, float]:
    """A busy-poller holding q packets at `t`, alone on the core until `until`: its
    arrivals from index k on served as they come, wp each (one finding the ring full
    lost): the arrivals come by `until`, and what it still holds then (a fluid, as
    `_drain`'s). A few operations a packet, not two events."""
    free = t + q * wp  # (when what it holds is done)
    while k < n:
        x = a[o + k] + s
        if x >= until:
            break
        if max(free - x, 0.0) / wp <= ring - 0.5:
            free = max(free, x) + wp
        k += 1
    return k, max(free - until, 0.0) / wp


@compiled
def _served(act: bool, n: int, nx: int, q: float, r: float) -> tuple[int, float]:
    """How a drain of q packets is served at a round of r turns/s: (the arrivals it may
    take in, its rate). An active_wait backlog takes none (they come by interrupts) and
    has a turn per packet."""
    return (nx, r * q) if act else (n, r)


@compiled
def _follow_cores(a: np.ndarray, off: np.ndarray, cnt: np.ndarray, sh: np.ndarray,
                  scale: np.ndarray, gp: np.ndarray, gm: np.ndarray, w: np.ndarray,
                  ti: np.ndarray, ring: np.ndarray, passive: np.ndarray, poll: np.ndarray,
                  active: np.ndarray, backlog: np.ndarray, flow: np.ndarray,
                  period: np.ndarray, wm: np.ndarray, tau: np.ndarray, max_events: int,
                  wakes: np.ndarray, empty: np.ndarray, lost: np.ndarray) -> None:
    """Each group g (row gp[g], columns gm[g] up to -1) followed event by event: a
    sleeper's wake-up (its interrupt starts then, or queues behind the one running), an
    active_wait consumer's arrival (an interrupt queued for each its ring has room for),
    an interrupt's end (the next queued starts), a drain's end (before a wake-up or an
    arrival at the same instant, as in the DES), or a drain's step (`_STEP`: a long one
    advances in several). Column c's arrivals are a[off[c]:][:cnt[p, c]]
    + sh[p, c]. Its counts over the window, past the first wake-up, are scaled to the whole
    transmission (`scale`: the window's share of it); its arrivals that found the ring full,
    as a share of its arrivals in the window (`lost`). A busy-poller (`poll`; a watermark
    of one for `_sleep`) takes its turns as a drain from the packet it notices, without an
    interrupt, or is a fluid of `flow` packets/s (state _FLOW) while `_keeps_up`; an
    active_wait consumer's (`active`) backlog (at most `backlog`) drains a turn per
    packet. The busy-pollers' and active_wait consumers' own counts are not written."""
    for g in range(gp.size):
        p = gp[g]
        k = 0
        while k < gm.shape[1] and gm[g, k] >= 0:
            k += 1
        cs = gm[g, :k]
        o, n, s = off[cs], cnt[p, cs], sh[p, cs]  # (consumer j's arrivals)
        st = np.zeros(k, dtype=np.int64)
        q, woke = np.zeros(k), np.full(k, -_INF)
        nx = np.zeros(k, dtype=np.int64)
        wake_at = np.full(k, _INF)
        nw, ne, nl = np.zeros(k), np.zeros(k), np.zeros(k)
        act = np.zeros(k, dtype=np.bool_)
        pend = np.zeros(k, dtype=np.int64)  # (an active_wait consumer's queued interrupts)
        size = k + 1
        for j in range(k):
            act[j] = active[p, cs[j]]
            if act[j]:
                size += int(ring[p, cs[j]])
        queue = np.zeros(size, dtype=np.int64)
        head, length, cur, irq_end = 0, 0, -1, _INF
        t = _INF
        for j in range(k):
            c = cs[j]
            t = min(t, a[o[j]] + s[j])
            if act[j]:  # (it sleeps until its next arrival, which raises an interrupt)
                wake_at[j] = a[o[j]] + s[j]
                continue
            _sleep(a, o[j], n[j], s[j], nx, q, st, wake_at, woke, j, a[o[j]] + s[j],
                   ring[p, c], passive[p, c], period[p, c], wm[p, c], tau[p, c], nl)
        events = 0
        while events <= max_events:
            events += 1
            sw = 0.0
            for j in range(k):  # (an active_wait backlog: a request per packet, each a turn)
                if st[j] == _DRAIN:
                    sw += w[p, cs[j]] * (q[j] if act[j] else 1.0)
            rho, work = 0.0, _queued(st, q, w[p], cs)
            for j in range(k):
                if st[j] != _FLOW:
                    continue
                c = cs[j]
                nx[j] = _arrived(a, o[j], n[j], s[j], nx[j], t)  # (served as they came)
                if nx[j] >= n[j]:
                    st[j] = _DONE
                elif _keeps_up(flow[c], w[p, c], sw, work, rho, cur):
                    rho += flow[c] * w[p, c]
                else:  # (no longer: from here its packets queue)
                    st[j] = _DRAIN
                    sw += w[p, c]
            r = max(1.0 - rho, 0.0) / sw if cur < 0 and sw > 0.0 else 0.0
            te, what, who, ahead = _INF, -1, -1, 0.0
            if cur >= 0:
                te, what, who = irq_end, _IRQ_END, cur
            for j in range(k):
                if act[j] and wake_at[j] < te:
                    te, what, who = wake_at[j], _ARRIVE, j
                elif not act[j] and st[j] == _SLEEP and wake_at[j] < te:
                    te, what, who = wake_at[j], _WAKE, j
            if r > 0.0:
                for j in range(k):
                    if st[j] == _DRAIN:
                        nn, rj = _served(act[j], n[j], nx[j], q[j], r)
                        e, _, _, known, gone = _drain(a, o[j], nn, s[j], nx[j], q[j], t, rj,
                                                      ring[p, cs[j]], te, LOOK_AHEAD)
                        if e < te or (e == te and what in (_WAKE, _ARRIVE)):
                            te, what, who, ahead = e, _DRAINED, j, gone
                        elif known < te:  # (a step: scans stay short, drains long)
                            te, what, who = known, _STEP, -1
            if te == _INF:
                break
            for j in range(k):  # the drains up to te (the one that ends: below)
                if st[j] == _DRAIN and not (what == _DRAINED and j == who):
                    nn, rj = _served(act[j], n[j], nx[j], q[j], r)
                    _, nx[j], q[j], _, gone = _drain(a, o[j], nn, s[j], nx[j], q[j], t, rj,
                                                     ring[p, cs[j]], te, nn)
                    nl[j] += gone
            t = te
            if what == _IRQ_END and act[cur]:  # (its packet joins the backlog, if room)
                j, c = cur, cs[cur]
                cur, irq_end = -1, _INF
                if q[j] < backlog[c]:
                    q[j] += 1.0
                    st[j] = _DRAIN
            elif what == _IRQ_END:
                j, c = cur, cs[cur]
                cur, irq_end = -1, _INF
                nw[j] += 1.0
                st[j] = _DRAIN
                _admit(a, o[j], n[j], s[j], nx, q, j, ring[p, c], t, nl)
                if q[j] <= 1e-9:
                    q[j] = 0.0
                    ne[j] += 1.0
                    _sleep(a, o[j], n[j], s[j], nx, q, st, wake_at, woke, j, t, ring[p, c],
                           passive[p, c], period[p, c], wm[p, c], tau[p, c], nl)
            elif what == _ARRIVE:  # (an interrupt for each arrival its ring has room for)
                j, c = who, cs[who]
                m = _arrived(a, o[j], n[j], s[j], nx[j], t) - nx[j]
                taken = min(m, max(int(ring[p, c]) - pend[j], 0))
                for _ in range(taken):
                    queue[(head + length) % size] = j
                    length += 1
                pend[j] += taken
                nx[j] += m
                wake_at[j] = a[o[j] + nx[j]] + s[j] if nx[j] < n[j] else _INF
            elif what == _WAKE and poll[p, cs[who]]:  # (it polls: no interrupt)
                j, c = who, cs[who]
                until = _quiet(st, wake_at, j, t) if cur < 0 and length == 0 else t
                if until == _INF:
                    break  # (the sleepers are done: what is left changes no count)
                if _keeps_up(flow[c], w[p, c], sw, work, rho, cur):  # (as a fluid)
                    st[j], q[j] = _FLOW, 0.0
                    nx[j] = _arrived(a, o[j], n[j], s[j], nx[j], t)
                elif until > t:  # alone on the core until then: its packets served as they come
                    nx[j], q[j] = _polled(a, o[j], n[j], s[j], nx[j], q[j], t, until, w[p, c],
                                          ring[p, c])
                    t = until
                    if q[j] > 1e-9:
                        st[j] = _DRAIN
                    else:
                        q[j] = 0.0
                        _sleep(a, o[j], n[j], s[j], nx, q, st, wake_at, woke, j, t,
                               ring[p, c], passive[p, c], period[p, c], wm[p, c], tau[p, c], nl)
                else:
                    st[j] = _DRAIN
                    _admit(a, o[j], n[j], s[j], nx, q, j, ring[p, c], t, nl)
            elif what == _WAKE:
                j, c = who, cs[who]
                m, last = 0, t
                if passive[p, c] and cur < 0 and length == 0 and sw == 0.0:
                    m, last = _empty_ticks(a, o[j], n[j], s[j], nx[j], q[j], t, ti[c],
                                           period[p, c], st, wake_at, j)
                if m > 0:  # (the core idle meanwhile: those wake-ups at once)
                    nw[j] += m
                    ne[j] += m
                    woke[j] = last
                    _sleep(a, o[j], n[j], s[j], nx, q, st, wake_at, woke, j, last + ti[c],
                           ring[p, c], True, period[p, c], wm[p, c], tau[p, c], nl)
                else:
                    st[j], woke[j], wake_at[j] = _WAKING, t, _INF
                    queue[(head + length) % size] = j
                    length += 1
            elif what == _DRAINED and act[who]:  # (its backlog served: it waits)
                j = who
                q[j] = 0.0
                st[j] = _DONE if nx[j] >= n[j] and pend[j] == 0 else _SLEEP
            elif what == _DRAINED:
                j, c = who, cs[who]
                nl[j] += ahead  # (lost on the way, as the look-ahead found)
                nx[j], q[j] = _arrived(a, o[j], n[j], s[j], nx[j], t), 0.0  # all taken
                if poll[p, c] and _keeps_up(flow[c], w[p, c], sw - w[p, c],
                                            _queued(st, q, w[p], cs), rho, cur):
                    st[j] = _FLOW
                else:
                    _sleep(a, o[j], n[j], s[j], nx, q, st, wake_at, woke, j, t, ring[p, c],
                           passive[p, c], period[p, c], wm[p, c], tau[p, c], nl)
            if cur < 0 and length > 0:  # the next queued interrupt starts (FIFO)
                cur = queue[head]
                head, length = (head + 1) % size, length - 1
                irq_end = t + ti[cs[cur]]
                if act[cur]:
                    pend[cur] -= 1
        if events > max_events:
            continue
        for j in range(k):
            c = cs[j]
            if poll[p, c] or act[j]:
                continue
            f = scale[p, c]
            wakes[p, c] = 1.0 + (nw[j] - 1.0) / f if nw[j] >= 1.0 else 0.0
            empty[p, c] = ne[j] / f
            lost[p, c] = nl[j] / n[j]
