"""The fast engine: a closed-form / fluid model of docs/model.md, vectorised with NumPy.

`evaluate_batch(config, transmissions, batch)` evaluates P settings-vectors × T
transmissions in one call (a whole GA population); transmissions of one host are coupled
within a row (shared cores, memory bus). `simulate(config, settings)` is the engine
interface shared with the DES and returns `Metrics` with engine "fast".

How each mode is modelled (docs/engines.md has the derivations and the fidelity figures):
- a core serves active_wait's interrupts first, then packet work FIFO by request: on a
  shared host the time axis is cut into phases and the rest is water-filled between the
  transmissions (`_core_share`); a saturated consumer gets r packets/s, its queue overflows;
- active_wait: one interrupt per packet; receive livelock r = (1 − λ·Ti)/w;
- passive_wait: a cycle — a drain of the q packets a tick finds, the next tick
  ⌈(Ti + drain)/T⌉ periods later, q refilled and capped by the ring: followed packet by
  packet for cbr (onoff: burst by burst, at the bursts' offsets against the ticks), the
  stationary distribution of a Markov chain on q for Poisson with a few packets per tick
  (`_passive_chain`), an iterated fluid map otherwise; on a shared core a
  drain first waits for the others' queued work; empty wake-ups are ticks whose window
  holds nothing;
- watermark: a wake at n_w packets (W, or what arrives within the timeout), the drain picks
  up the arrivals that come while it runs (exact integer count for cbr), the rest below the
  watermark after the last wake is stranded when there is no timeout;
- busy_poll: no interrupts, the core is busy for the whole duration.
Each mode is computed only on its own (p, t) elements, flattened.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.special import gammaln, ndtr, pdtrc

from nictune.model import ARRIVALS, PLACEMENT_COST, PLACEMENTS, Config, NicSetting, Transmission
from nictune.simulator.arrivals import link_packet_rate
from nictune.simulator.batch import ACTIVE, BUSY, PASSIVE, WATERMARK, SettingBatch
from nictune.simulator.costs import memory_factors
from nictune.simulator.metrics import Metrics

__all__ = ["METRIC_KEYS", "SettingBatch", "evaluate_batch", "simulate"]

METRIC_KEYS = ("packets_offered", "packets_delivered", "packets_dropped", "packets_stranded",
               "bytes_delivered", "duration_s", "offered_bps", "throughput_bps", "interrupts",
               "empty_wakeups", "cpu_busy_s", "cpu_util", "latency_mean_s", "latency_p99_s",
               "energy_j")
CBR, POISSON, ONOFF = (ARRIVALS.index(a) for a in ("cbr", "poisson", "onoff"))
_PLACE = np.array([PLACEMENT_COST[p] for p in PLACEMENTS])
_TINY = 1e-12
_LAGUERRE = np.polynomial.laguerre.laggauss(3)  # nodes and weights of an exponential
# the random part of a drain's wait: 4 · resid / (1 − ρ) where the even part is 3 ·
# (`_queue_wait`; chosen on the developed-against fidelity grids, see fast.md)
_RANDOM_WAIT = 4.0 / 3.0
# (ring states, drain lengths) of the passive_wait chains, smallest first
CHAIN_SIZES = ((8, 24), (16, 48), (24, 80), (32, 120), (40, 160))
BLOCK = 50_000  # (p, t) elements `evaluate` works on at a time


def _normal_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite nodes and weights (summing to 1) for the mean over a standard normal."""
    z, h = np.polynomial.hermite_e.hermegauss(n)
    return z, h / h.sum()


_HERMITE = _normal_nodes(7)


@dataclass(frozen=True)
class Workload:
    """Per-transmission inputs as arrays of shape (T,) (static: no setting in here)."""

    n: np.ndarray  # packets
    size: np.ndarray  # bytes per packet
    rate: np.ndarray  # offered packets/s
    local: np.ndarray  # packets/s while arriving (onoff: the burst rate)
    span: np.ndarray  # s from first to last arrival
    bursts: np.ndarray  # onoff bursts (1 otherwise)
    per_burst: np.ndarray  # packets per burst
    on: np.ndarray  # s of arrivals per burst (span for cbr/poisson)
    off: np.ndarray  # s of silence between bursts (0 for cbr/poisson)
    cycle: np.ndarray  # s from one burst's start to the next (inf for cbr/poisson)
    arrival: np.ndarray  # index into ARRIVALS
    start: np.ndarray
    host: np.ndarray  # host index
    ti: np.ndarray
    tp: np.ndarray
    tb_mem: np.ndarray  # per_byte · memory factor
    tc: np.ndarray
    backlog: np.ndarray
    nic_idle: np.ndarray
    core_busy: np.ndarray
    groups: tuple[np.ndarray, ...]  # column indices of each host with several transmissions

    @classmethod
    def build(cls, config: Config, transmissions: list[Transmission]) -> Workload:
        mem = memory_factors(config, transmissions)
        hosts = {name: i for i, name in enumerate(config.hosts)}
        rows = []
        for t in transmissions:
            host, nic = config.host_of(t), config.nic_of(t)
            n, rate = t.packets, t.rate
            if t.arrival == "onoff":
                local = min(rate * (t.onoff_on + t.onoff_off) / t.onoff_on,
                            link_packet_rate(t, nic))
                per_burst = max(1, math.ceil(t.onoff_on * local - 1e-9))  # as arrivals.py
                bursts = math.ceil(n / per_burst)
                last = n - (bursts - 1) * per_burst
                span = (bursts - 1) * (t.onoff_on + t.onoff_off) + (last - 1) / local
                on, off = (per_burst - 1) / local, t.onoff_on + t.onoff_off - (
                    per_burst - 1) / local
                cycle = t.onoff_on + t.onoff_off
            else:
                local, per_burst, bursts = rate, n, 1
                span, on, off, cycle = (n - 1) / rate, (n - 1) / rate, 0.0, np.inf
            c = host.costs
            rows.append((n, t.packet_size, rate, local, span, bursts, per_burst, on, off, cycle,
                         ARRIVALS.index(t.arrival), t.start, hosts[host.name], c.irq,
                         c.per_packet, c.per_byte * mem[t.id], c.poll_check,
                         host.backlog_slots, nic.idle_power(host), host.power.core_busy))
        cols = [np.array(c, dtype=float) for c in zip(*rows, strict=True)]
        names = [f for f in cls.__dataclass_fields__ if f != "groups"]
        values = dict(zip(names, cols, strict=True))
        values["arrival"] = values["arrival"].astype(np.int64)
        values["host"] = values["host"].astype(np.int64)
        groups = tuple(np.flatnonzero(values["host"] == h) for h in np.unique(values["host"]))
        return cls(groups=tuple(g for g in groups if g.size > 1), **values)


def evaluate_batch(config: Config, transmissions: list[Transmission],
                   batch: SettingBatch) -> dict[str, np.ndarray]:
    """Metrics of every (setting-vector p, transmission t): METRIC_KEYS → arrays (P, T)."""
    if batch.shape[1] != len(transmissions):
        raise ValueError(f"batch has {batch.shape[1]} columns for {len(transmissions)} "
                         "transmissions")
    return evaluate(Workload.build(config, transmissions), batch)


