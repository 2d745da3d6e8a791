"""The fast engine's shared hosts: how NICs on one core share its cycles.

`core_share` cuts a host's time axis where arrivals start or end; in each phase the core
serves active_wait's interrupts first and water-fills the rest between the consumers
(round-robin per request), and a fluid queue per transmission carries backlog and drops
from phase to phase (`fast_phases`, compiled, with the batched consumers' wake-up load
`wake_load`). `queue_wait` is the wait a woken drain first has for the others' work, and
`mix_waits` draws the part of that wait that random neighbours cause afresh at each drain.
docs/engines.md ("Shared hosts") has the derivations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from nictune.simulator.batch import ACTIVE, PASSIVE, SettingBatch
from nictune.simulator.fast_base import CBR, TINY, Workload, rowdot, rowsum
from nictune.simulator.fast_phases import phases

# the random part of a drain's wait: 4 · resid / (1 − ρ) where the even part is 3 ·
# (`queue_wait`; chosen on the developed-against fidelity grids, see fast.md)
RANDOM_WAIT = 4.0 / 3.0
# a drain's wait is at most this many packets of each other consumer that queues one
# request at a time (`round_robin`; 1 to 4 measured on the developed-against grids)
TURNS = 3.0


@dataclass
class _Share:
    """What a transmission gets from its core (arrays (P, T))."""

    rho_o: np.ndarray  # the others' load on the core, averaged over t's arrivals
    resid: np.ndarray  # Σ over the others of rate · work²/2 (residual-work rate), likewise
    high: np.ndarray  # interrupt load on the core (own included), averaged likewise
    r: np.ndarray  # packets/s t gets when the core saturates (inf: it keeps up)
    delivered: np.ndarray  # shared hosts: fluid packets delivered (NaN: use the closed form)
    q_end: np.ndarray  # shared hosts: packets queued when t's arrivals end
    tail: np.ndarray  # shared hosts: s from t's last arrival until its backlog is taken
    behind: np.ndarray  # shared hosts: share of t's arrival span it spends backlogged
    alt: np.ndarray  # shared hosts: share of t's span it keeps up beside a backlogged one
    alt_ws: np.ndarray  # ... and its cost per packet then (its w plus theirs)
    awake_rho: np.ndarray  # shared hosts: the others' load while t keeps up (NaN: none)
    queue_area: np.ndarray  # shared hosts: the queue integrated over time (packet·s)
    longest: np.ndarray  # shared hosts: the longest wait for the queue ahead, s


@dataclass(frozen=True)
class Wakes:
    """What the batched consumers' wake-up load depends on (per column: `local`, `ti`; the
    rest arrays (P, T)), and which of them still empty their rings (`sleeps`): only those
    are woken."""

    local: np.ndarray
    ti: np.ndarray
    period: np.ndarray
    n_wake: np.ndarray
    pas: np.ndarray
    wat: np.ndarray
    sleeps: np.ndarray
    delay: np.ndarray  # the wait for the others' queued work before a drain


def core_share(wl: Workload, b: SettingBatch, w: np.ndarray, irq_load: np.ndarray,
                soft_load: np.ndarray, cap_q: np.ndarray, wakes: Wakes | None = None
                ) -> _Share:
    """Share each core between the transmissions whose `irq_core` it is.

    A transmission alone on its host gets 1 − its own interrupt load. On a shared host the
    time axis is cut where arrivals start or end; in each phase the core serves interrupts
    first and shares the rest FIFO by request (`fast_phases`), and a fluid queue per
    transmission (capacity `cap_q`) carries backlog and drops from phase to phase. The
    interrupts served first are active_wait's (`irq_load`); the batched modes' wake-ups
    (`soft_load`) slow the others down but vanish when the core saturates (a consumer that
    never empties its ring is never woken); given `wakes` (which consumers still empty
    their rings), the wake-ups of those that do count against the others' share. Without
    `wakes` it is a first estimate: every row in closed form, as if its cores kept up.
    """
    shape = w.shape
    cpu = np.clip(1.0 - irq_load, 0.0, None)
    r = np.where(wl.local[None, :] * w > cpu, cpu / w, np.inf)
    share = _Share(rho_o=np.zeros(shape), resid=np.zeros(shape), high=irq_load.copy(), r=r,
                   delivered=np.full(shape, np.nan), q_end=np.zeros(shape),
                   tail=np.zeros(shape), behind=np.zeros(shape), alt=np.zeros(shape),
                   alt_ws=np.zeros(shape), awake_rho=np.full(shape, np.nan),
                   queue_area=np.zeros(shape), longest=np.zeros(shape))
    for cols in wl.groups:
        _share_host(wl, b, w, irq_load, soft_load, cap_q, cols, share, wakes)
    return share


def _share_host(wl: Workload, b: SettingBatch, w: np.ndarray, irq_load: np.ndarray,
                soft_load: np.ndarray, cap_q: np.ndarray, cols: np.ndarray, out: _Share,
                wakes: Wakes | None) -> None:
    """The phases of one shared host (columns `cols`), written into `out`.

    A member of a phase is a transmission whose packets arrive in it or that still has a
    backlog; interrupts come only from arriving ones. What is queued after the last phase
    drains with every holder backlogged, re-shared each time one of them empties. Rows
    whose cores keep up in every phase never queue: their shares are sums over the overlap
    of the arrival spans, in closed form; only the others go through the phases. A
    transmission alone on its core keeps the closed form of a host of its own (`_alone`).
    """
    solo = (b.irq_core[:, cols, None] == b.irq_core[:, None, cols]).sum(axis=2) == 1
    r_solo = out.r[:, cols].copy()
    lam = wl.rate[cols]
    wj = w[:, cols]
    avg = lam / np.maximum(wl.local[cols], TINY)
    irq = irq_load[:, cols] * avg
    soft = irq + soft_load[:, cols] * avg
    # where a core saturates (`_wake` in `fast_phases`), a passive consumer's wake-ups take the
    # core all along: its timer ticks through the gaps between onoff bursts too (empty
    # wake-ups). The averages of cores that keep up stay weighted by the bursts (counting
    # the gaps there as well made more rows worse than better: fast.md, "Tried")
    ticking = np.where(b.mode[:, cols] == PASSIVE, 1.0, avg)
    own = lam * wj + soft
    sq = (lam * wj * wj + soft * wl.ti[cols]) / 2.0
    woken = soft_load[:, cols] * avg * (0.0 if wakes is None else wakes.sleeps[:, cols])
    same = (b.irq_core[:, cols, None] == b.irq_core[:, None, cols]).astype(float)
    start = wl.start[cols]
    end = start + wl.span[cols]
    edges, arriving = phases_of(wl, cols)
    lo, hi = edges[:-1], edges[1:]
    inflow = wl.n[cols] / np.maximum(wl.span[cols], TINY)  # n packets over the span
    # a core that keeps up in a phase: its members' work and interrupts fit
    load = np.matmul(same * (inflow * wj + irq + woken)[:, None, :], arriving.T)
    load -= woken[:, :, None] * arriving.T[None]
    busy = np.flatnonzero(((load > 1.0 - 1e-9) & (arriving.T[None] > 0)).any(axis=(1, 2)))
    span = np.maximum(wl.span[cols], TINY)
    fluid = wl.span[cols] > 0
    overlap = np.einsum("ki,kj,k->ij", arriving, arriving, hi - lo)  # s both arrive
    shared = same * overlap[None]
    tot = np.matmul(shared, np.stack([irq, own, sq], axis=2))
    alone = np.diagonal(overlap)
    out.rho_o[:, cols] = (tot[:, :, 1] - own * alone) / span
    out.resid[:, cols] = (tot[:, :, 2] - sq * alone) / span
    out.high[:, cols] = np.where(fluid, tot[:, :, 0] / span, out.high[:, cols])
    out.delivered[:, cols] = np.where(fluid, wl.n[cols], np.nan)
    out.q_end[:, cols] = 0.0
    out.tail[:, cols] = 0.0
    out.behind[:, cols] = 0.0
    out.alt[:, cols] = 0.0
    out.r[:, cols] = np.inf
    if not busy.size or wakes is None:  # (a first estimate stops here)
        _alone(out, cols, solo, r_solo)
        return
    cap = cap_q[busy][:, cols]
    weight = np.where(b.mode[busy][:, cols] == ACTIVE, cap, 1.0)  # requests it can queue
    held = (b.ring_slots[busy][:, cols] * wl.ti[cols]) * (irq[busy] > 0)  # (s of handlers)
    at = np.ix_(busy, cols)
    t = phases(edges, arriving, inflow, end, same[busy], wj[busy], irq[busy],
               sq[busy], cap, weight, held, wakes.local[cols], wakes.ti[cols],
               wakes.period[at], wakes.n_wake[at], wakes.pas[at], wakes.wat[at],
               np.broadcast_to(wakes.delay, w.shape)[at],
               wakes.sleeps[at].astype(float), ticking[busy])
    rows = busy[:, None]
    out.rho_o[rows, cols] = t.rho / span
    out.resid[rows, cols] = t.resid / span
    out.high[rows, cols] = np.where(fluid, t.high / span, out.high[rows, cols])
    out.delivered[rows, cols] = np.where(fluid, wl.n[cols] - t.dropped, np.nan)
    out.q_end[rows, cols] = t.q_end
    out.queue_area[rows, cols] = t.queue_area
    out.longest[rows, cols] = t.longest
    out.tail[rows, cols] = np.clip(t.fin - end, 0.0, None)
    out.behind[rows, cols] = np.clip(t.behind / span, 0.0, 1.0)
    out.alt[rows, cols] = np.clip(t.alt_t / span, 0.0, 1.0)
    out.alt_ws[rows, cols] = t.alt_w / np.maximum(t.alt_t, TINY)
    out.awake_rho[rows, cols] = np.where(t.awake_t > 0, t.awake_rho / np.maximum(
        t.awake_t, TINY), np.nan)
    # (behind at all — dropping or not, caught up by the end or not: one wake-up takes
    # that stretch, `_saturate`)
    out.r[rows, cols] = np.where((t.dropped > 0.5) | (t.q_end >= 1.0) | (t.behind > 0.0),
                                 t.taken_own / span, np.inf)
    _alone(out, cols, solo, r_solo)


# what `_Share` holds for a transmission that has a core to itself (as on a host of its own)
_ALONE = {"delivered": np.nan, "q_end": 0.0, "tail": 0.0, "behind": 0.0, "alt": 0.0,
          "alt_ws": 0.0, "awake_rho": np.nan, "queue_area": 0.0, "longest": 0.0}


def _alone(out: _Share, cols: np.ndarray, alone: np.ndarray, r: np.ndarray) -> None:
    """Transmissions with a core to themselves (`alone`, (P, cols)) on a shared host: the
    memory bus is all they share, and it is in their w, so they take the closed form of a
    host of their own (`r`: its rate past the core, `core_share`). The phases take the
    packets as arriving evenly over the span, so an onoff burst faster than the core
    went unseen: a busy-poller's bursts at 1.33 times its core waited 2.2 µs, the DES
    78 µs (now 79 µs)."""
    out.r[:, cols] = np.where(alone, r, out.r[:, cols])
    for name, value in _ALONE.items():
        field = getattr(out, name)
        field[:, cols] = np.where(alone, value, field[:, cols])


def mix_waits(res: dict[str, np.ndarray], sel: np.ndarray, p: np.ndarray,
              nodes: dict[str, np.ndarray]) -> None:
    """The results of `sel` when part of the wait before each drain is random.

    An evenly spaced neighbour's work comes at the same place in each of its cycles, and
    the mean wait it causes (`queue_wait`) is what every drain sees; a random neighbour's
    (Poisson, onoff) is queued or not when a drain starts, and a mean stands for a spread
    that decides whether the drain ends before the next tick or packet. That part is none
    when the core is free of their work and about exponential otherwise (`random_wait`:
    weights `p`, (K + 1, m), no wait first, the usual approximation of an M/G/1 wait).
    `res` holds the mode's results with none of it, `nodes` (each field (K, m)) those at
    the exponential's nodes. Each wake-up draws its own wait, so the mean cycle is the
    mixture (wake-ups: its harmonic mean, empty ones in proportion); latency, duration
    and deliveries are the nodes' weighted mean.
    """
    def stack(key: str) -> np.ndarray:
        return np.vstack([res[key][sel], nodes[key]])

    counts = np.maximum(stack("interrupts"), TINY)
    inv = (p / counts).sum(axis=0)
    res["empty"][sel] = (p * stack("empty") / counts).sum(axis=0) / inv
    res["interrupts"][sel] = 1.0 / inv
    for key in ("delivered", "duration", "lat_mean", "lat_p99"):
        res[key][sel] = (p * stack(key)).sum(axis=0)


def random_share(wl: Workload, b: SettingBatch, load: np.ndarray) -> np.ndarray:
    """The share of the others' load on each transmission's core (`load` and the result
    arrays (P, T); 0 off shared hosts) that arrives at random (Poisson or onoff arrivals)
    rather than evenly spaced (cbr)."""
    out = np.zeros(load.shape)
    for cols in wl.groups:
        core = b.irq_core[:, cols]
        same = (core[:, :, None] == core[:, None, :]) & ~np.eye(cols.size, dtype=bool)
        lc = load[:, cols, None]
        tot = np.matmul(same.astype(float), lc)[:, :, 0]
        rand = np.matmul(same.astype(float), lc * (wl.arrival[cols] != CBR)[None, :, None])
        out[:, cols] = np.where(tot > 0, rand[:, :, 0] / np.maximum(tot, TINY), 0.0)
    return out


class Partners(NamedTuple):
    """How a passive consumer's drains meet its batched neighbours' on the same core.

    Partners — passive consumers with the same timer (same period and start, as the
    transmissions of one NIC have) — wake at the same ticks, so each drain alternates with
    theirs every time. Batched neighbours on other timers drain at moments of their own,
    which a drain meets or not (`apart`). Arrays (P, T); zero where a consumer has none."""

    load: np.ndarray  # the partners' packet load, in the others' average share
    resid: np.ndarray  # their residual-work rate, likewise
    drain: np.ndarray  # the time they add to each drain instead
    pairs: list[tuple[np.ndarray, np.ndarray]]  # per host: (columns, weights (P, i, j))
    apart: np.ndarray  # the packet load of the batched neighbours on other timers
    apart_resid: np.ndarray  # their residual-work rate
    present: np.ndarray  # the share of the consumer's span some partner overlaps


def partners(wl: Workload, b: SettingBatch, w: np.ndarray, pas: np.ndarray,
             wat: np.ndarray, period: np.ndarray) -> Partners:
    """Each passive consumer's partners and batched neighbours (`Partners`). A drain of q
    packets beside a partner's of q_j alternates with it packet by packet (round-robin):
    it takes min(q, q_j) of the partner's packets, and half of its wake-up, on top of its
    own; q is about the packets of one period, capped by the ring. Weighted by how much of
    the consumer's span the two overlap. (The same start stands for the same first tick:
    the DES ticks from each one's first arrival, a few gaps apart for Poisson arrivals —
    close enough for the rates a shared NIC carries.)"""
    out = Partners(*(np.zeros(w.shape) for _ in range(3)), [],
                   *(np.zeros(w.shape) for _ in range(3)))
    for cols in wl.groups:
        per, pc = period[:, cols], pas[:, cols]
        start = wl.start[cols]
        offset = np.mod(start[None, :, None] - start[None, None, :], per[:, :, None])
        near = (pc[:, :, None] & ~np.eye(cols.size, dtype=bool)
                & (b.irq_core[:, cols, None] == b.irq_core[:, None, cols]))
        timer = (pc[:, None, :] & (per[:, :, None] == per[:, None, :])
                 & (np.minimum(offset, per[:, :, None] - offset) < 1e-3 * per[:, :, None]))
        apart = near & (pas | wat)[:, None, cols] & ~timer
        same = near & timer
        if not (same.any() or apart.any()):
            continue
        overlap = _overlap(wl, cols)[None]  # (1, i, j)
        weight = same * overlap
        lam, wj = wl.local[cols], w[:, cols]
        q = np.minimum(lam * per, b.ring_slots[:, cols])
        out.load[:, cols] = rowdot(weight, lam * wj)
        out.resid[:, cols] = rowdot(weight, lam * wj * wj / 2.0)
        taken = np.minimum(q[:, :, None], q[:, None, :]) * wj[:, None, :]
        out.drain[:, cols] = rowsum(weight, taken + wl.ti[cols] / 2.0)
        out.pairs.append((cols, weight))
        out.present[:, cols] = _with_partner(wl, cols, same)
        out.apart[:, cols] = rowdot(apart * overlap, lam * wj)
        out.apart_resid[:, cols] = rowdot(apart * overlap, lam * wj * wj / 2.0)
    return out


def alternation_lost(wl: Workload, b: SettingBatch, w: np.ndarray, part: Partners,
                     queued: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Packets each passive consumer loses per tick while it alternates with its partners
    (arrays (P, T); `queued`: the packets a tick finds). Each gets one packet per round,
    1 / (w + Σ w_j) packets/s; one whose packets arrive faster than that fills its ring
    for as long as a partner still has packets (q_j / (rate − λ_j), at most a period)
    and loses what goes beyond it."""
    out = np.zeros(w.shape)
    for cols, weight in part.pairs:
        same = weight > 0
        lam, wj, q = wl.local[cols], w[:, cols], queued[:, cols]
        rate = 1.0 / (wj + rowdot(same.astype(float), wj))
        empties = q / np.maximum(rate - lam, TINY)
        spell = np.minimum(period[:, cols], (same * empties[:, None, :]).max(axis=2))
        grown = q + np.clip(lam - rate, 0.0, None) * spell
        out[:, cols] = np.clip(grown - b.ring_slots[:, cols], 0.0, None) * weight.max(axis=2)
    return out


