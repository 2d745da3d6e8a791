"""The phases of a shared host whose cores saturate (`fast_shared._share_host`), compiled
(numba): one row (candidate plan) at a time, each phase stepped to the times a backlog
empties, with the core water-filled between its members at each step (`_waterfill`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from nictune.simulator.compiled import compiled

TINY = 1e-12  # fast_base.TINY, here: the compiled code holds its own module's constants


class Totals(NamedTuple):
    """What `phases` integrates per (row, transmission), in s or packets."""

    rho: np.ndarray  # the others' use of the core while t arrives, integrated
    resid: np.ndarray  # their residual-work rate, integrated
    high: np.ndarray  # the interrupt load, integrated
    dropped: np.ndarray
    q_end: np.ndarray  # queued when t's arrivals end
    taken_own: np.ndarray  # packets taken while arriving
    fin: np.ndarray  # when the last packet is taken
    behind: np.ndarray  # time backlogged while arriving
    alt_t: np.ndarray  # time keeping up beside a backlogged neighbour
    alt_w: np.ndarray  # ... times the cost per packet then
    awake_t: np.ndarray  # time keeping up while arriving
    awake_rho: np.ndarray  # ... times the others' use of the core then
    queue_area: np.ndarray  # the queue integrated over time (packet·s): Little's law
    longest: np.ndarray  # the longest a packet waits for the queue ahead of it, s


def phases(edges: np.ndarray, arriving: np.ndarray, inflow: np.ndarray, end: np.ndarray,
           same: np.ndarray, wj: np.ndarray, irq: np.ndarray, sq: np.ndarray,
           cap: np.ndarray, weight: np.ndarray, held: np.ndarray, wake_local: np.ndarray,
           wake_ti: np.ndarray, period: np.ndarray, n_wake: np.ndarray, pas: np.ndarray,
           wat: np.ndarray, delay: np.ndarray, sleeps: np.ndarray, ticking: np.ndarray
           ) -> Totals:
    """The host's phases, one after the other, for rows whose cores saturate (`Totals`):
    the others' load (what they use of the core, not what they ask for: a consumer that
    cannot keep up slows the others down by its share only), residual work and interrupt
    load integrated over time, the packets dropped, the queue when the arrivals end, the
    packets taken while arriving, when the last packet is taken, how long each one is
    behind while its packets arrive, how long it keeps up beside a backlogged neighbour
    (with that time's cost per packet integrated: its w plus theirs, see below), how
    long it keeps up at all (with the others' load then integrated), its queue integrated
    over time (linear within a step, up to the ring: `_area`) and the longest wait for
    it (the queue over the rate it is taken at then: at the end of each step while
    packets arrive, at the start of each step of the drain after).

    `edges` (phases + 1,), `arriving` (phases, m), `inflow` and `end` (m,) are the host's,
    `same` (rows, m, m) says which share a core, `wake_local` and `wake_ti` are per column
    (m,), the rest (rows, m). The sleeping batched consumers' wake-ups take the core first
    (`_wake`: `wake_local`, `wake_ti` per column, `period` … `delay` per element, times
    `sleeps` and `ticking`). A consumer that drains beside a backlogged one alternates
    with it packet by packet, so its drains are long and its wake-ups rare: its cost is
    its own w plus theirs.

    Interrupts past the core (active_wait, Σ λ·Ti > 1 while they arrive): the handlers
    not run yet wait in the rings (`held`: at most a ring of them, in s of handler work),
    and the core runs them, before any packet work, once the arrivals ease — a receive
    livelock outlasts its overload (two streams of one NIC: 74 ms of handlers after 31 ms
    of overload in the DES).
    """
    return Totals(*_phases(edges, arriving, inflow, end, same, wj, irq, sq, cap, weight,
                           held, wake_local, wake_ti, period, n_wake, pas, wat, delay,
                           sleeps, ticking))


@compiled
def _phases(edges: np.ndarray, arriving: np.ndarray, inflow: np.ndarray, end: np.ndarray,
            same: np.ndarray, wj: np.ndarray, irq: np.ndarray, sq: np.ndarray,
            cap: np.ndarray, weight: np.ndarray, held: np.ndarray, wake_local: np.ndarray,
            wake_ti: np.ndarray, period: np.ndarray, n_wake: np.ndarray, pas: np.ndarray,
            wat: np.ndarray, delay: np.ndarray, sleeps: np.ndarray, ticking: np.ndarray
            ) -> np.ndarray:
    """`phases`, row by row: `Totals`' fields stacked (14, rows, m)."""
    rows, m = wj.shape
    out = np.zeros((14, rows, m))
    for r in range(rows):
        _row(edges, arriving, inflow, end, same[r], wj[r], irq[r], sq[r], cap[r],
             weight[r], held[r], wake_local, wake_ti, period[r], n_wake[r], pas[r], wat[r],
             delay[r], sleeps[r], ticking[r], out[:, r])
    return out


@compiled
def _row(edges: np.ndarray, arriving: np.ndarray, inflow: np.ndarray, end: np.ndarray,
         same: np.ndarray, ws: np.ndarray, irq: np.ndarray, sq: np.ndarray, cap: np.ndarray,
         weight: np.ndarray, held: np.ndarray, wake_local: np.ndarray, wake_ti: np.ndarray,
         period: np.ndarray, n_wake: np.ndarray, pas: np.ndarray, wat: np.ndarray,
         delay: np.ndarray, sleeps: np.ndarray, ticking: np.ndarray, out: np.ndarray
         ) -> None:
    """`_phases` of one row, into `out` (14, m)."""
    m = ws.size
    rho, resid, high, dropped, q_end, taken_own, fin, behind, alt_t, alt_w, aw_t, aw_rho = (
        out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7], out[8], out[9],
        out[10], out[11])
    area, longest = out[12], out[13]
    fin[:] = end
    q = np.zeros(m)
    pend = np.zeros(m)  # handler work waiting in the rings, s
    h, hs, catching, clears, growth, fills = (np.zeros(m), np.zeros(m), np.zeros(m, np.bool_),
                                              np.zeros(m), np.zeros(m), np.zeros(m))
    member, backlog, demand, cpu, queued, alternate, woken, used = (
        np.zeros(m, np.bool_), np.zeros(m, np.bool_), np.zeros(m), np.zeros(m),
        np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m))
    pairs = np.zeros((m, m))
    for k in range(edges.size - 1):
        lo, length = edges[k], edges[k + 1] - edges[k]
        act = arriving[k]
        if length <= 0.0:
            continue
        if not np.any((act > 0.0) | (q > 0.5)):
            continue
        # what the arriving members on each one's core add up to: interrupts, residual work
        for i in range(m):
            hi_, sq_i = 0.0, 0.0
            for j in range(m):
                hi_ += same[i, j] * (irq[j] * act[j])
                sq_i += same[i, j] * (sq[j] * act[j])
            h[i] = hi_
            resid[i] += act[i] * (sq_i - sq[i] * act[i]) * length
            high[i] += act[i] * hi_ * length
        # the rates change inside the phase when a backlog empties: step to each such time
        now = 0.0
        for sub in range(3 * m + 1):
            hs[:] = h
            handlers = np.any(pend > 0.0) or np.any(h >= 1.0)
            if handlers:
                # handlers held over from an overload take the core first; in an overload
                # the rings fill with handlers not run yet; a full ring sheds what comes
                # (so the core serves the others): only the ones with room left grow, and
                # only while they alone ask for more than the core
                for i in range(m):
                    owed, free = 0.0, 0.0
                    for j in range(m):
                        owed += same[i, j] * pend[j]
                        free += same[i, j] * _room(act[j], irq[j], pend[j], held[j])
                    clears[i] = owed / max(1.0 - h[i], 1e-9)
                    catching[i] = owed > 1e-12 and h[i] < 1.0
                    room = _room(act[i], irq[i], pend[i], held[i])
                    growth[i] = room * (1.0 - 1.0 / max(free, 1.0)) if free >= 1.0 else 0.0
                    fills[i] = ((held[i] - pend[i]) / max(growth[i], TINY) if growth[i] > 0.0
                                else math.inf)
                    if catching[i]:
                        hs[i] = 1.0
            for i in range(m):
                member[i] = act[i] > 0.0 or q[i] > 0.5
                backlog[i] = q[i] > 0.5
                demand[i] = 1e30 if backlog[i] else act[i] * inflow[i]
                cpu[i] = max(1.0 - hs[i], 0.0)
            for i in range(m):
                for j in range(m):
                    pairs[i, j] = same[i, j] if member[i] and member[j] else 0.0
            # a member with a backlog takes all it can get (round-robin share of the rest)
            rk = _waterfill(pairs, demand, ws, cpu, weight)
            # ... and so does one whose queue starts to grow; sleeping members' wake-ups
            # take their share of the core first
            for i in range(m):
                queued[i] = ws[i] if backlog[i] or rk[i] < act[i] * inflow[i] else 0.0
            for i in range(m):
                total = 0.0
                for j in range(m):
                    total += same[i, j] * queued[j]
                alternate[i] = ws[i] + total - queued[i]
                woken[i] = 0.0
                if act[i] > 0.0 and queued[i] == 0.0:
                    woken[i] = _wake(wake_local[i], wake_ti[i],
                                     alternate[i] / max(1.0 - hs[i], 0.02), period[i],
                                     n_wake[i], pas[i], wat[i], delay[i]
                                     ) * sleeps[i] * ticking[i] * act[i]
            for i in range(m):
                total = 0.0
                for j in range(m):
                    total += same[i, j] * woken[j]
                cpu[i] = max(1.0 - hs[i] - total + woken[i], 0.0)
            rk = _waterfill(pairs, demand, ws, cpu, weight)
            step = length - now
            if sub < 3 * m:
                for i in range(m):
                    rate = min(rk[i], 1e300)
                    net = rate - act[i] * inflow[i]
                    if backlog[i] and net > 0.0:
                        step = min(step, q[i] / max(net, TINY))
                    if handlers:
                        if catching[i]:
                            step = min(step, clears[i])
                        step = min(step, fills[i])
            for i in range(m):
                if handlers:
                    if h[i] >= 1.0:
                        pend[i] = min(pend[i] + growth[i] * step, held[i])
                    elif catching[i]:
                        pend[i] *= max(1.0 - step / max(clears[i], TINY), 0.0)
                rate = min(rk[i], 1e300)
                avail = q[i] + act[i] * inflow[i] * step
                taken = min(avail, rate * step) if member[i] else 0.0
                # a backlog left after the arrivals empties inside this phase
                if act[i] == 0.0 and backlog[i] and taken >= avail - 1e-9:
                    fin[i] = lo + now + q[i] / max(rate, TINY)
                taken_own[i] += act[i] * taken
                dropped[i] += max(avail - taken - cap[i], 0.0)
                before, grown = q[i], avail - taken
                q[i] = min(grown, cap[i])
                area[i] += _area(before, grown, cap[i], step)
                if q[i] > 0.5:
                    longest[i] = max(longest[i], q[i] / max(rate, TINY))
                if backlog[i] or q[i] > 0.5:
                    behind[i] += act[i] * step
                elif act[i] > 0.0:
                    aw_t[i] += act[i] * step
                if act[i] > 0.0 and queued[i] == 0.0 and alternate[i] > ws[i] * (1 + 1e-9):
                    alt_t[i] += act[i] * step
                    alt_w[i] += act[i] * step * alternate[i] / max(1.0 - hs[i], 0.02)
                used[i] = taken * ws[i] + (irq[i] + woken[i]) * act[i] * step
            for i in range(m):
                total = 0.0
                for j in range(m):
                    total += same[i, j] * used[j]
                others = act[i] * (total - used[i])
                rho[i] += others
                if not (backlog[i] or q[i] > 0.5):
                    aw_rho[i] += others
            now += step
            if not now < length * (1 - 1e-12):
                break
        for i in range(m):
            if act[i] > 0.0 and abs(end[i] - edges[k + 1]) <= TINY:
                q_end[i] = q[i]
    # after the last arrival: the backlogs drain; rates change each time one empties
    # (handlers still held are left out: adding them made the tails longer than the DES's)
    now = edges[-1]
    ones = np.ones(m)
    for _ in range(m):
        if not np.any(q > 0.5):
            break
        for i in range(m):
            backlog[i] = q[i] > 0.5
            demand[i] = 1e30 if backlog[i] else 0.0
        for i in range(m):
            for j in range(m):
                pairs[i, j] = same[i, j] if backlog[i] and backlog[j] else 0.0
        rk = _waterfill(pairs, demand, ws, ones, weight)
        step = math.inf
        for i in range(m):
            if backlog[i]:
                step = min(step, q[i] / max(min(rk[i], 1e300), TINY))
        if not math.isfinite(step):
            step = 0.0
        for i in range(m):
            if backlog[i]:
                until = q[i] / max(min(rk[i], 1e300), TINY)
                longest[i] = max(longest[i], until)
                if until <= step * (1 + 1e-9):
                    fin[i] = now + until
                    area[i] += 0.5 * q[i] * until
                    q[i] = 0.0
                else:
                    after = max(q[i] - min(rk[i], 1e300) * step, 0.0)
                    area[i] += 0.5 * (q[i] + after) * step
                    q[i] = after
        now += step