def evaluate(wl: Workload, b: SettingBatch) -> dict[str, np.ndarray]:
    """`evaluate_batch` on a prepared `Workload` (reuse it across many batches).

    Rows are independent: a large batch goes through in blocks of about BLOCK elements,
    whose temporaries stay in the CPU caches.
    """
    p, t = b.shape
    step = max(1, BLOCK // max(t, 1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if p <= step:
            return _evaluate(wl, b)
        parts = [_evaluate(wl, SettingBatch(*(a[i:i + step] for a in b.arrays())))
                 for i in range(0, p, step)]
    return {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}


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


@dataclass(frozen=True)
class _Wakes:
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

    def load(self, rows: np.ndarray, cols: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The sleeping ones' wake-up load at a packet cost w (rows × cols)."""
        at = np.ix_(rows, cols)
        return _wake_load(self.local[cols], self.ti[cols], w, self.period[at],
                          self.n_wake[at], self.pas[at], self.wat[at], self.delay[at]
                          ) * self.sleeps[at]


def _core_share(wl: Workload, b: SettingBatch, w: np.ndarray, irq_load: np.ndarray,
                soft_load: np.ndarray, cap_q: np.ndarray, wakes: _Wakes | None = None
                ) -> _Share:
    """Share each core between the transmissions whose `irq_core` it is.

    A transmission alone on its host gets 1 − its own interrupt load. On a shared host the
    time axis is cut where arrivals start or end; in each phase the core serves interrupts
    first and shares the rest FIFO by request (`_waterfill`), and a fluid queue per
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
                   alt_ws=np.zeros(shape), awake_rho=np.full(shape, np.nan))
    for cols in wl.groups:
        _share_host(wl, b, w, irq_load, soft_load, cap_q, cols, share, wakes)
    return share


def _share_host(wl: Workload, b: SettingBatch, w: np.ndarray, irq_load: np.ndarray,
                soft_load: np.ndarray, cap_q: np.ndarray, cols: np.ndarray, out: _Share,
                wakes: _Wakes | None) -> None:
    """The phases of one shared host (columns `cols`), written into `out`.

    A member of a phase is a transmission whose packets arrive in it or that still has a
    backlog; interrupts come only from arriving ones. What is queued after the last phase
    drains with every holder backlogged, re-shared each time one of them empties. Rows
    whose cores keep up in every phase never queue: their shares are sums over the overlap
    of the arrival spans, in closed form; only the others go through the phases.
    """
    lam = wl.rate[cols]
    wj = w[:, cols]
    avg = lam / np.maximum(wl.local[cols], _TINY)
    irq = irq_load[:, cols] * avg
    soft = irq + soft_load[:, cols] * avg
    own = lam * wj + soft
    sq = (lam * wj * wj + soft * wl.ti[cols]) / 2.0
    woken = soft_load[:, cols] * avg * (0.0 if wakes is None else wakes.sleeps[:, cols])
    same = (b.irq_core[:, cols, None] == b.irq_core[:, None, cols]).astype(float)
    start = wl.start[cols]
    end = start + wl.span[cols]
    edges = np.unique(np.concatenate([start, end]))
    lo, hi = edges[:-1], edges[1:]
    arriving = ((start[None, :] <= lo[:, None] + _TINY)
                & (end[None, :] >= hi[:, None] - _TINY)).astype(float)  # (phases, m)
    inflow = wl.n[cols] / np.maximum(wl.span[cols], _TINY)  # n packets over the span
    # a core that keeps up in a phase: its members' work and interrupts fit (`_waterfill`)
    load = np.matmul(same * (inflow * wj + irq + woken)[:, None, :], arriving.T)
    load -= woken[:, :, None] * arriving.T[None]
    busy = np.flatnonzero(((load > 1.0 - 1e-9) & (arriving.T[None] > 0)).any(axis=(1, 2)))
    span = np.maximum(wl.span[cols], _TINY)
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
        return
    cap = cap_q[busy][:, cols]
    weight = np.where(b.mode[busy][:, cols] == ACTIVE, cap, 1.0)  # requests it can queue
    def wake(rows: np.ndarray, ws: np.ndarray) -> np.ndarray:
        return wakes.load(busy[rows], cols, ws) * avg

    t = _phases(edges, arriving, inflow, end, same[busy], wj[busy], irq[busy], sq[busy], cap,
                weight, wake)
    rows = busy[:, None]
    out.rho_o[rows, cols] = t.rho / span
    out.resid[rows, cols] = t.resid / span
    out.high[rows, cols] = np.where(fluid, t.high / span, out.high[rows, cols])
    out.delivered[rows, cols] = np.where(fluid, wl.n[cols] - t.dropped, np.nan)
    out.q_end[rows, cols] = t.q_end
    out.tail[rows, cols] = np.clip(t.fin - end, 0.0, None)
    out.behind[rows, cols] = np.clip(t.behind / span, 0.0, 1.0)
    out.alt[rows, cols] = np.clip(t.alt_t / span, 0.0, 1.0)
    out.alt_ws[rows, cols] = t.alt_w / np.maximum(t.alt_t, _TINY)
    out.awake_rho[rows, cols] = np.where(t.awake_t > 0, t.awake_rho / np.maximum(
        t.awake_t, _TINY), np.nan)
    out.r[rows, cols] = np.where((t.dropped > 0.5) | (t.q_end >= 1.0), t.taken_own / span,
                                 np.inf)


class _Totals(NamedTuple):
    """What `_phases` integrates per (row, transmission), in s or packets."""

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


def _phases(edges: np.ndarray, arriving: np.ndarray, inflow: np.ndarray, end: np.ndarray,
            same: np.ndarray, wj: np.ndarray, irq: np.ndarray, sq: np.ndarray,
            cap: np.ndarray, weight: np.ndarray,
            wake: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> _Totals:
    """`_share_host`'s phases, one after the other, for rows whose cores saturate (the
    `_Totals`): the others' load (what they use of the core, not what they ask for: a
    consumer that cannot keep up slows the others down by its share only), residual work
    and interrupt load integrated over time, the packets dropped, the queue when the
    arrivals end, the packets taken while arriving, when the last packet is taken, how long
    each one is behind while its packets arrive, how long it keeps up beside a backlogged
    neighbour (with that time's cost per packet integrated: its w plus theirs, see below),
    and how long it keeps up at all (with the others' load then integrated).

    `wake(rows, w)`: the wake-up load of the sleeping batched consumers in those rows at a
    packet cost w. A consumer that drains beside a backlogged one alternates with it packet
    by packet, so its drains are long and its wake-ups rare: its cost is its own w plus
    theirs."""
    rho, resid, high, q, q_end, taken_own, dropped, behind, alt_t, alt_w, aw_t, aw_rho = (
        np.zeros(wj.shape) for _ in range(12))
    fin = np.broadcast_to(end, wj.shape).copy()  # when the last packet is taken
    per = np.stack([irq, sq], axis=2)
    ends = np.abs(end[None, :] - edges[1:, None]) <= _TINY  # (phases, m)
    for k, (lo, hi) in enumerate(itertools.pairwise(edges)):
        length = hi - lo
        act = arriving[k]
        if length <= 0 or not ((act[None, :] > 0) | (q > 0.5)).any():
            continue
        # what the arriving members on each one's core add up to: interrupts, residual work
        mine = per * act[None, :, None]
        tot = np.matmul(same, mine)
        h = tot[:, :, 0]
        resid += act * (tot[:, :, 1] - mine[:, :, 1]) * length
        high += act * h * length
        # the rates change inside the phase when a backlog empties: step to each such time
        # (only the rows with time left in the phase)
        now = np.zeros(wj.shape[0])
        live = np.arange(wj.shape[0])
        for sub in range(wj.shape[1] + 1):
            qs, sm, ws, hs = q[live], same[live], wj[live], h[live]
            member = (act[None, :] > 0) | (qs > 0.5)
            backlog = qs > 0.5
            m = _pairs(sm, member)
            demand = np.where(backlog, 1e30, act * inflow)
            # a member with a backlog takes all it can get (round-robin share of the rest)
            rk = _waterfill(m, demand, ws, np.clip(1.0 - hs, 0.0, None), weight[live])
            # ... and so does one whose queue starts to grow; sleeping members' wake-ups
            # take their share of the core first
            queued = (backlog | (rk < act * inflow)) * ws
            alternate = ws + np.matmul(sm, queued[:, :, None])[:, :, 0] - queued
            woken = wake(live, alternate / np.clip(1.0 - hs, 0.02, None)) * act * (
                queued == 0)
            cpu = 1.0 - hs - np.matmul(sm, woken[:, :, None])[:, :, 0] + woken
            rk = _waterfill(m, demand, ws, np.clip(cpu, 0.0, None), weight[live])
            rate = np.minimum(rk, 1e300)
            net = rate - act * inflow
            until = np.where(backlog & (net > 0), qs / np.maximum(net, _TINY), np.inf)
            step = (length - now[live])[:, None]
            if sub < wj.shape[1]:
                step = np.minimum(step, until.min(axis=1, keepdims=True))
            avail = qs + act * inflow * step
            taken = np.where(member, np.minimum(avail, rate * step), 0.0)
            # a backlog left after the arrivals empties inside this phase
            empties = (act == 0) & backlog & (taken >= avail - 1e-9)
            fin[live] = np.where(empties, lo + now[live, None] + qs / np.maximum(rate, _TINY),
                                 fin[live])
            taken_own[live] += act * taken
            dropped[live] += np.clip(avail - taken - cap[live], 0.0, None)
            q[live] = qs = np.minimum(avail - taken, cap[live])
            behind[live] += act * (backlog | (qs > 0.5)) * step
            beside = act * (queued == 0) * (alternate > ws * (1 + 1e-9)) * step
            alt_t[live] += beside
            alt_w[live] += beside * alternate / np.clip(1.0 - hs, 0.02, None)
            used = taken * ws + (irq[live] + woken) * act * step
            others = act * (np.matmul(sm, used[:, :, None])[:, :, 0] - used)
            rho[live] += others
            kept = ~(backlog | (qs > 0.5))
            aw_t[live] += act * kept * step
            aw_rho[live] += others * kept
            now[live] += step[:, 0]
            live = live[now[live] < length * (1 - 1e-12)]
            if not live.size:
                break
        q_end = np.where((act > 0) & ends[k], q, q_end)
    # after the last arrival: the backlogs drain; rates change each time one empties
    # (only the rows that still hold a backlog)
    now = np.full((wj.shape[0], 1), edges[-1])
    for _ in range(wj.shape[1]):
        rows = np.flatnonzero((q > 0.5).any(axis=1))
        if not rows.size:
            break
        qr = q[rows]
        left = qr > 0.5
        rk = _waterfill(_pairs(same[rows], left), np.where(left, 1e30, 0.0), wj[rows],
                        np.ones(left.shape), weight[rows])
        until = np.where(left, qr / np.maximum(np.minimum(rk, 1e300), _TINY), np.inf)
        step = until.min(axis=1, keepdims=True)
        step = np.where(np.isfinite(step), step, 0.0)
        empties = left & (until <= step * (1 + 1e-9))
        fin[rows] = np.where(empties, now[rows] + until, fin[rows])
        q[rows] = np.where(empties, 0.0, np.clip(qr - np.minimum(rk, 1e300) * step, 0.0, None))
        now[rows] += step
    return _Totals(rho, resid, high, dropped, q_end, taken_own, fin, behind, alt_t, alt_w,
                   aw_t, aw_rho)


def _pairs(same: np.ndarray, member: np.ndarray) -> np.ndarray:
    """same_ij · member_i · member_j: the members sharing each one's core (the outer product
    as a batched matmul, faster than broadcasting)."""
    mf = member.astype(float)
    m = np.matmul(mf[:, :, None], mf[:, None, :])
    m *= same
    return m


def _waterfill(m: np.ndarray, lam: np.ndarray, w: np.ndarray, cpu: np.ndarray,
               weight: np.ndarray) -> np.ndarray:
    """Share `cpu` FIFO by request: the packet rate r each member gets (inf if λ ≤ r).

    A consumer has one request queued at a time (round-robin per packet), active_wait one
    per packet in its backlog, so past saturation it gets `weight` (its backlog) times the
    others' rate. r_i = weight_i·L where L solves Σ_j m_ij·min(λ_j, weight_j·L)·w_j = cpu_i;
    the sum is piecewise linear with knots at λ_j / weight_j: evaluated at every knot, the
    highest knot below cpu_i fixes who is served in full and who shares the rest.
    """
    need = np.matmul(m, (lam * w)[:, :, None])[:, :, 0] > cpu  # cores that cannot keep up
    rows = np.flatnonzero(need.any(axis=1))
    if rows.size == cpu.shape[0]:
        return _waterfill_rows(m, lam, w, cpu, weight)
    r = np.full(cpu.shape, np.inf)
    if rows.size:
        r[rows] = _waterfill_rows(m[rows], lam[rows], w[rows], cpu[rows], weight[rows])
    return r


def _waterfill_rows(m: np.ndarray, lam: np.ndarray, w: np.ndarray, cpu: np.ndarray,
                    weight: np.ndarray) -> np.ndarray:
    key = lam / weight
    # the sum at every knot L = key_k: f[p, i, k] = Σ_j m_ij·min(λ_j, weight_j·key_k)·w_j
    # (the outer product weight_j·key_k as a matmul: faster than broadcasting, same values)
    g = np.matmul(weight[:, :, None], key[:, None, :])
    np.minimum(g, lam[:, :, None], out=g)
    g *= w[:, :, None]
    below = np.matmul(m, g) <= cpu[:, :, None]
    # the highest knot below the level (knot by knot: faster than a reduction over the short
    # last axis); the members whose knots are above it share the rest
    top = np.full(cpu.shape, -np.inf)
    for k in range(key.shape[1]):
        np.maximum(top, np.where(below[:, :, k], key[:, k:k + 1], -np.inf), out=top)
    full = m * (key[:, None, :] <= top[:, :, None])
    base = np.matmul(full, (lam * w)[:, :, None])[:, :, 0]
    rest = np.matmul(m - full, (weight * w)[:, :, None])[:, :, 0]
    r = weight * np.where(rest > 0, (cpu - base) / np.maximum(rest, _TINY), np.inf)
    return np.where(lam > r, r, np.inf)


def _poisson_excess(mu: np.ndarray, k: np.ndarray) -> np.ndarray:
    """E[(X − k)+] for X ~ Poisson(mu): mu·P(X ≥ k) − k·P(X > k)."""
    kf = np.floor(np.maximum(k, 0.0))
    spread = 12.0 * np.sqrt(mu) + 12.0
    out = np.where(kf < mu - spread, mu - kf, 0.0)  # far below the mean / far above it
    mid = np.flatnonzero(np.abs(kf - mu) <= spread)
    if mid.size:
        m, kk = mu[mid], kf[mid]
        at_least = np.where(kk > 0, pdtrc(np.maximum(kk - 1, 0.0), m), 1.0)
        out[mid] = np.clip(m * at_least - kk * pdtrc(kk, m), 0.0, None)
    return out


@dataclass
class _Mode:
    """One mode's closed-form result for its elements (1-D arrays)."""

    interrupts: np.ndarray
    empty: np.ndarray
    delivered: np.ndarray
    stranded: np.ndarray
    duration: np.ndarray
    lat_mean: np.ndarray
    lat_p99: np.ndarray
    followed: np.ndarray | float = 0.0  # 1: wake-ups and drops counted burst by burst


@dataclass
class _Ctx:
    """One subset of the (p, t) elements, flattened: the workload of each element's column
    and its effective costs. `c(name)` reads a `Workload` field for each element."""

    wl: Workload
    col: np.ndarray  # column (transmission) of each element
    lam: np.ndarray  # local arrival rate
    n: np.ndarray
    span: np.ndarray
    ti: np.ndarray
    ws: np.ndarray  # per-packet work, slowed by the others on the core
    ring: np.ndarray
    poisson: np.ndarray
    onoff: np.ndarray

    @classmethod
    def build(cls, wl: Workload, col: np.ndarray, ws: np.ndarray, ring: np.ndarray) -> _Ctx:
        arrival = wl.arrival[col]
        return cls(wl=wl, col=col, lam=wl.local[col], n=wl.n[col], span=wl.span[col],
                   ti=wl.ti[col], ws=ws, ring=ring, poisson=arrival == POISSON,
                   onoff=arrival == ONOFF)

    def c(self, name: str) -> np.ndarray:
        return getattr(self.wl, name)[self.col]

    def time_of(self, idx: np.ndarray) -> np.ndarray:
        """Arrival time of packet `idx` (1-based, fluid) after the first arrival."""
        i = np.clip(idx - 1.0, 0.0, None)
        out = i / self.lam
        oo = np.flatnonzero(self.onoff)  # onoff: whole bursts, then the burst rate
        if oo.size:
            col, i = self.col[oo], i[oo]
            pb = self.wl.per_burst[col]
            bursts = np.floor(i / pb + 1e-9)
            out[oo] = bursts * self.wl.cycle[col] + (i - bursts * pb) / self.lam[oo]
        return out


def _evaluate(wl: Workload, b: SettingBatch) -> dict[str, np.ndarray]:
    shape = b.shape
    mode = b.mode
    act, pas, wat, bus = (mode == ACTIVE), (mode == PASSIVE), (mode == WATERMARK), (mode == BUSY)
    lam, ti = wl.local[None, :], wl.ti[None, :]
    w = wl.tp[None, :] + wl.size[None, :] * wl.tb_mem[None, :] * _PLACE[b.placement]
    period = np.where(pas, b.poll_interval, 1.0)
    wm = np.where(wat, np.maximum(b.watermark, 1.0), 1.0)
    tau = np.where(wat, b.watermark_timeout, 0.0)
    n_wake = np.ones(shape)
    sel = np.flatnonzero(wat)  # (integer indices: faster than a boolean mask)
    wcol = sel % shape[1]
    n_wake.ravel()[sel] = _packets_at_wake(wl.local[wcol], wm.ravel()[sel], tau.ravel()[sel],
                                           wl.arrival[wcol] == POISSON)
    onoff_wat = wat & (wl.arrival == ONOFF)[None, :] & (tau > 0)
    if onoff_wat.any():
        n_wake[onoff_wat] = _onoff_packets_at_wake(
            *(np.broadcast_to(a[None, :], shape)[onoff_wat]
              for a in (wl.local, wl.per_burst, wl.cycle)),
            wm[onoff_wat], tau[onoff_wat])
    # interrupt load while arriving: active_wait's is "hard" (it preempts everything); the
    # batched modes pay Ti once per cycle and self-regulate ("soft", `_core_share`)
    cap_q = np.where(act, wl.backlog[None, :], b.ring_slots)
    hard = np.where(act, lam * ti, 0.0)
    soft = _wake_load(wl.local, wl.ti, w, period, n_wake, pas, wat, 0.0)  # (no wait yet)
    share = _core_share(wl, b, w, hard, soft, cap_q)
    ws = w / np.clip(1.0 - share.rho_o, 0.02, None)
    if wl.groups:  # shared hosts: the others' wake-ups are real while they still sleep
        sleeps = (pas | wat) & (lam * ws < 1.0) & ~np.isfinite(share.r)
        # a drain first waits for the others' queued work, which spaces the wake-ups
        wait = _queue_wait(share)
        soft = _wake_load(wl.local, wl.ti, ws, period, n_wake, pas, wat, wait)
        wakes = _Wakes(wl.local, wl.ti, period, n_wake, pas, wat, sleeps, wait)
        share = _core_share(wl, b, w, hard, soft, cap_q, wakes)
        ws = w / np.clip(1.0 - share.rho_o, 0.02, None)
        # active_wait's backlog out-queues the others' single requests: only their
        # interrupts slow it down
        ws = np.where(act, w / np.clip(1.0 - (share.high - hard), 0.02, None), ws)
    delay = _queue_wait(share)

    col = np.broadcast_to(np.arange(shape[1]), shape).ravel()
    flat = {"ws": ws.ravel(), "ring": b.ring_slots.ravel(), "w": w.ravel(),
            "period": period.ravel(), "wm": wm.ravel(), "tau": tau.ravel(),
            "n_wake": n_wake.ravel(), "high": share.high.ravel(), "cap": cap_q.ravel(),
            "r": share.r.ravel(), "fluid_delivered": share.delivered.ravel(),
            "fluid_q": share.q_end.ravel(), "fluid_tail": share.tail.ravel(),
            "behind": share.behind.ravel(), "alt": share.alt.ravel(),
            "alt_ws": share.alt_ws.ravel(),
            "delay": np.broadcast_to(delay, shape).ravel()}
    res = {key: np.zeros(col.size) for key in _Mode.__dataclass_fields__}
    # a batched consumer on a shared core that is behind for part of its span: the rest of
    # the time it sleeps and wakes at the cost per packet it has then (`_saturate` keeps
    # only its wake-ups from the mode's result)
    awake_ws = w / np.clip(1.0 - share.awake_rho, 0.02, None)  # NaN: never keeps up
    awake = (pas | wat) & np.isfinite(share.r) & (share.behind < 1.0) & (lam * awake_ws < 1.0)
    ws_mode = np.where(awake, awake_ws, ws).ravel()

    def run(mask: np.ndarray, fn: Callable[..., _Mode], *names: str) -> None:
        sel = np.flatnonzero(mask.ravel())
        if sel.size:
            cx = _Ctx.build(wl, col[sel], ws_mode[sel], flat["ring"][sel])
            out = fn(cx, *(flat[k][sel] for k in names))
            for key in res:
                res[key][sel] = getattr(out, key)

    # shared hosts: the part of the wait before a drain that random neighbours cause is
    # drawn afresh at each drain (`_mix_waits`); the modes first run with the rest ("even")
    flat["even"] = flat["delay"]
    mixed = np.zeros(col.size, dtype=bool)
    if wl.groups:
        rand = _random_share(wl, b, lam * w + hard).ravel()
        busy = np.clip(share.rho_o, 0.0, 0.95).ravel() * rand
        wait = flat["delay"] * rand * _RANDOM_WAIT
        mixed = (pas | wat).ravel() & (wait > 0) & (busy > 1e-6) & ~(
            np.isfinite(flat["r"]) & (flat["behind"] >= 1.0))  # (those never sleep)
        flat["even"] = np.where(mixed, flat["delay"] * (1.0 - rand), flat["delay"])
    run(act, _active, "high")
    run(pas, _passive, "period", "even")
    run(wat, _watermark, "wm", "tau", "n_wake", "even")
    run(bus, _busy_poll)
    for mask, fn, names in ((pas, _passive, ("period",)),
                            (wat, _watermark, ("wm", "tau", "n_wake"))):
        sel = np.flatnonzero(mask.ravel() & mixed)
        if sel.size:
            def mode(i: np.ndarray, d: np.ndarray, fn=fn, sel=sel, names=names) -> _Mode:
                at = sel[i]
                cx = _Ctx.build(wl, col[at], ws_mode[at], flat["ring"][at])
                return fn(cx, *(flat[k][at] for k in names), flat["even"][at] + d)

            _mix_waits(res, sel, mode, wait[sel], busy[sel])
    # a batched consumer that keeps up beside a backlogged neighbour: while it does, its
    # drains alternate with the neighbour's packets (cost alt_ws); the wake-ups are the
    # two regimes' in proportion to their time
    for mask, fn, names in ((pas, _passive, ("period", "delay")),
                            (wat, _watermark, ("wm", "tau", "n_wake", "delay"))):
        sel = np.flatnonzero(mask.ravel() & (flat["alt"] > 0) & ~np.isfinite(flat["r"]))
        if sel.size:
            cx = _Ctx.build(wl, col[sel], np.maximum(flat["alt_ws"][sel], flat["ws"][sel]),
                            flat["ring"][sel])
            out = fn(cx, *(flat[k][sel] for k in names))
            f = flat["alt"][sel]
            for key in ("interrupts", "empty"):
                res[key][sel] = f * getattr(out, key) + (1.0 - f) * res[key][sel]
    sat = np.flatnonzero(np.isfinite(flat["r"]))
    if sat.size:
        cx = _Ctx.build(wl, col[sat], flat["ws"][sat], flat["ring"][sat])
        sub = {k: v[sat] for k, v in res.items()}
        _saturate(cx, sub, act.ravel()[sat], (pas | wat).ravel()[sat],
                  *(flat[k][sat] for k in ("r", "high", "cap", "w", "fluid_delivered",
                                           "fluid_q", "fluid_tail", "behind", "n_wake")))
        for key, value in sub.items():
            res[key][sat] = value
    res = {k: v.reshape(shape) for k, v in res.items()}
    return _outputs(wl, res, w, bus)


def _outputs(wl: Workload, res: dict[str, np.ndarray], w: np.ndarray, bus: np.ndarray
             ) -> dict[str, np.ndarray]:
    """The Metrics fields from the modes' results (all arrays (P, T))."""
    shape = w.shape
    n, ti = wl.n[None, :], wl.ti[None, :]
    stranded = res["stranded"]
    dropped = np.clip(n - res["delivered"] - stranded, 0.0, None)
    delivered = n - dropped - stranded
    duration = np.where(delivered > 0, res["duration"], wl.span[None, :])
    bytes_ = delivered * wl.size[None, :]
    irq = res["interrupts"]
    # cpu: interrupts + packet work (a backlog drop in active_wait paid its interrupt)
    cpu = irq * ti + delivered * w
    duration = np.maximum(duration, cpu)  # a core does at most one second of work a second
    cpu = np.where(bus, duration, cpu)
    pos = np.maximum(duration, _TINY)
    return {
        "packets_offered": np.broadcast_to(n, shape).astype(float),
        "packets_delivered": delivered,
        "packets_dropped": dropped,
        "packets_stranded": stranded,
        "bytes_delivered": bytes_,
        "duration_s": duration,
        "offered_bps": np.broadcast_to(8.0 * wl.size * wl.rate, shape).astype(float),
        "throughput_bps": np.where(duration > 0, 8.0 * bytes_ / pos, 0.0),
        "interrupts": irq,
        "empty_wakeups": res["empty"],
        "cpu_busy_s": cpu,
        "cpu_util": np.where(duration > 0, cpu / pos, 0.0),
        "latency_mean_s": np.where(delivered > 0, res["lat_mean"], 0.0),
        "latency_p99_s": np.where(delivered > 0, res["lat_p99"], 0.0),
        "energy_j": wl.nic_idle[None, :] * duration + wl.core_busy[None, :] * cpu,
    }


def _mix_waits(res: dict[str, np.ndarray], sel: np.ndarray,
               mode: Callable[[np.ndarray, np.ndarray], _Mode], wait: np.ndarray,
               busy: np.ndarray) -> None:
    """Wake-ups (and empty ones) of `sel` when part of the wait before each drain is random.

    An evenly spaced neighbour's work comes at the same place in each of its cycles, and
    the mean wait it causes (`_queue_wait`) is what every drain sees; a random neighbour's
    (Poisson, onoff) is queued or not when a drain starts, and a mean stands for a spread
    that decides whether the drain ends before the next tick or packet. That part (mean
    `wait`) is none when the core is free of their work (1 − `busy`) and about
    exponential with mean wait / busy otherwise (the usual approximation of an M/G/1
    wait). `res` holds the mode's counts with none of it; `mode(i, wait)` runs the mode
    for elements sel[i] (an index may repeat) with that much: the three Gauss–Laguerre
    nodes of the exponential. Each wake-up draws its own wait, so the mean cycle is the
    mixture and the wake-ups are its harmonic mean. Counts only fall as the wait grows, so
    where none and the longest node agree every node does: the middle nodes run only
    where they differ (in one call, side by side)."""
    nodes, weights = _LAGUERRE
    low, e_low = res["interrupts"][sel], res["empty"][sel]
    last = mode(np.arange(sel.size), wait / busy * nodes[-1])
    top, e_top = last.interrupts, last.empty
    same = (np.abs(top - low) <= 1e-9 * low) & (np.abs(e_top - e_low) <= 1e-9 * np.maximum(
        e_low, 1.0))
    counts = np.where(same, low, np.nan)[None].repeat(nodes.size - 1, axis=0)
    empties = np.where(same, e_low, np.nan)[None].repeat(nodes.size - 1, axis=0)
    rest = np.flatnonzero(~same)
    if rest.size:
        k = nodes.size - 1
        out = mode(np.tile(rest, k), (wait[rest] / busy[rest] * nodes[:-1, None]).ravel())
        counts[:, rest] = out.interrupts.reshape(k, rest.size)
        empties[:, rest] = out.empty.reshape(k, rest.size)
    p = np.vstack([1.0 - busy, busy * weights[:, None]])  # (nodes + 1, m)
    counts = np.maximum(np.vstack([low, counts, top]), _TINY)
    empties = np.vstack([e_low, empties, e_top])
    inv = (p / counts).sum(axis=0)
    res["interrupts"][sel] = 1.0 / inv
    res["empty"][sel] = (p * empties / counts).sum(axis=0) / inv


def _random_share(wl: Workload, b: SettingBatch, load: np.ndarray) -> np.ndarray:
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
        out[:, cols] = np.where(tot > 0, rand[:, :, 0] / np.maximum(tot, _TINY), 0.0)
    return out


def _queue_wait(share: _Share) -> np.ndarray:
    """How long a wake-up's drain first waits for the others' packet work: the core takes
    one request per consumer in turn, so the drain's first packet waits for the packet in
    service (its residual, Σ λ·b²/2 over the others) and for one whole packet of each other
    consumer with a request queued (about ρ_j of the time: Σ λ·b², twice as much),
    stretched by what arrives meanwhile (1 / (1 − ρ))."""
    return 3.0 * share.resid / np.clip(1.0 - share.rho_o, 0.02, None)


def _wake_load(local: np.ndarray, ti_col: np.ndarray, w: np.ndarray, period: np.ndarray,
               n_wake: np.ndarray, pas: np.ndarray, wat: np.ndarray,
               delay: np.ndarray | float) -> np.ndarray:
    """CPU share of the batched modes' wake-ups (Ti once per cycle of k timer periods, or per
    n_w packets plus what arrives while draining) for a packet cost w (arrays (rows, cols);
    `local` and `ti_col` per column; each mode computed on its own elements only). `delay`:
    the wait before each drain (`_queue_wait`), which lengthens the cycle."""
    out = np.zeros(w.shape)
    for mask, passive in ((pas, True), (wat, False)):
        sel = np.flatnonzero(mask)
        col = sel % w.shape[1]
        lam, ti, ws = local[col], ti_col[col], w.ravel()[sel]
        dl = np.broadcast_to(delay, w.shape).ravel()[sel]
        free = np.clip(1.0 - lam * ws, 1e-6, None)
        if passive:
            t = period.ravel()[sel]
            k = np.maximum(1.0, np.ceil((ti + dl) / (t * free) - 1e-9))
            out.ravel()[sel] = ti / (k * t)
        else:
            n_w = n_wake.ravel()[sel]
            out.ravel()[sel] = lam * ti / (n_w + lam * (ti + dl + n_w * ws) / free)
    return out


def _active(cx: _Ctx, high: np.ndarray) -> _Mode:
    """An interrupt per packet; M/D/1-like waiting for Poisson arrivals."""
    rho = np.clip(cx.lam * (cx.ti + cx.ws), 0.0, 0.999)
    wait = np.where(cx.poisson, rho * (cx.ti + cx.ws) / (2.0 * (1.0 - rho)), 0.0)
    lat = cx.ti + cx.ws + wait
    # interrupts saturate the core (λ·Ti > 1 summed over the core): the ring overflows
    over = high >= 1.0
    ring_in = np.where(over, np.minimum(cx.n, cx.n / np.maximum(high, 1.0) + cx.ring), cx.n)
    # onoff whose gaps let the handlers catch up (the load averaged over a burst and its gap
    # below 1): only a burst's own excess, the 1 − 1/H of its packets the handlers have not
    # reached by its end, can overflow the ring
    oo = np.flatnonzero(cx.onoff & over)
    if oo.size:
        on, off, h = cx.c("on")[oo], cx.c("off")[oo], high[oo]
        per_burst, bursts, n = cx.c("per_burst")[oo], cx.c("bursts")[oo], cx.n[oo]
        last = n - (bursts - 1.0) * per_burst
        lost = ((bursts - 1.0) * np.clip(per_burst * (1.0 - 1.0 / h) - cx.ring[oo], 0.0, None)
                + np.clip(last * (1.0 - 1.0 / h) - cx.ring[oo], 0.0, None))
        ring_in[oo] = np.where(h * on / (on + off) < 1.0, np.clip(n - lost, 0.0, None),
                               ring_in[oo])
    zero = np.zeros_like(lat)
    return _Mode(interrupts=ring_in, empty=zero, delivered=cx.n + zero, stranded=zero,
                 duration=cx.span + lat, lat_mean=lat, lat_p99=cx.ti + cx.ws + 4.6 * wait)


def _busy_poll(cx: _Ctx) -> _Mode:
    """No interrupts; a packet is seen Tc/2 after it arrives on average and costs w."""
    rho = np.clip(cx.lam * cx.ws, 0.0, 0.999)
    wait = np.where(cx.poisson, rho * cx.ws / (2.0 * (1.0 - rho)), 0.0)
    tc = cx.c("tc")
    lat = tc / 2.0 + cx.ws + wait
    zero = np.zeros_like(lat)
    return _Mode(interrupts=zero, empty=zero, delivered=cx.n + zero, stranded=zero,
                 duration=cx.span + lat, lat_mean=lat, lat_p99=tc + cx.ws + 4.6 * wait)


def _passive(cx: _Ctx, period: np.ndarray, delay: np.ndarray) -> _Mode:
    """Timer ticks every T; a tick that finds the consumer idle wakes it (`_passive_map`).

    onoff arrivals: when a burst holds several cycles, the cycle is that of the burst rate
    and the gaps between bursts add idle ticks; when the cycle is longer than a burst, the
    arrivals are treated as smooth at the average rate.
    """
    lam, ti, ws, ring = cx.lam, cx.ti, cx.ws, cx.ring
    # evenly spaced arrivals: follow the cycles packet by packet; otherwise the fluid map
    even = ~cx.poisson & ~cx.onoff & (lam * ws < 0.95)
    size = np.full(lam.shape, -1)
    po = np.flatnonzero(cx.poisson)
    size[po] = _chain_size(lam[po], ws[po], ti[po], period[po], ring[po])
    cycle, taken, dropped, p_empty = (np.zeros(lam.shape) for _ in range(4))
    # Poisson past λw = 0.4 with too many packets per tick for the exact chain: binned chain
    # (the map's noise feedback, slope λw/(1 − λw), is already 0.67 there)
    binned = cx.poisson & (size < 0) & (lam * ws > 0.4) & (lam * ws < 0.95)
    parts = [(np.flatnonzero(even), _passive_cbr),
             (np.flatnonzero(~even & (size < 0) & ~binned & ~cx.onoff), _passive_map),
             (np.flatnonzero(~even & (size < 0) & ~binned & cx.onoff), _passive_phases)]
    parts += [(sel[j:j + 256], _passive_binned)
              for sel in [np.flatnonzero(binned)] for j in range(0, sel.size, 256)]
    for i, dims in enumerate(CHAIN_SIZES):
        # in chunks that keep the (elements, states, drains) arrays in cache
        sel = np.flatnonzero(size == i)
        step = max(1, 2**18 // (dims[0] * dims[1]))
        parts += [(sel[j:j + step], functools.partial(_passive_chain, dims=dims))
                  for j in range(0, sel.size, step)]
    for sel, fn in parts:
        if sel.size:
            exact = {"n": cx.n[sel], "span": cx.span[sel]} if fn is _passive_cbr else {}
            part = fn(lam[sel], ws[sel], ti[sel], period[sel], ring[sel], cx.poisson[sel],
                      delay[sel], **exact)
            for arr, value in zip((cycle, taken, dropped, p_empty), part, strict=True):
                arr[sel] = value
    on, off = cx.c("on"), cx.c("off")
    smooth = np.zeros_like(cx.onoff)
    oo = np.flatnonzero(cx.onoff)
    if oo.size:
        avg = _passive_map(cx.c("rate")[oo], ws[oo], ti[oo], period[oo], ring[oo],
                           cx.poisson[oo], delay[oo])
        smooth[oo] = (avg[0] > on[oo] + off[oo]) & (lam[oo] * ws[oo] < 1.0)
        pick = oo[smooth[oo]]
        for arr, alt in zip((cycle, taken, dropped, p_empty), avg, strict=True):
            arr[pick] = alt[smooth[oo]]
    bursty = cx.onoff & ~smooth
    # a burst the consumer cannot keep up with leaves a backlog that drains into the gap
    tail = np.where(bursty, np.minimum(ring, np.clip(lam * ws - 1.0, 0.0, None) * on / ws)
                    * ws, 0.0)
    busy_on = np.where(bursty, on + tail, cx.span)
    # λw ≥ 1: the consumer never empties its ring while packets arrive (one wake-up)
    cycle = np.minimum(cycle, np.maximum(busy_on, period))
    k_idle = np.maximum(1.0, np.ceil(ti / period - 1e-9))
    bursts = cx.c("bursts")
    gap_ticks = np.where(bursty, (bursts - 1.0) * np.clip(off - tail, 0.0, None) / (
        k_idle * period), 0.0)
    ticks = np.where(cx.poisson | cx.onoff, cx.span / cycle + 0.5,
                     np.ceil(cx.span / cycle - 1e-9))
    # (the last burst holds what is left of N)
    last_on = (cx.n - (bursts - 1.0) * cx.c("per_burst") - 1.0) / lam
    busy_last = last_on + np.minimum(ring, np.clip(lam * ws - 1.0, 0.0, None) * last_on / ws
                                     ) * ws
    ticks = np.where(bursty, ((bursts - 1.0) * busy_on + busy_last) / cycle + 0.5, ticks)
    resid = np.where(cx.poisson | cx.onoff, cycle / 2.0,
                     np.ceil(cx.span / period - 1e-9) * period - cx.span)
    resid = np.where(cycle >= busy_on, 0.0, resid)
    last_n = np.clip(lam * np.minimum(cycle, resid + ti), 1.0, ring)
    delivered = cx.n * np.clip(1.0 - dropped / np.maximum(taken + dropped, _TINY), 0.0, 1.0)
    interrupts = np.maximum(1.0, ticks + gap_ticks)
    empty = np.clip(ticks - 1.0, 0.0, None) * p_empty + gap_ticks
    # bursts of evenly spaced arrivals the consumer keeps up with: cycle by cycle
    ev = np.flatnonzero(bursty & (lam * ws < 0.95) & (on > 8.0 * period))
    if ev.size:
        interrupts[ev], empty[ev], lost = _passive_onoff(
            lam[ev], ws[ev], ti[ev], period[ev], ring[ev], delay[ev], cx.n[ev],
            cx.c("per_burst")[ev], bursts[ev], cx.c("cycle")[ev])
        delivered[ev] = cx.n[ev] - np.minimum(lost, cx.n[ev])
    # bursts the consumer cannot keep up with, each woken within it: burst by burst
    follow = np.flatnonzero(bursty & (lam * ws >= 1.0) & (k_idle * period + ti < on))
    if follow.size:
        wakes, gaps, lost = _passive_bursts(
            lam[follow], ws[follow], ti[follow], period[follow], ring[follow], on[follow],
            off[follow], cx.c("cycle")[follow], bursts[follow], k_idle[follow])
        interrupts[follow] = wakes + gaps
        empty[follow] = gaps
        delivered[follow] = cx.n[follow] - np.minimum(lost, cx.n[follow])
    zero = np.zeros_like(delivered)
    followed = zero.copy()
    followed[follow] = 1.0
    return _Mode(interrupts=interrupts, empty=empty, delivered=delivered, stranded=zero,
                 followed=followed,
                 duration=cx.span + resid + ti + last_n * ws,
                 lat_mean=cycle / 2.0 + ti + taken * ws / 2.0,
                 lat_p99=0.99 * cycle + ti + taken * ws)


def _passive_bursts(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                    ring: np.ndarray, on: np.ndarray, off: np.ndarray, cycle: np.ndarray,
                    bursts: np.ndarray, k_idle: np.ndarray, horizon: int = 128
                    ) -> tuple[np.ndarray, ...]:
    """(wake-ups in bursts, empty wake-ups in the gaps, packets dropped) of onoff arrivals
    whose bursts outrun the consumer (λw ≥ 1), followed burst by burst on the tick grid.

    Asleep when a burst starts, it wakes at the burst's first tick, φ in; the backlog then
    grows all through the burst and takes a + φ + Ti to drain after it (a = (λw − 1)·on;
    the ring caps it and drops the excess). A drain longer than the gap runs into the next
    burst, which then brings no wake-up of its own; otherwise it sleeps and the ticks left
    in the gap are empty wake-ups (every k ticks when Ti spans k). The grid is fixed
    (ticks at start + j·T), so whether a drain reaches the next burst and how many ticks
    fit after it depend on φ, which moves by the burst period modulo T from burst to
    burst: the first `horizon` bursts are followed, the rest extrapolated from the second
    half of them.
    """
    a = (lam * ws - 1.0) * on
    cap = ring * ws  # the longest drain a full ring holds
    carry = np.zeros(lam.size)  # drain left when a burst starts (0: asleep)
    phi = period.copy()  # the first tick is one period after the first arrival
    last = np.minimum(bursts, horizon)
    totals = np.zeros((3, lam.size))
    late = np.zeros((3, lam.size))
    for m in range(int(last.max())):
        live = m < last
        awake = carry > 0.0
        backlog = np.where(awake, carry + a, a + phi + ti)
        tail = np.minimum(backlog, cap)
        merge = tail >= off
        carry = np.where(merge, tail - off, 0.0)
        # ticks after the drain ends, up to the next burst (none after the last one)
        start = m * cycle
        t1 = np.ceil((start + on + tail) / period - 1e-9) * period
        count = np.where(merge | (m + 1 >= bursts), 0.0, np.clip(
            np.ceil((start + cycle - t1) / (k_idle * period) - 1e-9), 0.0, None))
        phi = np.where(merge, phi, t1 + count * k_idle * period - start - cycle)
        step = np.stack([~awake, count, np.clip(backlog - cap, 0.0, None) / ws]) * live
        totals += step
        late += step * (m >= last // 2)
    rest = np.clip(bursts - last, 0.0, None) / np.maximum(last - last // 2, 1.0)
    return tuple(totals + late * rest)


def _passive_phases(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                    ring: np.ndarray, poisson: np.ndarray, delay: np.ndarray
                    ) -> tuple[np.ndarray, ...]:
    """`_passive_map` for the cycles inside onoff bursts: each burst starts with its first
    tick anywhere in a period, and where two cycle lengths are both stable (a drain just
    short of a period keeps the next one short) that start decides which one the burst
    keeps, so the statistics are averaged over four starts."""
    parts = [_passive_map(lam, ws, ti, period, ring, poisson, delay, phase=(j + 0.5) / 4)
             for j in range(4)]
    return tuple(np.mean([part[i] for part in parts], axis=0) for i in range(4))


def _passive_map(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                 ring: np.ndarray, poisson: np.ndarray, delay: np.ndarray,
                 phase: float = 1.0) -> tuple[np.ndarray, ...]:
    """(cycle s, packets taken, packets dropped, P(empty wake-up)) of a passive cycle.

    Iterated as a map on the ring's content q at the start of a drain: the drain lasts
    d = q·w / (1 − λw), the next tick that comes after it is k periods after the last
    (k = ⌈(Ti + d) / T⌉), and what arrives from the drain's end to that tick + Ti refills
    the ring, capped at R (Poisson: E[min(X, R)]). With Poisson arrivals below λw = ½, q is
    random and k is its expectation over q (`_mean_ceil`); past λw = ½ the deterministic
    map's fixed point is unstable, the noise is amplified into the map's own cycle, and the
    statistics average its last steps.
    """
    free = np.clip(1.0 - lam * ws, 1e-6, None)
    q = np.minimum(ring, 1.0 + lam * (phase * period + ti))  # the first tick, phase·T in
    stats = np.zeros((4, lam.size))
    steps, keep = 24, 12
    a = ws / free / period  # periods of drain per packet in the ring
    k_idle = np.maximum(1.0, np.ceil(ti / period - 1e-9))
    noisy = np.flatnonzero(poisson)
    slope = np.clip(lam * ws / free, 0.0, 0.95)
    amplify = 1.0 / (1.0 - slope * slope)
    near = np.flatnonzero(np.abs(ring - lam * (period + ti)) < 12.0 * np.sqrt(
        lam * (period + ti)) + 12.0)  # may overflow: the Poisson tail matters
    for i in range(steps):
        d = (q * ws + delay * (1.0 - np.exp(-q))) / free
        k = np.maximum(1.0, np.ceil((ti + d) / period - 1e-9))
        if noisy.size:
            # an empty ring gives ⌈Ti/T⌉; otherwise E⌈(Ti + q·w/(1 − λw))/T⌉ over q > 0
            qn = q[noisy]
            p0 = np.exp(-qn)
            mean = qn / np.maximum(1.0 - p0, 1e-12)
            var = np.clip((qn + qn * qn) / np.maximum(1.0 - p0, 1e-12) - mean * mean, 0.0,
                          None)
            an = a[noisy]
            # the drain feeds the next window back with slope λw/(1 − λw): variance grows
            var = var * amplify[noisy]
            k_pos = np.maximum(1.0, _mean_ceil(ti[noisy] / period[noisy] + mean * an,
                                               np.sqrt(var) * an))
            k[noisy] = p0 * k_idle[noisy] + (1.0 - p0) * k_pos
        x = np.clip(lam * (k * period - d), 0.0, None)
        q_new = np.minimum(x, ring)
        if near.size:
            pn = near[poisson[near]]
            q_new[pn] = x[pn] - _poisson_excess(x[pn], ring[pn])
        if i >= steps - keep:
            stats += (k * period, q + lam * d, x - q_new, np.where(
                poisson, np.exp(-x), np.clip(1.0 - x, 0.0, 1.0)))
        q = q_new
    return tuple(stats / keep)


def _passive_chain(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                   ring: np.ndarray, _poisson: np.ndarray, delay: np.ndarray,
                   dims: tuple[int, int] = CHAIN_SIZES[-1]) -> tuple[np.ndarray, ...]:
    """`_passive_map`'s statistics for Poisson arrivals with a few packets per tick, exact.

    The ring content q when a drain starts is a Markov chain: the drain takes S packets, an
    M/D/1 busy period started by q (Borel–Tanner: P(S = n) = q/n · e^(−ρn) (ρn)^(n−q) /
    (n − q)!, ρ = λw); it ends Ti + S·w (+ the wait for the others' work) after its tick, the
    next tick is k = ⌈(Ti + drain)/T⌉ periods later, and the next q is Poisson over the
    window from the drain's end to that tick + Ti (at most T + Ti long), capped by the ring.
    Its stationary distribution (a linear solve over `dims` = (ring states, drain lengths),
    `_chain_size`) gives the mean cycle, packets per wake-up, drops and the share of empty
    wake-ups.
    """
    e = lam.size
    n_q, n_s = dims
    rho = np.clip(lam * ws, 1e-6, 0.95)
    ss = np.arange(n_s, dtype=float)
    qs = np.arange(n_q, dtype=float)
    # P(S = n | q) = table[q, n] · ρ^(−q) · (ρ e^(−ρ))^n: row q normalised, ρ^(−q) cancels
    table, table_t = _borel_tanner_table(n_q, n_s)
    v = np.exp(ss[None, :] * (np.log(rho) - rho)[:, None])  # (e, S)
    norm = np.matmul(v, table_t)  # (e, Q): Σ_n table[q, n] v[n]
    drain = (ss[None, :] > 0) * (delay / (1.0 - rho))[:, None] + ss[None, :] * ws[:, None]
    k = np.maximum(1.0, np.ceil((ti[:, None] + drain) / period[:, None] - 1e-9))
    mu = lam[:, None] * (k * period[:, None] - drain)  # (e, S): mean of the next q
    # v[n] · Poisson(mu[n]) of the next q = 0 … n_q − 1, by v e^(−μ) Π μ/i
    # (built as (Q, e, S): a cumulative product along q over contiguous (e, S) slices)
    pm = np.empty((n_q, e, n_s))
    np.multiply(v, np.exp(-mu), out=pm[0])
    np.divide(mu, qs[1:, None, None], out=pm[1:])
    for i in range(1, n_q):
        pm[i] *= pm[i - 1]
    cap = np.minimum(ring, n_q - 1).astype(np.int64)
    if (cap < n_q - 1).any():
        pm *= (qs[:, None] < cap[None, :])[:, :, None]
    pm[cap, np.arange(e), :] = 0.0
    pm[cap, np.arange(e), :] = v - pm.sum(axis=0)  # the ring holds at most cap
    # the transition matrix transposed, M[q, x] = Σ_n P(S = n | q) · P(next = x | S = n)
    lhs = np.matmul(pm.transpose(1, 0, 2), table_t)
    lhs /= norm[:, None, :]
    pi = _stationary(lhs)
    sig = np.matmul(pi / norm, table) * v  # distribution of S
    dropped = np.zeros(e)
    small = np.flatnonzero(cap < n_q - 1)  # else the ring is beyond the Poisson tail
    if small.size:
        kr = np.broadcast_to(ring[small, None], mu[small].shape)
        mu_s = mu[small]
        excess = np.clip(mu_s * pdtrc(np.maximum(kr - 1.0, 0.0), mu_s) - kr * pdtrc(kr, mu_s),
                         0.0, None)
        dropped[small] = (sig[small] * excess).sum(axis=1)
    return (sig * k).sum(axis=1) * period, (sig * ss).sum(axis=1), dropped, pi[:, 0]


def _passive_binned(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                    ring: np.ndarray, _poisson: np.ndarray, delay: np.ndarray,
                    bins: int = 48, windows: int = 48) -> tuple[np.ndarray, ...]:
    """`_passive_chain` for Poisson arrivals with many packets per tick and λw > 0.4, where
    `_passive_map`'s fixed point is unstable (past ½) or nearly so: the chain of the ring
    content q when a drain starts, on `bins` bins (bin 0: an empty ring; then bins of Δ
    packets up to the Poisson tail of λ(T + Ti), beyond which no window reaches; the last:
    a full ring or beyond).

    From q (the bin's middle) the drain takes S packets, normal with the M/D/1 busy
    period's mean q/(1 − ρ) and variance qρ/(1 − ρ)³ (Gauss–Hermite nodes); the next tick
    is k = ⌈(Ti + drain)/T⌉ periods later, so the next window x = kT − drain lies in
    [Ti, T + Ti): a grid of `windows` points, each node's x split between its two
    neighbours, or, for a drain spread over an eighth of a period or more, the wrapped
    normal integrated over each point's cell (`_wrapped_windows`). From a grid point the
    next q is Poisson(λx): P(0) exactly, the last bin from the normal's CDF, the bins
    between from its density. The transition is the product of the two (bins → windows →
    bins); its stationary distribution gives the mean cycle, packets per wake-up, drops
    and the share of empty wake-ups.
    """
    e = lam.size
    z, h = _HERMITE
    rho = np.clip(lam * ws, 1e-6, 0.95)
    free = 1.0 - rho
    reach = period + ti
    top = lam * reach
    width = np.maximum(1.0, np.ceil(np.minimum(ring - 1.0, top + 6.0 * np.sqrt(top) + 2.0)
                                    / (bins - 2)))[:, None]
    last = (bins - 2) * width[:, 0] + 1.0  # the last bin: this many packets or more
    b = np.arange(bins, dtype=float)[None, :]
    q = np.where(b == 0, 0.0, (b - 0.5) * width + 0.5)
    q[:, -1] = last
    q = np.minimum(q, ring[:, None])  # (e, B); a ring that caps q: the last bin is full
    sd = np.sqrt(q * rho[:, None]) / free[:, None] ** 1.5
    s = np.maximum(q[:, :, None], (q / free[:, None])[:, :, None] + z * sd[:, :, None])
    drain = s * ws[:, None, None] + ((delay / free)[:, None] * (1.0 - np.exp(-q)))[:, :, None]
    k = np.maximum(1.0, np.ceil((ti[:, None, None] + drain) / period[:, None, None] - 1e-9))
    x = np.clip(k * period[:, None, None] - drain, 0.0, None)  # (e, B, J)
    # bins → windows: each node's window split linearly between its two grid points
    u = np.clip(x / reach[:, None, None], 0.0, 1.0) * (windows - 1)
    lo = np.minimum(np.floor(u), windows - 2)
    frac = (u - lo).ravel()
    idx = ((np.arange(e * bins) * windows).reshape(e, bins, 1) + lo).astype(np.int64).ravel()
    hw = np.broadcast_to(h, x.shape).ravel()
    size = e * bins * windows
    to_window = (np.bincount(idx, hw * (1.0 - frac), minlength=size)
                 + np.bincount(idx + 1, hw * frac, minlength=size)).reshape(e, bins, windows)
    cycles = (k * h).sum(axis=2) * period[:, None]  # (e, B)
    # a drain spread over an eighth of a period or more: its few nodes would alias against
    # the tick grid (`_wrapped_windows`)
    spread = sd * ws[:, None] / period[:, None]
    wide = spread >= 0.13
    rows = np.flatnonzero(wide.any(axis=1))
    if rows.size:
        mean = (s[rows] * h).sum(axis=2) * ws[rows, None] + (delay[rows] / free[rows])[
            :, None] * (1.0 - np.exp(-q[rows]))
        mass, window = _wrapped_windows(mean + ti[rows, None], spread[rows], ti[rows],
                                        period[rows], windows)
        to_window[rows] = np.where(wide[rows, :, None], mass, to_window[rows])
        # the mean cycle from the mean window: k·T = window + drain
        cycles[rows] = np.where(wide[rows], window + mean, cycles[rows])
    # windows → bins
    mu = lam[:, None] * np.linspace(0.0, 1.0, windows)[None, :] * reach[:, None]  # (e, X)
    inv = 1.0 / np.sqrt(np.maximum(mu, 1e-12))
    p = np.empty((e, windows, bins))
    np.subtract(q[:, None, :], mu[:, :, None], out=p)
    p *= inv[:, :, None]
    np.square(p, out=p)
    p *= -0.5
    np.exp(p, out=p)
    p0 = np.exp(-mu)
    p_last = ndtr((mu - last[:, None] + 0.5) * inv)
    p[..., 0] = p[..., -1] = 0.0
    p *= (np.clip(1.0 - p0 - p_last, 0.0, None) / np.maximum(p.sum(axis=-1), 1e-300))[..., None]
    p[..., 0], p[..., -1] = p0, p_last
    pi = _stationary(np.matmul(to_window, p).transpose(0, 2, 1).copy())
    seen = np.matmul(pi[:, None, :], to_window)[:, 0, :]  # (e, X): how often each window
    excess = _poisson_excess(mu.ravel(), np.repeat(ring, windows)).reshape(mu.shape)
    return ((pi * cycles).sum(axis=1), (pi * (s * h).sum(axis=2)).sum(axis=1),
            (seen * excess).sum(axis=1), (seen * p0).sum(axis=1))


def _wrapped_windows(lag: np.ndarray, spread: np.ndarray, ti: np.ndarray,
                     period: np.ndarray, windows: int, terms: int = 4
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The distribution of the window from a drain's end to the next tick + Ti on
    `_passive_binned`'s grid of `windows` points over [0, T + Ti), and its mean, for
    drains normal with mean `lag` − Ti and sd `spread`·T (arrays (e, B)).

    The window is Ti + ((−lag) mod T): a wrapped normal, whose Fourier series (`terms`
    terms: the next is below 3e-4 for a spread of 0.13 periods or more) is integrated
    exactly over each grid point's cell. Point samples of the drain (the Gauss–Hermite
    nodes) alias against the tick grid once the drain's spread nears a period.
    """
    reach = period + ti
    grid = np.linspace(0.0, 1.0, windows)[None, :] * reach[:, None]  # (e, X)
    half = reach[:, None] / (2.0 * (windows - 1))
    edges = np.clip(np.concatenate([grid - half, grid[:, -1:] + half], axis=1) - ti[:, None],
                    0.0, period[:, None])  # the cells in u = window − Ti ∈ [0, T)
    m = np.arange(1.0, terms + 1.0)
    angle = 2.0 * np.pi * m[None, :, None] * edges[:, None, :] / period[:, None, None]
    d_cos, d_sin = np.diff(np.cos(angle), axis=2), np.diff(np.sin(angle), axis=2)
    # u ≡ −lag (mod T): ∫ cell of (2ρ_m/T)·cos(2πm(u + lag)/T), ρ_m = exp(−2π²m²spread²)
    phase = 2.0 * np.pi * m * (lag / period[:, None])[:, :, None]
    damp = np.exp(-2.0 * np.pi ** 2 * m ** 2 * spread[:, :, None] ** 2) / (np.pi * m)
    mass = (np.diff(edges, axis=1) / period[:, None])[:, None, :] + (
        np.matmul(damp * np.cos(phase), d_sin) + np.matmul(damp * np.sin(phase), d_cos))
    np.clip(mass, 0.0, None, out=mass)
    mass /= np.maximum(mass.sum(axis=2, keepdims=True), 1e-300)
    return mass, np.matmul(mass, grid[:, :, None])[:, :, 0]


def _stationary(lhs: np.ndarray) -> np.ndarray:
    """The stationary distributions π of a stack of transition matrices M, given Mᵀ
    (overwritten): π (M − I) = 0 with Σπ = 1 replacing the last equation."""
    e, n = lhs.shape[:2]
    lhs.reshape(e, -1)[:, ::n + 1] -= 1.0  # − I
    lhs[:, -1, :] = 1.0
    rhs = np.zeros((e, n, 1))
    rhs[:, -1, 0] = 1.0
    pi = np.clip(np.linalg.solve(lhs, rhs)[..., 0], 0.0, None)
    return pi / pi.sum(axis=1, keepdims=True)


@functools.cache
def _borel_tanner_table(n_q: int, n_s: int) -> tuple[np.ndarray, np.ndarray]:
    """The ρ-free part of P(S = n | q): q/n · n^(n−q) / (n − q)! (0 where n < q; q = 0 ⇒
    S = 0), and its transpose (contiguous)."""
    q = np.arange(n_q, dtype=float)[:, None]
    n = np.arange(n_s, dtype=float)[None, :]
    extra = np.maximum(n - q, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        table = np.exp(np.log(q) - np.log(n) + extra * np.log(n) - gammaln(extra + 1.0))
    table = np.where(n >= q, table, 0.0)
    table[0, :] = 0.0
    table[0, 0] = 1.0  # an empty ring: no drain
    table_t = table.T.copy()
    table.flags.writeable = table_t.flags.writeable = False
    return table, table_t


def _chain_size(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                ring: np.ndarray) -> np.ndarray:
    """Index of the smallest of CHAIN_SIZES whose states hold the ring content and the
    drains (the Poisson tail beyond 6 σ, the busy period's beyond 8 σ); −1 if none does."""
    rho = lam * ws
    mx = lam * (period + ti)
    top = mx + 6.0 * np.sqrt(mx) + 2.0
    qmax = np.minimum(ring, top)
    free = np.maximum(1.0 - rho, 1e-9)
    smax = qmax / free + 8.0 * np.sqrt(qmax * rho / free**3) + 2.0
    out = np.full(lam.shape, -1)
    for i, (states, drains) in reversed(list(enumerate(CHAIN_SIZES))):
        fits = (rho < 0.95) & ((ring < states - 1) | (top < states - 1)) & (smax < drains)
        out[fits] = i
    return out


def _passive_cbr(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                 ring: np.ndarray, _poisson: np.ndarray, delay: np.ndarray, *,
                 n: np.ndarray, span: np.ndarray, cycles: int = 48, skip: int = 8,
                 horizon: int = 512, reach: int = 4096) -> tuple[np.ndarray, ...]:
    """`_passive_map`'s statistics for evenly spaced arrivals, from the cycles themselves.

    Packet i arrives at i·g. A wake-up at tick τ takes, after Ti, the packets that arrived
    (the ring keeps R of them, the rest are dropped), then the ones that arrive while it
    drains — the smallest k with arrival a + k after the drain of q + k packets — and the
    next wake-up is the first tick at or after the drain's end. Integer packet counts and
    the phase of arrivals against ticks are exact, which a fluid drain is not when the ring
    holds a few. Such a sequence can take dozens of cycles to settle, or never settle
    (cycles of 1–4 ticks in no fixed order), so every transmission is followed for
    `cycles` wake-ups, and one that looks to end within `reach` for up to `horizon`: one
    that ends meanwhile has an exact count (the cycle returned is span / count); the rest
    is extrapolated from the wake-ups followed after the first `skip` (within `cycles`) or
    from the second half of the horizon.
    """
    c = _Cycles(lam, ws, ti, period, ring, delay, n)
    c.follow(cycles, 0, skip, masked=False)
    per_wake = (c.late[2] + c.late[3]) / np.maximum(c.late[0], 1.0)
    # the ones that ended (and overran their end) or look to end within `reach`: again
    # from the start, each counting only its own wake-ups, up to `horizon`
    redo = np.flatnonzero((c.handled >= n) | (
        cycles + (n - c.handled) / np.maximum(per_wake, _TINY) <= reach))
    if redo.size:
        sub = _Cycles(lam[redo], ws[redo], ti[redo], period[redo], ring[redo], delay[redo],
                      n[redo])
        sub.follow_to_end(horizon)
        c.put(redo, sub)
    done = c.handled >= n
    w_late = np.maximum(c.late[0], 1.0)
    per = np.maximum(c.wakes, 1.0)
    # `_passive` counts ⌈span / cycle⌉ wake-ups and (count − 1) · P(empty) empty ones
    return (np.where(done, span / per, c.late[1] * period / w_late),
            np.where(done, c.taken / per, c.late[2] / w_late),
            np.where(done, c.dropped / per, c.late[3] / w_late),
            np.where(done, c.empty / np.maximum(c.wakes - 1.0, 1.0), c.late[4] / w_late))


def _passive_onoff(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                   ring: np.ndarray, delay: np.ndarray, n: np.ndarray, per_burst: np.ndarray,
                   bursts: np.ndarray, cycle: np.ndarray, samples: int = 8,
                   horizon: int = 1024) -> tuple[np.ndarray, ...]:
    """(wake-ups, empty ones, drops) of onoff bursts of evenly spaced arrivals that the
    consumer keeps up with, each burst followed cycle by cycle (`_Cycles`).

    Ticks run on one grid from the first arrival, so burst b starts b·cycle mod T after a
    tick, and that offset decides where its cycles settle (two cycle lengths can both be
    stable). The first burst (first tick one period in) and `samples` later bursts spread
    over the transmission are followed from their first packet to their last, then the
    empty ticks of the gap up to the next burst's first tick; the rest is their mean.
    """
    m = lam.size
    later = 1.0 + np.floor(np.arange(samples)[:, None] * np.maximum(bursts - 1.0, 0.0)
                           / samples)
    index = np.concatenate([np.zeros((1, m)), later])  # (samples + 1, m) burst numbers
    k = samples + 1
    rep = functools.partial(np.tile, reps=k)
    shift = np.mod(index * cycle, period).ravel()
    sub = _Cycles(rep(lam), rep(ws), rep(ti), rep(period), rep(ring), rep(delay),
                  rep(np.minimum(per_burst, n)), shift)
    # the first tick whose Ti ends after the burst's first arrival takes it (an earlier
    # one is an empty wake-up of the gap); the transmission's first tick is one period in
    sub.j = np.where(index.ravel() > 0, np.ceil((shift - rep(ti)) / rep(period) - 1e-9), 1.0)
    sub.follow_to_end(horizon)
    # a burst longer than the horizon: the rest at the pace of the horizon's second half
    late = np.maximum(sub.late[0], 1.0)
    more = np.clip(sub.n - sub.handled, 0.0, None) / np.maximum(
        (sub.late[2] + sub.late[3]) / late, _TINY)
    k_idle = np.maximum(1.0, np.ceil(rep(ti) / rep(period) - 1e-9))
    nxt = np.ceil((shift + rep(cycle) - rep(ti)) / rep(period) - 1e-9)
    gap = np.ceil(np.clip(nxt - sub.j, 0.0, None) / k_idle - 1e-9)
    gap = np.where(more > 0, np.clip(rep(cycle) - rep(per_burst) / rep(lam), 0.0, None)
                   / (k_idle * rep(period)), gap)
    w_all, e_all = sub.wakes + more, sub.empty + more * sub.late[4] / late
    per = [v.reshape(k, m) for v in (w_all, e_all, sub.dropped + more * sub.late[3] / late)]
    gaps = gap.reshape(k, m)
    # the bursts after the first: their mean (the last holds what is left of n); the gaps
    # between bursts: B − 1 of them
    rest = np.clip(bursts - 2.0 + (n - (bursts - 1.0) * per_burst) / per_burst, 0.0, None)
    n_gaps = np.clip(bursts - 1.0, 0.0, None)
    gap_total = np.where(n_gaps > 0, gaps[0] + (n_gaps - 1.0) * gaps[1:].mean(axis=0), 0.0)
    wakes, empty, dropped = (v[0] + rest * v[1:].mean(axis=0) for v in per)
    return wakes + gap_total, empty + gap_total, dropped


class _Cycles:
    """The state of `_passive_cbr`'s and `_passive_onoff`'s followed cycles (in packet
    gaps and timer periods); the first of the n arrivals comes `shift` s after tick 0."""

    def __init__(self, lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                 ring: np.ndarray, delay: np.ndarray, n: np.ndarray,
                 shift: np.ndarray | float = 0.0) -> None:
        self.lam_t, self.lam_ti, self.ring, self.n = lam * period, lam * (ti - shift), ring, n
        self.rho = lam * ws
        self.inv = 1.0 / (1.0 - self.rho)
        self.ti_t, self.ws_t = ti / period, ws / period
        self.lam_d, self.d_t = lam * delay, delay / period
        self.j = np.ones(lam.shape)  # the first tick, one period after the first arrival
        self.handled = np.zeros(lam.shape)  # packets taken or dropped so far
        # over the wake-ups counted in `follow`: wake-ups, ticks, packets taken, dropped,
        # empty wake-ups; the totals (masked `follow` only)
        self.late = np.zeros((5, lam.size))
        self.wakes, self.taken, self.dropped, self.empty = (np.zeros(lam.shape)
                                                            for _ in range(4))

    def subset(self, idx: np.ndarray) -> _Cycles:
        out = object.__new__(_Cycles)
        out.__dict__ = {k: v[..., idx] for k, v in self.__dict__.items()}
        return out

    def put(self, idx: np.ndarray, sub: _Cycles) -> None:
        for k, v in sub.__dict__.items():
            getattr(self, k)[..., idx] = v

    def follow_to_end(self, horizon: int) -> None:
        """Follow each transmission from its start, counting only its own wake-ups, until
        its last packet is handled or `horizon` wake-ups: in rounds of 64, each on the ones
        still going; the second half of the horizon counts in `late`."""
        going = np.arange(self.n.size)
        for start in range(0, horizon, 64):
            part = self.subset(going)
            part.follow(min(64, horizon - start), start, horizon // 2, masked=True)
            self.put(going, part)
            going = going[self.handled[going] < self.n[going]]
            if not going.size:
                break

    def follow(self, steps: int, start: int, first_late: int, masked: bool) -> None:
        """Advance every transmission by `steps` wake-ups (numbered from `start`); those
        from `first_late` on count in `late`. `masked`: only those that have not ended, with
        the totals kept. Works in place: it runs over every element `steps` times."""
        shape = self.j.shape
        a, arrived, q, drop, extra, nxt = (np.empty(shape) for _ in range(6))
        busy, empty = np.empty(shape, dtype=bool), np.empty(shape, dtype=bool)
        on = np.ones(shape, dtype=bool)
        waits = bool(self.lam_d.any())  # shared cores only
        j_late = self.j.copy()
        for step in range(start, start + steps):
            if masked:
                np.less(self.handled, self.n, out=on)
            if step == first_late:
                j_late = self.j.copy()
            np.multiply(self.j, self.lam_t, out=a)
            a += self.lam_ti  # the drain starts Ti after the tick
            np.add(a, 1e-9, out=arrived)
            np.floor(arrived, out=arrived)
            arrived += 1.0
            np.minimum(arrived, self.n, out=arrived)  # (no arrivals past the last)
            np.subtract(arrived, self.handled, out=q)
            np.subtract(q, self.ring, out=drop)
            np.maximum(drop, 0.0, out=drop)
            q -= drop
            np.greater(q, 0.0, out=busy)
            if waits:
                a += busy * self.lam_d  # the drain's start
            # extra = max(⌊(start + q·ρ − arrived) / (1 − ρ) + 1e-9⌋ + 1, 0) if busy
            np.multiply(q, self.rho, out=extra)
            extra += a
            extra -= arrived
            extra *= self.inv
            extra += 1e-9
            np.floor(extra, out=extra)
            extra += 1.0
            np.maximum(extra, 0.0, out=extra)
            extra *= busy
            np.minimum(extra, self.n - arrived, out=extra)
            q += extra  # packets this wake-up takes
            arrived += extra  # now: packets handled after it
            # the next tick: max(⌈j + Ti/T (+ the wait) + q·w/T − 1e-9⌉, j + 1)
            np.add(self.j, self.ti_t, out=nxt)
            if waits:
                nxt += busy * self.d_t
            np.multiply(q, self.ws_t, out=a)
            nxt += a
            nxt -= 1e-9
            np.ceil(nxt, out=nxt)
            np.maximum(nxt, self.j + 1.0, out=nxt)
            np.logical_not(busy, out=empty)
            if masked:
                q *= on
                drop *= on
                empty &= on
                self.wakes += on
                self.taken += q
                self.dropped += drop
                self.empty += empty
            if step >= first_late:
                if masked:
                    self.late[0] += on
                    self.late[1] += (nxt - self.j) * on
                self.late[2] += q
                self.late[3] += drop
                self.late[4] += empty
            if masked:
                np.copyto(self.j, nxt, where=on)
                np.copyto(self.handled, arrived, where=on)
            else:
                self.j, nxt = nxt, self.j
                self.handled, arrived = arrived, self.handled
        if not masked:
            counted = start + steps - max(first_late, start)
            self.late[0] += counted
            self.late[1] += self.j - j_late
            self.wakes += steps


def _mean_ceil(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """E⌈Y⌉ for Y ≈ Normal(mu, sigma²): mu + ½ + Σₖ sin(2πk·mu)/(πk)·exp(−2π²k²σ²)."""
    out = np.where(sigma < 0.12, np.ceil(mu - 1e-9), mu + 0.5)
    sel = np.flatnonzero(sigma >= 0.12)
    for k in range(1, 7):  # the k-th term is below e^-20 once σ ≥ 1/k
        sel = sel[sigma[sel] < 1.0 / k]  # (σ < 1/k holds for fewer elements at each k)
        if not sel.size:
            break
        out[sel] += np.sin(2 * np.pi * k * mu[sel]) / (np.pi * k) * np.exp(
            -2 * np.pi**2 * k * k * sigma[sel] ** 2)
    return out


def _packets_at_wake(lam: np.ndarray, wm: np.ndarray, tau: np.ndarray,
                     poisson: np.ndarray) -> np.ndarray:
    """Packets in the ring when the watermark consumer wakes: W, or what the timeout lets in."""
    x = lam * tau
    timed = tau > 0
    cbr_n = np.where(timed, np.minimum(wm, 1.0 + np.floor(x + 1e-9)), wm)
    pois_n = wm.copy()
    pt = np.flatnonzero(poisson & timed)
    if pt.size:
        pois_n[pt] = 1.0 + x[pt] - _poisson_excess(x[pt], wm[pt] - 1.0)
    return np.where(poisson, pois_n, cbr_n)


def _onoff_packets_at_wake(local: np.ndarray, per_burst: np.ndarray, cycle: np.ndarray,
                           wm: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Packets queued when a timeout that starts at a burst's first packet fires: the
    whole bursts within τ, then what the burst rate brings in the rest (a timeout may span
    many on/off cycles, so the burst rate alone would overcount)."""
    k = np.floor(tau / cycle + 1e-9)
    rest = tau - k * cycle
    return np.minimum(wm, k * per_burst + np.minimum(per_burst,
                                                     1.0 + np.floor(rest * local + 1e-9)))


def _watermark(cx: _Ctx, wm: np.ndarray, tau: np.ndarray, n_wake: np.ndarray,
               delay: np.ndarray) -> _Mode:
    """Wake at n_w packets; the drain also takes what arrives while it runs (c per wake)."""
    lam, ti, ws, n = cx.lam, cx.ti, cx.ws, cx.n
    g = 1.0 / lam
    timed = tau > 0
    by_timeout = timed & (n_wake < wm)
    # evenly spaced arrivals: the drain ends before arrival k+1, the smallest such k
    delta = np.where(by_timeout, tau - cx.time_of(n_wake), 0.0)
    x = (ti + delay + n_wake * ws - g + delta) / np.maximum(g - ws, _TINY)
    extra = np.where(cx.poisson, lam * (ti + delay + n_wake * ws) / np.clip(1.0 - lam * ws, 1e-6,
                                                                           None),
                     np.maximum(0.0, np.floor(x + 1e-9) + 1.0))
    c = n_wake + extra
    # wake j comes at packet (j − 1)·c + n_w; what is left after the last one is < n_w
    full = np.where(n >= n_wake, np.floor((n - n_wake) / c + 1e-9) + 1.0, 0.0)
    left = np.clip(n - full * c, 0.0, None)
    left = np.where(cx.poisson, np.where(n < wm, n, np.minimum((wm - 1.0) / 2.0, n)), left)
    left = np.where(cx.poisson & timed, np.minimum(n, (n_wake - 1.0) / 2.0), left)
    wakes = np.where(cx.poisson, (n - left) / c, full) + np.where(timed & (left > 0), 1.0, 0.0)
    # onoff with a timeout shorter than the gap: every burst ends with a timeout wake-up;
    # with a burst's last drain running to its end, every burst starts from an empty ring
    # (the last burst holds what is left of N)
    per_burst, bursts = cx.c("per_burst"), cx.c("bursts")
    last = n - (bursts - 1.0) * per_burst
    flush = cx.onoff & timed & (tau < cx.c("off"))
    wakes = np.where(flush, (bursts - 1.0) * np.ceil(per_burst / c - 1e-9)
                     + np.ceil(last / c - 1e-9), wakes)
    in_burst, in_last = (np.where(k >= n_wake, np.floor((k - n_wake) / c + 1e-9) + 1.0, 0.0)
                         for k in (per_burst, last))
    clean = cx.onoff & ~flush & (in_burst > 0) & (in_burst * c >= per_burst)
    wakes = np.where(clean, (bursts - 1.0) * in_burst + np.maximum(in_last, timed), wakes)
    # end: the last drain (packets up to min(N, full·c)), then the timeout flush if any
    last_idx = n - left
    m = last_idx - (full - 1.0) * c
    drain_end = cx.time_of(last_idx) + np.where(
        cx.poisson, ti + n_wake * ws, np.maximum(ws, ti + m * ws - (m - n_wake) * g))
    flush_end = cx.time_of(n - left + 1.0) + tau + ti + left * ws
    duration = np.where(timed & (left > 0), np.maximum(drain_end, flush_end), drain_end)
    fill = np.where(by_timeout, tau, (n_wake - 1.0) * g)
    zero = np.zeros_like(duration)
    return _Mode(interrupts=wakes, empty=zero, delivered=n - np.where(timed, 0.0, left),
                 stranded=np.where(timed, 0.0, left), duration=duration,
                 lat_mean=fill / 2.0 + ti + c * ws / 2.0, lat_p99=0.99 * fill + ti + c * ws)


def _saturate(cx: _Ctx, res: dict[str, np.ndarray], act: np.ndarray, batched: np.ndarray,
              r: np.ndarray, high: np.ndarray, cap: np.ndarray, w: np.ndarray,
              fluid_delivered: np.ndarray, fluid_q: np.ndarray, fluid_tail: np.ndarray,
              behind: np.ndarray, n_wake: np.ndarray) -> None:
    """Elements whose core cannot keep up: the consumer gets r packets/s, its queue overflows.

    Alone on a host, per burst (cbr/poisson: one burst) the queue (backlog B in active_wait,
    else the ring R) fills at λ − r, drops beyond its capacity and drains after the last
    arrival; on a shared host the phases of `_core_share` did that already (`fluid_*`: the
    packets delivered, the queue when arrivals end and how long it takes to drain, and the
    share of the span the consumer was behind: the rest of the time it sleeps and wakes as
    usual).
    """
    n, lam = cx.n, cx.lam
    on = cx.c("on") + 1.0 / lam
    per_burst, bursts = cx.c("per_burst"), cx.c("bursts")
    q = np.clip((lam - r) * on, 0.0, cap)
    # between bursts the queue drains with the core to itself
    mid = np.minimum(per_burst, r * on + np.minimum(q, cx.c("off") / w))
    last_n = n - (bursts - 1.0) * per_burst
    last_on = np.minimum(on, last_n / lam)
    last = np.minimum(last_n, r * last_on + cap)
    delivered = (bursts - 1.0) * mid + last
    q_end = np.clip(last - r * last_on, 0.0, None)
    # active_wait past λ·Ti = 1: the ring holds what the handlers could not take yet
    q_irq = np.where(act & (high > 1.0), np.clip(
        res["interrupts"] - n / np.maximum(high, 1.0), 0.0, cx.ring), 0.0)
    fluid = np.isfinite(fluid_delivered)
    delivered = np.where(fluid, fluid_delivered, delivered)
    q_end = np.where(fluid, fluid_q, q_end)
    lat = np.minimum(cap, np.where(fluid, q_end, q)) / np.maximum(r, _TINY) + cx.ti + w
    # alone, bursts followed one by one (`_passive_bursts`) keep their counts
    kept = (res["followed"] > 0) & ~fluid
    # (active_wait: a packet the ring had no room for never reaches the backlog)
    delivered = np.where(act, np.minimum(delivered, res["interrupts"]), delivered)
    res["delivered"] = np.where(kept, res["delivered"], delivered)
    # the queue left when arrivals end: alone it drains at full speed, on a shared core
    # when the phases say it is taken
    drain = np.where(fluid, fluid_tail, q_end * w)
    res["duration"] = cx.span + cx.ti + drain + q_irq * cx.ti
    res["lat_mean"] = lat
    res["lat_p99"] = lat * 1.02
    res["stranded"] = np.zeros_like(r)
    # a consumer that never empties its ring is woken once (onoff: once per burst, plus
    # its timer ticks in the gaps)
    # (a burst's backlog that outlasts the gap keeps it awake across bursts: once)
    sleeps = cx.onoff & (q / np.maximum(r, _TINY) < cx.c("off"))
    # (a watermark consumer woken at more packets than a burst brings waits several
    # bursts, and its drain, n_w packets behind, runs across bursts until the backlog
    # clears at the average rate λ̄: n_w / (1 − λ̄w) packets a wake-up)
    avg = cx.c("rate") * cx.ws
    spans = cx.onoff & ~fluid & (n_wake > per_burst) & (avg < 1.0) & (n >= n_wake)
    across = np.floor((n - n_wake) * np.clip(1.0 - avg, 1e-6, None) / n_wake + 1e-9) + 1.0
    awake = np.where(fluid, 1.0 - behind, 0.0)  # shared: the share of time it keeps up
    res["interrupts"] = np.where(batched & ~kept, np.select(
        [spans, sleeps], [across, np.maximum(res["interrupts"], bursts)],
        1.0 + res["interrupts"] * awake), res["interrupts"])
    res["empty"] = np.where(batched & ~sleeps & ~kept, res["empty"] * awake, res["empty"])


def simulate(config: Config, settings: Mapping[str, NicSetting], *, seed: int = 0,
             exact: bool = False, window: int = 200_000) -> list[Metrics]:
    """One `Metrics` per transmission in `settings` (simulated together); seed, exact and
    window are accepted for interface parity and ignored (the model is deterministic)."""
    del seed, exact, window
    transmissions = config.select(list(settings))
    row = [settings[t.id] for t in transmissions]
    out = evaluate_batch(config, transmissions, SettingBatch.from_settings([row]))
    results = []
    for j, t in enumerate(transmissions):
        v = {k: float(out[k][0, j]) for k in METRIC_KEYS}
        counts = {k: round(v[k]) for k in ("packets_offered", "packets_delivered",
                                           "packets_dropped", "packets_stranded")}
        counts["packets_dropped"] = (counts["packets_offered"] - counts["packets_delivered"]
                                     - counts["packets_stranded"])
        results.append(Metrics(
            transmission=t.id, engine="fast", setting=row[j], **counts,
            **{k: v[k] for k in METRIC_KEYS if k not in counts},
            window_packets=t.packets, extrapolated=False))
    return results