def _with_partner(wl: Workload, cols: np.ndarray, same: np.ndarray) -> np.ndarray:
    """(P, i): the share of transmission i's arrival span in which at least one of its
    partners (`same`, (P, i, j)) arrives too — the union of their overlaps, not the
    largest (partners one after the other can cover the whole span)."""
    edges, arriving = phases_of(wl, cols)
    partnered = np.einsum("pij,kj->pik", same.astype(float), arriving) > 0
    return (partnered * arriving.T[None]) @ np.diff(edges) / np.maximum(wl.span[cols], TINY)


def phases_of(wl: Workload, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One host's time axis cut where arrivals start or end: the edges (phases + 1,) and
    which of the columns `cols` arrive in each phase (phases, m), 1 or 0."""
    start = wl.start[cols]
    end = start + wl.span[cols]
    edges = np.unique(np.concatenate([start, end]))
    lo, hi = edges[:-1], edges[1:]
    return edges, ((start[None, :] <= lo[:, None] + TINY)
                   & (end[None, :] >= hi[:, None] - TINY)).astype(float)


def _overlap(wl: Workload, cols: np.ndarray) -> np.ndarray:
    """(i, j): the share of transmission i's arrival span that j's overlaps (one host's
    columns `cols`)."""
    start, span = wl.start[cols], wl.span[cols]
    end = start + span
    both = np.clip(np.minimum(end[:, None], end[None, :])
                   - np.maximum(start[:, None], start[None, :]), 0.0, None)
    return both / np.maximum(span, TINY)[:, None]


def neighbours(wl: Workload, b: SettingBatch, x: np.ndarray, which: np.ndarray
               ) -> np.ndarray:
    """Σ x_j (x: (P, T)) over the other transmissions on each one's core for which `which`
    (P, T) holds, each weighted by the share of its span they overlap."""
    out = np.zeros(x.shape)
    for cols in wl.groups:
        on = ((b.irq_core[:, cols, None] == b.irq_core[:, None, cols])
              & ~np.eye(cols.size, dtype=bool) & which[:, None, cols]) * _overlap(wl, cols)
        out[:, cols] = rowdot(on, x[:, cols])
    return out


def round_robin(w: np.ndarray, ws: np.ndarray, wait: np.ndarray, one: np.ndarray,
                first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A consumer's cost per packet `ws` and wait before a drain `wait`, bounded by the
    core's round-robin: a neighbour that queues one request at a time (busy_poll, or a
    batched consumer draining) gets one packet per packet of the drain, however loaded it
    is, so a packet costs at most w + Σ w_j (`one`: `one_each`), and the wait is at most
    TURNS of those packets each — the one in service and those interleaved while the work
    that piled up during the wake-up's own Ti lasts. Both are stretched by what is served
    first (`first`: active_wait's interrupts and packets, one request each). The batched
    neighbours' wake-ups are served first too, but counting them here made more rows
    worse than better (fast.md, "What changed in the fourteenth session")."""
    return (np.minimum(ws, w / np.clip(1.0 - first, 0.02, None) + one),
            np.minimum(wait, TURNS * one))


def poll_wait(wl: Workload, b: SettingBatch, w: np.ndarray, served: np.ndarray,
              behind: np.ndarray, polls: np.ndarray, first: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The wait of a wake-up's first request beside busy-pollers (`polls`, (P, T)), and the
    chance that it waits at all. A busy-poller has one request at a time and the core takes
    requests FIFO, so each is ahead of the drain at most once: in service when the wake-up
    comes (u_j = `served`_j·w_j of the time; the wake-up's Ti preempts it), with w_j/2 of
    its packet left on average; else with a whole packet queued ahead when it is
    backlogged (`behind`_j) or notices a packet during the wake-up's own Ti
    (1 − e^(−λ_j·Ti)). Stretched by what is served first (`first`)."""
    mean, idle = np.zeros(w.shape), np.ones(w.shape)
    for cols in wl.groups:
        on = ((b.irq_core[:, cols, None] == b.irq_core[:, None, cols])
              & ~np.eye(cols.size, dtype=bool) & polls[:, None, cols]) * _overlap(wl, cols)
        wj = w[:, cols]
        u = np.clip(served[:, cols] * wj, 0.0, 1.0)[:, None, :]
        back = behind[:, cols][:, None, :]
        notice = 1.0 - np.exp(-wl.local[cols][None, None, :] * wl.ti[cols][None, :, None])
        queued = (1.0 - u) * (back + (1.0 - back) * notice)  # (P, i, j)
        mean[:, cols] = rowsum(on, u * wj[:, None, :] / 2.0 + queued * wj[:, None, :])
        idle[:, cols] = np.prod(1.0 - on * (u + queued), axis=2)
    return mean / np.clip(1.0 - first, 0.02, None), 1.0 - idle


def one_each(turns: np.ndarray, first: np.ndarray) -> np.ndarray:
    """What a request waits for one packet of each neighbour with one request at a time
    (`turns`: Σ w_j), stretched by what is served first (`first`)."""
    return turns / np.clip(1.0 - first, 0.02, None)


def queue_wait(resid: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """How long a wake-up's drain first waits for the others' packet work (`resid`: their
    Σ λ·b²/2, `rho`: their load): the core takes one request per consumer in turn, so the
    drain's first packet waits for the packet in service (its residual, Σ λ·b²/2) and for
    one whole packet of each other consumer with a request queued (about ρ_j of the time:
    Σ λ·b², twice as much), stretched by what arrives meanwhile (1 / (1 − ρ))."""
    return 3.0 * np.clip(resid, 0.0, None) / np.clip(1.0 - rho, 0.02, None)


def per_packet(w: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """A packet's cost w stretched by the others' load `rho` on the core (w / (1 − ρ),
    the core at most 98 % theirs)."""
    return w / np.clip(1.0 - rho, 0.02, None)