@compiled
def _area(before: float, grown: float, cap: float, step: float) -> float:
    """The integral over a step of a queue that goes linearly from `before` to `grown`
    but holds at most `cap` (a ring that fills in the step stays full to its end)."""
    if grown <= cap:
        return 0.5 * (before + grown) * step
    if before >= cap:
        return cap * step
    rise = (cap - before) / (grown - before) * step
    return 0.5 * (before + cap) * rise + cap * (step - rise)


@compiled
def _room(act: float, irq: float, pend: float, held: float) -> float:
    """The interrupt load an arriving member adds to its ring's held handlers (none once
    the ring is full of them)."""
    return act * irq if pend < held * (1.0 - 1e-9) else 0.0


def wake_load(local: np.ndarray, ti_col: np.ndarray, w: np.ndarray, period: np.ndarray,
              n_wake: np.ndarray, pas: np.ndarray, wat: np.ndarray,
              delay: np.ndarray | float) -> np.ndarray:
    """CPU share of the batched modes' wake-ups (Ti once per cycle of k timer periods, or per
    n_w packets plus what arrives while draining) for a packet cost w (arrays (rows, cols);
    `local` and `ti_col` per column). `delay`: the wait before each drain (`queue_wait`),
    which lengthens the cycle. `_wake` of each element."""
    floats = [np.ascontiguousarray(a, dtype=float) for a in (
        local, ti_col, w, period, n_wake, np.broadcast_to(delay, np.shape(w)))]
    flags = [np.ascontiguousarray(a, dtype=np.bool_) for a in (pas, wat)]
    return _wake_each(*floats[:5], *flags, floats[5])


@compiled
def _wake_each(local: np.ndarray, ti: np.ndarray, w: np.ndarray, period: np.ndarray,
               n_wake: np.ndarray, pas: np.ndarray, wat: np.ndarray, delay: np.ndarray
               ) -> np.ndarray:
    rows, cols = w.shape
    out = np.zeros((rows, cols))
    for p in range(rows):
        for t in range(cols):
            out[p, t] = _wake(local[t], ti[t], w[p, t], period[p, t], n_wake[p, t],
                              pas[p, t], wat[p, t], delay[p, t])
    return out


@compiled
def _wake(lam: float, ti: float, w: float, period: float, n_wake: float, pas: bool,
          wat: bool, delay: float) -> float:
    """The wake-up load of one batched consumer (0 for the other modes)."""
    free = np.maximum(1.0 - lam * w, 1e-6)
    if pas:
        k = np.maximum(1.0, np.ceil((ti + delay) / (period * free) - 1e-9))
        return ti / (k * period)
    if wat:
        return lam * ti / (n_wake + lam * (ti + delay + n_wake * w) / free)
    return 0.0


@compiled
def _waterfill(pairs: np.ndarray, lam: np.ndarray, w: np.ndarray, cpu: np.ndarray,
               weight: np.ndarray) -> np.ndarray:
    """Share `cpu` FIFO by request between the members sharing each one's core (`pairs`):
    the packet rate r each member gets (inf if λ ≤ r).

    A consumer has one request queued at a time (round-robin per packet), active_wait one
    per packet in its backlog, so past saturation it gets `weight` (its backlog) times the
    others' rate. r_i = weight_i·L where L solves Σ_j pairs_ij·min(λ_j, weight_j·L)·w_j =
    cpu_i; the sum is piecewise linear with knots at λ_j / weight_j: evaluated at every
    knot, the highest knot below cpu_i fixes who is served in full and who shares the rest.
    """
    m = w.size
    r = np.full(m, math.inf)
    for i in range(m):
        asked = 0.0
        for j in range(m):
            asked += pairs[i, j] * (lam[j] * w[j])
        if not asked > cpu[i]:  # the core keeps up
            continue
        top = -math.inf
        for k in range(m):
            key = lam[k] / weight[k]
            at = 0.0
            for j in range(m):
                at += pairs[i, j] * (min(weight[j] * key, lam[j]) * w[j])
            if at <= cpu[i] and key > top:
                top = key
        base, rest = 0.0, 0.0
        for j in range(m):
            if lam[j] / weight[j] <= top:
                base += pairs[i, j] * (lam[j] * w[j])
            else:
                rest += pairs[i, j] * (weight[j] * w[j])
        share = weight[i] * ((cpu[i] - base) / max(rest, TINY) if rest > 0.0 else math.inf)
        if lam[i] > share:
            r[i] = share
    return r
