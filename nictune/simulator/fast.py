"""The fast engine: a closed-form / fluid model of docs/model.md, vectorised with NumPy.

`evaluate_batch(config, transmissions, batch)` evaluates P settings-vectors × T
transmissions in one call (a whole GA population); transmissions of one host are coupled
within a row (shared cores, memory bus). `simulate(config, settings)` is the engine
interface shared with the DES and returns `Metrics` with engine "fast".

How each mode is modelled (docs/engines.md has the derivations and the fidelity figures):
- a core serves active_wait's interrupts first, then packet work FIFO by request: on a
  shared host the time axis is cut into phases and the rest is water-filled between the
  transmissions (fast_shared.py); a saturated consumer gets r packets/s, its queue
  overflows;
- active_wait: one interrupt per packet; receive livelock r = (1 − λ·Ti)/w;
- passive_wait: a cycle — a drain of the q packets a tick finds, the next tick
  ⌈(Ti + drain)/T⌉ periods later, q refilled and capped by the ring: followed packet by
  packet for cbr (onoff: burst by burst, at the bursts' offsets against the ticks), the
  stationary distribution of a Markov chain on q for Poisson (fast_passive.py); on a
  shared core a drain first waits for the others' queued work, drawn afresh at each
  drain where they arrive at random; empty wake-ups are ticks whose window holds
  nothing;
- watermark: a wake at n_w packets (W, or what arrives within the timeout), the drain picks
  up the arrivals that come while it runs (exact integer count for cbr), the rest below the
  watermark after the last wake is stranded when there is no timeout;
- busy_poll: no interrupts, the core is busy for the whole duration.
Each mode is computed only on its own (p, t) elements, flattened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy.special import gammaincinv, ndtr

from nictune.model import PLACEMENT_COST, PLACEMENTS, Config, NicSetting, Transmission
from nictune.simulator.batch import ACTIVE, BUSY, PASSIVE, WATERMARK, SettingBatch
from nictune.simulator.compiled import compiled
from nictune.simulator.costs import pollers_cpu
from nictune.simulator.fast_base import (
    ALL_FOLLOWED,
    COUNTS_FOLLOWED,
    ONOFF,
    POISSON,
    TINY,
    Ctx,
    Mode,
    Workload,
    random_wait,
    rowsum,
)
from nictune.simulator.fast_passive import draws_waits, passive, poisson_excess
from nictune.simulator.fast_phases import wake_load
from nictune.simulator.fast_shared import (
    RANDOM_WAIT,
    TURNS,
    Partners,
    Wakes,
    alternation_lost,
    core_share,
    mix_waits,
    neighbours,
    one_each,
    partners,
    per_packet,
    poll_wait,
    queue_wait,
    random_share,
    round_robin,
)
from nictune.simulator.fast_wakes import joint_wakes
from nictune.simulator.metrics import Metrics

__all__ = ["METRIC_KEYS", "SettingBatch", "Workload", "evaluate", "evaluate_batch", "simulate"]

METRIC_KEYS = ("packets_offered", "packets_delivered", "packets_dropped", "packets_stranded",
               "bytes_delivered", "duration_s", "offered_bps", "throughput_bps", "interrupts",
               "empty_wakeups", "cpu_busy_s", "cpu_util", "latency_mean_s", "latency_p99_s",
               "energy_j")
_PLACE = np.array([PLACEMENT_COST[p] for p in PLACEMENTS])
BLOCK = 50_000  # (p, t) elements `evaluate` works on at a time
_TINY = 1e-12  # fast_base.TINY, for `_group`: compiled code reads its own file's constants
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)
_NODES = (_NODES + 1.0) / 2.0  # (on [0, 1])


def evaluate_batch(config: Config, transmissions: list[Transmission],
                   batch: SettingBatch, seed: int = 0) -> dict[str, np.ndarray]:
    """Metrics of every (setting-vector p, transmission t): METRIC_KEYS → arrays (P, T)
    (`seed`: the shared hosts' Poisson arrivals, as the DES's)."""
    if batch.shape[1] != len(transmissions):
        raise ValueError(f"batch has {batch.shape[1]} columns for {len(transmissions)} "
                         "transmissions")
    return evaluate(Workload.build(config, transmissions, seed), batch)


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
    # batched modes pay Ti once per cycle and self-regulate ("soft", `core_share`)
    cap_q = np.where(act, wl.backlog[None, :], b.ring_slots)
    hard = np.where(act, lam * ti, 0.0)
    soft = wake_load(wl.local, wl.ti, w, period, n_wake, pas, wat, 0.0)  # (no wait yet)
    share = core_share(wl, b, w, hard, soft, cap_q)
    ws = per_packet(w, share.rho_o)
    if wl.groups:  # shared hosts: the others' wake-ups are real while they still sleep
        sleeps = (pas | wat) & (lam * ws < 1.0) & ~np.isfinite(share.r)
        # a drain first waits for the others' queued work, which spaces the wake-ups
        wait = queue_wait(share.resid, share.rho_o)
        soft = wake_load(wl.local, wl.ti, ws, period, n_wake, pas, wat, wait)
        wakes = Wakes(wl.local, wl.ti, period, n_wake, pas, wat, sleeps, wait)
        share = core_share(wl, b, w, hard, soft, cap_q, wakes)
        ws = per_packet(w, share.rho_o)
        # active_wait's backlog out-queues the others' single requests: only their
        # interrupts slow it down
        ws = np.where(act, per_packet(w, share.high - hard), ws)
    delay = queue_wait(share.resid, share.rho_o)
    each = np.full(shape, np.inf)  # (a request's wait for one packet of each neighbour)
    polled, ahead = np.zeros(shape, dtype=bool), np.zeros(shape)
    if wl.groups:
        # round-robin by request bounds what a neighbour with one request at a time costs
        # a drain or a busy-poller's packet; active_wait's packets are a request each, so
        # beside it the wait stays (their load at the mean rate: an onoff neighbour's
        # bursts and gaps together)
        act_load = neighbours(wl, b, wl.rate[None, :] * w, act)
        drains = neighbours(wl, b, w, pas | wat)
        turns = drains + neighbours(wl, b, w, bus)
        first = act_load + share.high
        one = one_each(turns, first)
        ws_rr, wait_rr = round_robin(w, ws, delay, one, first)
        bounded = (pas | wat | bus) & (turns > 0)
        ws = np.where(bounded, ws_rr, ws)
        delay = np.where(bounded & (act_load <= 0), wait_rr, delay)
        # beside one busy-poller alone a drain waits for what it has in service or queued
        # when the drain asks (`poll_wait`); beside draining neighbours, or two pollers
        # and more, the queueing wait above (capped) matches the DES better: it also
        # stands in for how their work stretches the drains (fast.md, "Tried")
        polled = ((pas | wat) & bounded & (act_load <= 0) & (drains <= 0)
                  & (neighbours(wl, b, np.ones(shape), bus) <= 1.0 + 1e-9))
        mean, ahead = poll_wait(wl, b, w, np.minimum(wl.rate[None, :], share.r),
                                share.behind, bus, first)
        delay = np.where(polled, mean, delay)
        each = np.where(act_load <= 0, one, np.inf)
    add = np.zeros(shape)  # (the partners' drains)
    part = None
    if wl.groups:
        # passive partners (one NIC's transmissions) drain together at every tick: out of
        # the others' average share, into each drain
        part = partners(wl, b, w, pas, wat, period)
        has = part.drain > 0
        rest = np.clip(share.rho_o - part.load, 0.0, None)
        ws = np.where(has, per_packet(w, rest), ws)
        delay = np.where(has, queue_wait(share.resid - part.resid, rest), delay)
        add = part.drain

    col = np.broadcast_to(np.arange(shape[1]), shape).ravel()
    flat = {"ws": ws.ravel(), "ring": b.ring_slots.ravel(), "w": w.ravel(),
            "period": period.ravel(), "wm": wm.ravel(), "tau": tau.ravel(),
            "n_wake": n_wake.ravel(), "high": share.high.ravel(), "cap": cap_q.ravel(),
            "r": share.r.ravel(), "fluid_delivered": share.delivered.ravel(),
            "fluid_q": share.q_end.ravel(), "fluid_tail": share.tail.ravel(),
            "behind": share.behind.ravel(), "alt": share.alt.ravel(),
            "fluid_area": share.queue_area.ravel(), "fluid_longest": share.longest.ravel(),
            "alt_ws": share.alt_ws.ravel(),
            "delay": np.broadcast_to(delay, shape).ravel(),
            "resid": share.resid.ravel(), "rho_o": share.rho_o.ravel(),
            "each": each.ravel()}
    res = {key: np.zeros(col.size) for key in Mode.__dataclass_fields__}
    # a batched consumer on a shared core that is behind for part of its span: the rest of
    # the time it sleeps and wakes at the cost per packet it has then (`_saturate` keeps
    # only its wake-ups from the mode's result)
    awake_ws = per_packet(w, share.awake_rho)  # NaN: never keeps up
    awake = (pas | wat) & np.isfinite(share.r) & (share.behind < 1.0) & (lam * awake_ws < 1.0)
    ws_mode = np.where(awake, awake_ws, ws).ravel()

    # shared hosts: the part of the wait before a drain that random neighbours cause is
    # drawn afresh at each drain (`mix_waits`): the modes run with the rest ("even") and,
    # in the same call, at the nodes of that part, except where the Poisson chains draw it
    # themselves ("rand_wait", "rand_busy")
    flat["even"], flat["rand_wait"], flat["rand_busy"] = (
        flat["delay"], np.zeros(col.size), np.zeros(col.size))
    if wl.groups:
        rand = random_share(wl, b, lam * w + hard).ravel()
        # (the queueing wait's random part: 4/3 of its share of the mean, drawn about as
        # often as the core is busy; `poll_wait`'s: its share, as often as one is ahead)
        rand_busy = np.clip(np.where(polled, ahead, share.rho_o), 0.0, 0.95).ravel() * rand
        rand_wait = flat["delay"] * rand * np.where(polled, 1.0, RANDOM_WAIT).ravel()
        mixed = (pas | wat).ravel() & (rand_wait > 0) & (rand_busy > 1e-6) & ~(
            np.isfinite(flat["r"]) & (flat["behind"] >= 1.0))  # (those never sleep)
        flat["even"] = np.where(mixed, flat["delay"] * (1.0 - rand), flat["delay"])
        flat["rand_wait"], flat["rand_busy"] = rand_wait * mixed, rand_busy * mixed
        flat["even"] = flat["even"] + add.ravel()
        flat["delay"] = flat["delay"] + add.ravel()

    def run(mask: np.ndarray, fn: Callable[..., Mode], *names: str,
            draws: Callable[[Ctx, np.ndarray], np.ndarray] | None = None) -> None:
        """`fn` on the elements of `mask`, and on copies of those with a random wait at
        its nodes (none where `draws` says the mode draws it itself), in one call."""
        sel = np.flatnonzero(mask.ravel())
        if not sel.size:
            return
        mix = sel[flat["rand_busy"][sel] > 0]
        if draws is not None and mix.size:
            mix = mix[~draws(Ctx.build(wl, col[mix], ws_mode[mix], flat["ring"][mix]),
                             flat["period"][mix])]
        p, waits = random_wait(flat["rand_wait"][mix], flat["rand_busy"][mix])
        at = np.concatenate([sel, np.tile(mix, waits.shape[0] - 1)])
        own = np.arange(at.size) < sel.size  # (a copy: its wait is all in "even")
        args = {k: flat[k][at] for k in names}
        if "even" in args:
            args["even"] = args["even"] + np.concatenate([np.zeros(sel.size),
                                                          waits[1:].ravel()])
        for k in ("rand_wait", "rand_busy"):
            if k in args:
                args[k] = np.where(own, args[k], 0.0)
        out = fn(Ctx.build(wl, col[at], ws_mode[at], flat["ring"][at]), *args.values())
        every = {key: np.broadcast_to(getattr(out, key), at.shape) for key in res}
        for key, value in every.items():
            res[key][sel] = value[:sel.size]
        if mix.size:
            mix_waits(res, mix, p, {key: v[sel.size:].reshape(-1, mix.size)
                                    for key, v in every.items()})

    run(act, _active, "high", "resid", "rho_o", "each")
    run(pas, passive, "period", "even", "rand_wait", "rand_busy", draws=draws_waits)
    run(wat, _watermark, "wm", "tau", "n_wake", "even")
    run(bus, _busy_poll, "resid", "rho_o", "each", "w", "high")
    # a batched consumer that keeps up beside a backlogged neighbour: while it does, its
    # drains alternate with the neighbour's packets (cost alt_ws); the wake-ups are the
    # two regimes' in proportion to their time
    for mask, fn, names in ((pas, passive, ("period", "delay")),
                            (wat, _watermark, ("wm", "tau", "n_wake", "delay"))):
        sel = np.flatnonzero(mask.ravel() & (flat["alt"] > 0) & ~np.isfinite(flat["r"]))
        if sel.size:
            cx = Ctx.build(wl, col[sel], np.maximum(flat["alt_ws"][sel], flat["ws"][sel]),
                            flat["ring"][sel])
            out = fn(cx, *(flat[k][sel] for k in names))
            f = flat["alt"][sel]
            for key in ("interrupts", "empty"):
                res[key][sel] = f * getattr(out, key) + (1.0 - f) * res[key][sel]
    if part is not None:
        _drains_alone(wl, flat, res, col, share.rho_o, share.resid, part, w,
                      pas & ~np.isfinite(share.r), period, add)
    if part is not None and np.any(add > 0):
        # a partner's drain can serve one below its arrivals: what its ring loses then,
        # from what a tick finds (the window from a drain's end to the next tick)
        wakes = np.maximum(res["interrupts"], 1.0)
        drain = res["delivered"] / wakes * flat["ws"] + add.ravel()
        window = np.clip(wl.span[col] / wakes - drain, 0.0, None)
        queued = np.minimum(wl.local[col] * window, flat["ring"]).reshape(shape)
        lost = alternation_lost(wl, b, w, part, queued, period).ravel() * pas.ravel()
        over = np.flatnonzero(lost > 0)
        res["delivered"][over] = np.clip(res["delivered"][over] - lost[over] * wakes[over],
                                         0.0, None)
    sat = np.flatnonzero(np.isfinite(flat["r"]))
    if sat.size:
        cx = Ctx.build(wl, col[sat], flat["ws"][sat], flat["ring"][sat])
        sub = {k: v[sat] for k, v in res.items()}
        _saturate(cx, sub, act.ravel()[sat], (pas | wat).ravel()[sat],
                  *(flat[k][sat] for k in ("r", "high", "cap", "w", "fluid_delivered",
                                           "fluid_q", "fluid_tail", "behind", "n_wake",
                                           "fluid_area", "fluid_longest")),
                  pas.ravel()[sat], flat["period"][sat])
        for key, value in sub.items():
            res[key][sat] = value
    res = {k: v.reshape(shape) for k, v in res.items()}
    # passive_wait wakes only at its ticks (a saturated onoff consumer was woken once a
    # burst however far apart the ticks: 1 000 wake-ups in 0.5 s of 100 ms ticks)
    ticks = np.maximum(res["duration"], wl.span[None, :]) / period + 1.0
    res["interrupts"] = np.where(pas, np.minimum(res["interrupts"], ticks), res["interrupts"])
    res["empty"] = np.minimum(res["empty"], res["interrupts"])
    _first_wake(wl, b, w, pas, wat & (wl.n[None, :] < wm), period, tau, res)
    if wl.groups:  # a core of sleepers (and their neighbours): their wake-ups followed
        wakes, empty, lost = joint_wakes(wl, b, w)
        known = np.isfinite(wakes)
        res["interrupts"] = np.where(known, wakes, res["interrupts"])
        res["empty"] = np.where(known, np.minimum(empty, wakes), res["empty"])
        # and, over a window as long as the DES's, the packets their rings lost (the
        # closed form's saturated-core fluid was furthest off on one NIC's pairs)
        kept = np.clip(wl.n[None, :] * (1.0 - lost) - res["stranded"], 0.0, None)
        res["delivered"] = np.where(np.isfinite(lost), kept, res["delivered"])
    return _outputs(wl, res, w, bus, act, b.irq_core)


def _first_wake(wl: Workload, b: SettingBatch, w: np.ndarray, pas: np.ndarray,
                below: np.ndarray, period: np.ndarray, tau: np.ndarray,
                res: dict[str, np.ndarray]) -> None:
    """What the first wake-up decides, which the steady-state and shared-core models above
    cannot say (arrays (P, T); `res` in place; `below`: watermark elements with fewer
    packets than the watermark): one wake-up after the last arrival, a tick or a timeout
    (`_one_wake`); none at all below a watermark without a timeout (whatever a saturated
    core's fluid said); and a passive consumer starts at its first tick and drains no
    faster than w a packet (the saturated fluid, which starts at the first arrival, ended
    a 1.25 ms burst polled every ms at 2.5 ms, DES 3.5)."""
    late = np.where(pas, period, np.where(below, tau, 0.0))
    _one_wake(wl, b, w, late, late >= np.maximum(wl.span[None, :], TINY), res)
    start = np.where(pas, period + wl.ti[None, :] + res["delivered"] * w, 0.0)
    np.maximum(res["duration"], start, out=res["duration"])
    never = np.flatnonzero((below & (tau <= 0.0)).ravel())
    for key in ("interrupts", "empty", "delivered"):
        res[key].ravel()[never] = 0.0
    res["stranded"].ravel()[never] = np.broadcast_to(wl.n, below.shape).ravel()[never]


def _one_wake(wl: Workload, b: SettingBatch, w: np.ndarray, late: np.ndarray,
              one: np.ndarray, res: dict[str, np.ndarray]) -> None:
    """Elements `one` woken once, `late` s after their first arrival, after their last
    one: a passive_wait tick, or a watermark timeout with fewer packets than the
    watermark (arrays (P, T); `res` in place, after every steady-state and shared-core
    model, which would fill the ring from a whole period of arrivals and end the transfer
    at its last arrival). The wake-up takes the first R packets (the rest were dropped),
    whatever the arrival process; its drain alternates packet by packet with those of the
    consumers on its core woken at the same time (one NIC's transmissions), taking
    min(k, k_j) of theirs. Packet i of its k arrived i/λ in, so the latencies are evenly
    spaced, drain/k − 1/λ apart. (Packets of other consumers still arriving then are not
    counted.)"""
    if not one.any():
        return
    kept = np.minimum(wl.n[None, :], b.ring_slots)
    drain = kept * w
    for cols in wl.groups:
        at = wl.start[None, cols] + late[:, cols]
        both = (one[:, cols, None] & one[:, None, cols] & ~np.eye(cols.size, dtype=bool)
                & (b.irq_core[:, cols, None] == b.irq_core[:, None, cols])
                & (np.abs(at[:, :, None] - at[:, None, :]) <= 1e-6 * at[:, :, None]))
        k = kept[:, cols]
        drain[:, cols] += rowsum(both, np.minimum(k[:, :, None], k[:, None, :])
                                 * w[:, None, cols])
    first = late + wl.ti[None, :] + w  # the first packet's latency
    step = drain / kept - 1.0 / wl.local[None, :]
    sel = np.flatnonzero(one.ravel())
    for key, value in (("interrupts", 1.0), ("empty", 0.0), ("delivered", kept),
                       ("stranded", 0.0), ("duration", first - w + drain),
                       ("lat_mean", first + (kept - 1.0) / 2.0 * step),
                       ("lat_p99", first + (kept - 1.0) * step * np.where(step > 0, 0.99, 0.01))):
        res[key].ravel()[sel] = np.broadcast_to(value, one.shape).ravel()[sel]


def _drains_alone(wl: Workload, flat: dict[str, np.ndarray], res: dict[str, np.ndarray],
                  col: np.ndarray, rho_o: np.ndarray, resid: np.ndarray, part: Partners,
                  w: np.ndarray, pas: np.ndarray, period: np.ndarray, add: np.ndarray
                  ) -> None:
    """The packets a passive consumer loses when its drains miss its batched neighbours'
    or outlive its partners'.

    A neighbour on another timer drains at moments of its own, so a drain meets its work
    about ρ_j of the time and otherwise runs at the consumer's own pace — short, so the
    window to the next tick is long and the ring can overflow — where the average share
    slows every drain a little and no window overflows (rack.yaml: ingest-logs every
    63.5 ms beside ingest-bulk every 158 ms loses 8.2 % in the DES, 2.2 % as an average
    share). A partner's drain lengthens the consumer's at every tick, but only in the
    share of its span a partner arrives (`present`): the overlap-weighted drain said no
    window overflows where rack.yaml's ingest-backup-a, outliving ingest-backup-b by a
    quarter of its span, loses 2.3 % in the DES, all after b's end.

    The mode runs again for the consumers whose ring a window can fill, in the states the
    average leaves out — partner there or gone, the others' drains met or missed — and the
    losses mix by their chances, met with the neighbours' load (wake-ups stay the average
    share's: a tick comes every period either way, and the grids' rows are calibrated on
    them)."""
    reach = (wl.local * (period + wl.ti)).ravel()
    present = part.present.ravel()
    apart = part.apart.ravel() > 0
    gone = (present > 0) & (present < 1.0 - 1e-9)
    sel = np.flatnonzero(pas.ravel() & (apart | gone)
                         & (reach + 6.0 * np.sqrt(reach) >= flat["ring"]))
    if not sel.size:
        return
    n = wl.n[col[sel]]
    now = n - res["delivered"][sel]

    def lost(which: np.ndarray, partners: bool, others: bool) -> np.ndarray:
        """Packets lost by the elements `which` of `sel` with the partners' drains there
        or not and the other-timer neighbours' load in the average share or not (`now`
        elsewhere)."""
        out = now.copy()
        at = np.flatnonzero(which)
        if not at.size:
            return out
        rest = rho_o - part.load - (0.0 if others else part.apart)
        rest = np.clip(rest, 0.0, None)
        wait = (queue_wait(resid - part.resid - (0.0 if others else part.apart_resid), rest)
                + (add if partners else 0.0)).ravel()
        e = sel[at]
        mode = passive(Ctx.build(wl, col[e], per_packet(w, rest).ravel()[e],
                                 flat["ring"][e]), flat["period"][e], wait[e])
        out[at] = n[at] - mode.delivered
        return out

    met = np.clip(part.apart.ravel()[sel], 0.0, 0.95)
    there = np.where(present[sel] > 0, present[sel], 1.0)  # (no partner: as if there)
    missed_there = lost(apart[sel], partners=True, others=False)
    met_gone = lost(gone[sel], partners=False, others=True)
    # (without other-timer neighbours a drain has nothing to miss: met and missed agree)
    missed_gone = np.where(apart[sel], lost(gone[sel] & apart[sel], partners=False,
                                            others=False), met_gone)
    total = (there * (met * now + (1.0 - met) * missed_there)
             + (1.0 - there) * (met * met_gone + (1.0 - met) * missed_gone))
    res["delivered"][sel] = np.where(total > now, n - total, res["delivered"][sel])


def _outputs(wl: Workload, res: dict[str, np.ndarray], w: np.ndarray, bus: np.ndarray,
             act: np.ndarray, core: np.ndarray) -> dict[str, np.ndarray]:
    """The Metrics fields from the modes' results (all arrays (P, T); `core` the IRQ
    cores)."""
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
    work = cpu
    cpu = np.where(bus, duration, work)  # (a poller alone spins for its whole span)
    for cols in wl.groups:  # (a NIC's pollers on one IRQ core: one core between them)
        poll, nic, on = bus[:, cols], wl.nic[cols], core[:, cols]
        if poll.any() and np.unique(nic).size < cols.size:
            same = (poll[:, :, None] & poll[:, None, :] & (nic[:, None] == nic[None, :])
                    & (on[:, :, None] == on[:, None, :]))
            cpu[:, cols] = pollers_cpu(wl.start[cols], wl.start[cols] + duration[:, cols],
                                       work[:, cols], same)
    pos = np.maximum(duration, TINY)
    # a packet waits at least for its own work (active_wait: and its interrupt; a batched
    # consumer's drain pays one for many), at most from the first arrival to the last
    # delivery (a cap taken before `duration` was raised to the work once gave a packet
    # 60 ns for 616 ns of work)
    least = w + np.where(act, ti, 0.0)

    def latency(key: str) -> np.ndarray:
        return np.where(delivered > 0, np.minimum(np.maximum(res[key], least), duration), 0.0)

    return {
        "packets_offered": np.broadcast_to(n, shape).astype(float),
        "packets_delivered": delivered,
        "packets_dropped": dropped,
        "packets_stranded": stranded,
        "bytes_delivered": bytes_,
        "duration_s": duration,
        "offered_bps": np.broadcast_to(8.0 * wl.size * wl.offered, shape).astype(float),
        "throughput_bps": np.where(duration > 0, 8.0 * bytes_ / pos, 0.0),
        "interrupts": irq,
        "empty_wakeups": res["empty"],
        "cpu_busy_s": cpu,
        "cpu_util": np.where(duration > 0, cpu / pos, 0.0),
        "latency_mean_s": latency("lat_mean"),
        "latency_p99_s": latency("lat_p99"),
        "energy_j": wl.nic_idle[None, :] * duration + wl.core_busy[None, :] * cpu,
    }


def _active(cx: Ctx, high: np.ndarray, resid: np.ndarray, rho_o: np.ndarray,
            each: np.ndarray) -> Mode:
    """An interrupt per packet; M/D/1-like waiting for Poisson arrivals, and on a shared
    core for the others' work (`_others_wait`)."""
    rho = np.clip(cx.lam * (cx.ti + cx.ws), 0.0, 0.999)
    own = np.where(cx.poisson, rho * (cx.ti + cx.ws) / (2.0 * (1.0 - rho)), 0.0)
    others, core = _others_wait(rho, resid, rho_o)
    wait = own + np.minimum(others, each)
    lat = cx.ti + cx.ws + wait
    # Poisson: the handlers of packets that arrive meanwhile preempt the packet's work
    lat = np.where(cx.poisson, lat / np.clip(1.0 - cx.lam * cx.ti, 0.05, None), lat)
    # (steady-state queueing; a packet waits at most for the work of the whole transfer)
    most = cx.n * (cx.ti + cx.ws)
    lat = np.minimum(lat, most)
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
        # (else the handlers run through the gaps too: they take the whole arrival span,
        # not only the bursts — a review's case had half the DES's interrupts)
        mean = h * on / (on + off)
        ring_in[oo] = np.where(mean < 1.0, np.clip(n - lost, 0.0, None),
                               np.minimum(n, n / mean + cx.ring[oo]))
    zero = np.zeros_like(lat)
    return Mode(interrupts=ring_in, empty=zero, delivered=cx.n + zero, stranded=zero,
                 duration=cx.span + lat, lat_mean=lat,
                 lat_p99=np.minimum((cx.ti + cx.ws + _wait_p99(wait, core)) / np.where(
                     cx.poisson, np.clip(1.0 - cx.lam * cx.ti, 0.05, None), 1.0), most))


def _busy_poll(cx: Ctx, resid: np.ndarray, rho_o: np.ndarray, each: np.ndarray,
               w: np.ndarray, high: np.ndarray) -> Mode:
    """No interrupts; a packet is seen Tc/2 after it arrives on average and costs w
    (stretched by the handlers that preempt it); it waits for its own queue (M/D/1 for
    Poisson arrivals, each packet at the cost `ws` a backlog has) and, on a shared core,
    for the others' work (`_others_wait`), at most one packet of each neighbour on
    average (`each`: round-robin) and TURNS of them at the 99th percentile."""
    rho = np.clip(cx.lam * cx.ws, 0.0, 0.999)
    # (steady-state M/D/1; a packet waits at most for the rest of the transfer's work)
    own = np.where(cx.poisson, np.minimum(rho * cx.ws / (2.0 * (1.0 - rho)),
                                          (cx.n - 1.0) * cx.ws), 0.0)
    others, core = _others_wait(rho, resid, rho_o)
    tc = cx.c("tc")
    # (a packet no backlog is ahead of waits for one of each neighbour, not per packet of
    # its own: the mean beside a saturated neighbour was 3.0x the DES's)
    service = np.minimum(cx.ws, w / np.clip(1.0 - high, 0.02, None))
    lat = tc / 2.0 + service + own + np.minimum(others, each)
    p99 = np.minimum(_wait_p99(own + others, core), _wait_p99(own, rho) + TURNS * each)
    zero = np.zeros_like(lat)
    return Mode(interrupts=zero, empty=zero, delivered=cx.n + zero, stranded=zero,
                duration=cx.span + lat, lat_mean=lat, lat_p99=tc + service + np.minimum(
                    p99, (cx.n - 1.0) * cx.ws))


def _others_wait(rho: np.ndarray, resid: np.ndarray, rho_o: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """On a shared core, a packet's mean wait for the others' work in service and queued
    when it comes, and the whole core's load: their residual-work rate Σ λ·b²/2 (`resid`;
    interrupt handlers included) over the idle share of the core (Pollaczek–Khinchine),
    (1 − ρ_o)(1 − ρ) — `rho_o` theirs, `rho` the consumer's own load at its cost per
    packet stretched by theirs, w/(1 − ρ_o), so that the product is 1 − ρ_o − λw (the
    core at most 98 % busy in the wait). Alone on a core both are 0 and the load is
    `rho`. Without it the fast engine put busy_poll's p99 latency beside other consumers
    at half the DES's (median)."""
    idle = (1.0 - rho_o) * (1.0 - rho)
    return (np.clip(resid, 0.0, None) / np.clip(idle, 0.02, None),
            np.clip(1.0 - idle, 0.0, 0.999))


def _wait_p99(wait: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """99th percentile of an M/G/1 wait of mean `wait` at load ρ: P(W > t) ≈ ρ·e^(−ρt/W)."""
    return np.where(wait > 0, wait / np.maximum(rho, TINY) * np.log(np.clip(
        100.0 * rho, 1.0, None)), 0.0)


def _packets_at_wake(lam: np.ndarray, wm: np.ndarray, tau: np.ndarray,
                     poisson: np.ndarray) -> np.ndarray:
    """Packets in the ring when the watermark consumer wakes: W, or what the timeout lets in."""
    x = lam * tau
    timed = tau > 0
    cbr_n = np.where(timed, np.minimum(wm, 1.0 + np.floor(x + 1e-9)), wm)
    pois_n = wm.copy()
    pt = np.flatnonzero(poisson & timed)
    if pt.size:
        pois_n[pt] = 1.0 + x[pt] - poisson_excess(x[pt], wm[pt] - 1.0)
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


def _watermark(cx: Ctx, wm: np.ndarray, tau: np.ndarray, n_wake: np.ndarray,
               delay: np.ndarray) -> Mode:
    """Wake at n_w packets; the drain also takes what arrives while it runs (c per wake)."""
    lam, ti, ws, n = cx.lam, cx.ti, cx.ws, cx.n
    g = 1.0 / lam
    timed = tau > 0
    by_timeout = timed & (n_wake < wm)
    # evenly spaced arrivals: the drain ends before arrival k+1, the smallest such k
    delta = np.where(by_timeout, tau - cx.time_of(n_wake), 0.0)
    x = (ti + delay + n_wake * ws - g + delta) / np.maximum(g - ws, TINY)
    extra = np.where(cx.poisson, lam * (ti + delay + n_wake * ws) / np.clip(1.0 - lam * ws, 1e-6,
                                                                           None),
                     np.maximum(0.0, np.floor(x + 1e-9) + 1.0))
    c = np.minimum(n_wake + extra, np.maximum(n, n_wake))  # (no more than there are)
    # wake j comes at packet (j − 1)·c + n_w; what is left after the last one is < n_w
    full = np.where(n >= n_wake, np.floor((n - n_wake) / c + 1e-9) + 1.0, 0.0)
    left = np.clip(n - full * c, 0.0, None)
    # Poisson: the arrivals end inside a drain (nothing left) or in the n_w − 1 after it
    # (n_w/c of the time: (n_w − 1)/2 left on average); none if the first drain takes all
    tail = np.where(n_wake + extra >= n, 0.0,
                    (wm - 1.0) / 2.0 * np.minimum(1.0, n_wake / np.maximum(c, 1.0)))
    left = np.where(cx.poisson, np.where(n < wm, n, np.minimum(tail, n)), left)
    # (Poisson with a timeout: the last arrival finds the consumer asleep — leaving 1 to
    # n_w − 1 packets for the timeout — with the probability p = (n_w − 1)/c that an
    # arrival comes before its cycle's wake-up, else a drain takes it. A tail predicted
    # wrongly costs τ/(s + τ) of the throughput, one missed τ/s (s: the arrival span), so
    # the tail is predicted where p > s/(2s + τ): the end with the smaller expected
    # relative error — the likelier one when τ ≪ s, the tail unless it is rare when τ ≫ s,
    # as with the default's 0.5 s)
    asleep = ((n_wake - 1.0) / np.maximum(c, 1.0) > cx.span / (2.0 * cx.span + tau)) & (
        n_wake + extra < n)  # (else the first drain takes every packet)
    left = np.where(cx.poisson & timed, np.where(asleep, np.minimum(n, (n_wake - 1.0) / 2.0),
                                                 0.0), left)
    wakes = np.where(cx.poisson, (n - left) / c, full) + np.where(timed & (left > 0), 1.0, 0.0)
    # Poisson without a timeout and a few wake-ups: whole ones (`_renewals`), where the
    # drains' spread leaves their sums near normal
    # drains: n_w + extra packets on average (not capped by what is left to come)
    drained = n_wake + extra
    few = np.flatnonzero(cx.poisson & ~timed & (n >= n_wake) & (n - n_wake <= 20.0 * drained))
    work = ti[few] + delay[few] + n_wake[few] * ws[few]  # what starts a drain, s
    var = lam[few] * work / (1.0 - np.clip(lam[few] * ws[few], 0.0, 0.999)) ** 3
    near = var <= drained[few] ** 2
    few, var = few[near], var[near]
    wakes[few], left[few] = _renewals(n[few], n_wake[few], drained[few], var)
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
    # (bursts that each end with an empty ring, clean or flushed: what the last burst's
    # wake-ups leave below the watermark waits for the timeout, or is stranded)
    apart = clean | flush
    left = np.where(apart, np.clip(last - in_last * c, 0.0, None), left)
    wakes = np.where(clean, (bursts - 1.0) * in_burst + in_last + (timed & (left > 0)), wakes)
    # onoff drains that do not catch up in their burst: groups of bursts (`_across_bursts`)
    across, groups = np.zeros(n.shape, dtype=bool), np.zeros((7, *n.shape))
    cand = np.flatnonzero(cx.onoff & (n >= n_wake))
    if cand.size:
        *parts, across[cand] = _across_bursts(
            Ctx.build(cx.wl, cx.col[cand], ws[cand], cx.ring[cand]), n_wake[cand],
            delay[cand], timed[cand])
        groups[:, cand] = parts
    a_wakes, a_left, a_end, a_lat, a_p99, a_lost, a_fits = groups
    wakes, left = np.where(across, a_wakes, wakes), np.where(across, a_left, left)
    # end: the last drain (packets up to min(N, full·c)), then the timeout flush if any
    last_idx = n - left
    m = np.where(apart & (in_last > 0), np.minimum(c, last - (in_last - 1.0) * c),
                 last_idx - (full - 1.0) * c)
    drain_end = cx.time_of(last_idx) + np.where(
        cx.poisson, ti + n_wake * ws, np.maximum(ws, ti + m * ws - (m - n_wake) * g))
    flush_end = cx.time_of(n - left + 1.0) + tau + ti + left * ws
    drain_end = np.where(across, a_end, drain_end)
    duration = np.where(timed & (left > 0), np.maximum(drain_end, flush_end), drain_end)
    # (Poisson: the wait for the n_w − 1 packets after the first, or the timeout, whichever
    # comes first, brings n_w − 1 on average, so it lasts (n_w − 1)/λ on average)
    fill = np.where(by_timeout & ~cx.poisson, tau, (n_wake - 1.0) * g)
    # evenly spaced: packet k of a wake-up's n_w waits fill − k·g (+ Ti), so the upper 1 %
    # of all packets are the first ⌊n_w / 100⌋ + 1 of each wake-up (below 100 a wake-up,
    # its first: the whole fill, not 0.99 of it); Poisson: the first packet of a wake-up
    # waits longest, for n_w − 1 more, a Gamma wait whose upper 1 % of all packets is its
    # upper n_w % (capped by the timeout)
    # (on a shared core a drain first waits `delay` for the others' queued work, and so
    # does every packet in the ring: beside neighbours the mean was 0.91 of the DES's)
    p99 = fill - np.floor(0.01 * n_wake + 1e-9) * g + ti + delay
    p99 = np.where(across, a_p99, p99)
    wait = np.where(across, a_lat, (fill + ti) / 2.0 + delay)  # (the mean, at the watermark)
    few = np.flatnonzero(cx.poisson & (n_wake > 1.5) & (n_wake < 100.0))
    if few.size:
        first = gammaincinv(n_wake[few] - 1.0, 1.0 - 0.01 * n_wake[few]) * g[few]
        p99[few] = np.minimum(np.where(timed[few], tau[few], np.inf), first) + ti[few]
    # the packets left after the last wake-up at the watermark wait for the timeout, the
    # first of them all of it: their share of the mean, and of the upper 1 % if they are
    # that many
    tail = timed & (left > 0)
    share = np.where(tail, left / np.maximum(n, 1.0), 0.0)
    lat_mean = ((1.0 - share) * wait
                + share * (tau - cx.mean_arrival(left) + ti + left * ws / 2.0))
    top = 0.01 * n
    p99 = np.where(tail & (left >= top), np.maximum(p99, tau - np.maximum(top - 1.0, 0.0) * g
                                                    + ti), p99)
    zero = np.zeros_like(duration)
    # (a saturated core keeps these counts — not where the ring overflows, which its
    # fluid queue counts better)
    return Mode(interrupts=wakes, empty=zero,
                delivered=n - np.where(timed, 0.0, left) - np.where(across, a_lost, 0.0),
                stranded=np.where(timed, 0.0, left), duration=duration,
                lat_mean=ws + lat_mean, lat_p99=ws + p99,
                followed=np.where(across & (a_fits > 0), ALL_FOLLOWED, 0.0))


def _renewals(n: np.ndarray, w: np.ndarray, c: np.ndarray, var: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(E[wake-ups], E[packets left]) of a watermark consumer over n Poisson arrivals,
    woken at the w-th packet queued, whose drains take c packets on average (w and what
    arrives during an M/D/1 busy period: variance `var`).

    Wake k + 1 comes once the first k drains have taken T_k ≤ n − w packets; T_k, a sum of
    k drains, is about Normal(kc, k·var), and at least k·w. What the last drain leaves is
    n − T_k, for the k with n − w < T_k < n (a drain takes at least w, so that k is the
    last): E[(n − T)·1{…}] of a normal, summed over k, with the half-packet continuity
    correction of a whole count (at light load a drain takes exactly w: W = 1 left half a
    packet and 19.5 wake-ups of 20)."""
    k = np.arange(1.0, 64.0)[:, None]  # (n − w ≤ 20c: beyond 63 drains, 5 σ past n − w)
    mean, sd = k * c, np.sqrt(k * var) + 1e-9
    lo, hi = (n - w + 0.5 - mean) / sd, (n - 0.5 - mean) / sd
    wakes = 1.0 + (ndtr(lo) * (k * w <= n - w)).sum(axis=0)
    density = np.exp(-0.5 * hi * hi) - np.exp(-0.5 * lo * lo)
    left = ((n - mean) * (ndtr(hi) - ndtr(lo)) + sd * density / np.sqrt(2.0 * np.pi))
    return wakes, (left * (k * w < n)).sum(axis=0)


def _across_bursts(cx: Ctx, n_wake: np.ndarray, delay: np.ndarray, timed: np.ndarray,
                   horizon: int = 64) -> tuple[np.ndarray, ...]:
    """Onoff watermark consumers (the elements of `cx`, each with at least n_w packets)
    whose drain does not catch up before its wake-up burst ends — n_w above a burst, or a
    drain too long for the rest of the burst (else the count runs on through the gaps, as
    evenly spaced arrivals at the burst rate): a wake-up takes a group of bursts, from
    where the last one ended to the burst that brings n_w and those its drain runs into
    (while its work is more than a gap leaves; the mean load below 1, else one drain to
    the end), the last of them whole if the drain ends in its gap, else up to where it
    catches up, where the next group starts. The groups are followed one by one (the
    first `horizon`, the rest at their mean size); what is left after the last one stays
    below the watermark. A group's drain is behind until its end, so its packet i waits
    from its arrival to the wake-up + Ti + i·w; its queue peaks at the end of the wake-up
    burst or of the next, and a smaller ring loses the excess each group. Returns the
    wake-ups (one more for a timeout's flush), the packets left, when the last drain ends,
    the mean and upper 1 % of that wait (less the packet's own w; for a group of the mean
    size from a burst's start), the packets lost, whether the ring holds the peak, and
    which elements this holds for (not those that catch up)."""
    n, ws, ti, lam = cx.n, cx.ws, cx.ti, cx.lam
    catches, peak, done, before, wakes = _groups(
        n, n_wake, lam, ws, ti, delay, cx.c("per_burst"), cx.c("bursts"), cx.c("cycle"),
        cx.c("on"), cx.c("off"), horizon)
    ok = np.flatnonzero(~catches)
    left = np.clip(n - done, 0.0, None)
    last = np.minimum(n, done)
    # what a ring smaller than the peak loses, each group alike
    lost = np.minimum(np.clip(peak - cx.ring, 0.0, None) * wakes, last)
    end = np.maximum(cx.time_of(before + n_wake) + ti + delay + (last - before) * ws,
                     cx.time_of(last) + ws)
    mean = done / np.maximum(wakes, 1.0)  # packets a group
    start = cx.time_of(n_wake) + ti + delay
    lat = start + ws * (mean - 1.0) / 2.0 - cx.mean_arrival(mean)
    # (the first packet waits longest if the drain gains on the arrivals, the last if it
    # falls behind them in the bursts: the upper 1 % over a group's packets, sampled)
    i = 1.0 + (mean[ok, None] - 1.0) * np.linspace(0.0, 1.0, 101)[None, :]
    arrived = Ctx.build(cx.wl, cx.col[ok], ws[ok], cx.ring[ok]).time_of(i)
    p99 = np.zeros(n.size)
    p99[ok] = np.percentile(start[ok, None] + (i - 1.0) * ws[ok, None] - arrived, 99.0,
                            axis=1)
    return wakes + (timed & (left > 0)), left, end, lat, p99, lost, peak <= cx.ring, ~catches


@compiled
def _groups(n: np.ndarray, n_wake: np.ndarray, lam: np.ndarray, ws: np.ndarray,
            ti: np.ndarray, delay: np.ndarray, per_burst: np.ndarray, bursts: np.ndarray,
            cycle: np.ndarray, on: np.ndarray, gap: np.ndarray, horizon: int
            ) -> tuple[np.ndarray, ...]:
    """`_across_bursts`' groups, element by element: (whether the first group catches up
    in its wake-up burst, the most it queues, the packets the wake-ups take,
    those taken before the last, the wake-ups)."""
    e = n.size
    peak, done, before, wakes = np.zeros(e), np.zeros(e), np.zeros(e), np.zeros(e)
    catches = np.zeros(e, np.bool_)
    for i in range(e):
        taken, offset, catches[i], peak[i] = _group(
            0.0, n_wake[i], lam[i], ws[i], ti[i], delay[i], per_burst[i], bursts[i],
            cycle[i], on[i], gap[i])
        if catches[i]:
            continue
        going = True
        for g in range(horizon):
            if g:  # (the first group is the one above)
                taken, offset, _, _ = _group(offset, n_wake[i], lam[i], ws[i], ti[i],
                                             delay[i], per_burst[i], bursts[i], cycle[i],
                                             on[i], gap[i])
            before[i] = done[i]
            done[i] += taken
            wakes[i] += 1.0
            going = done[i] + n_wake[i] <= n[i]  # another wake-up comes
            if not going:
                break
        if going:  # (past the horizon: the rest at the mean size)
            size = done[i] / wakes[i]
            extra = np.floor((n[i] - done[i] - n_wake[i]) / size + 1e-9) + 1.0
            before[i] = done[i] + (extra - 1.0) * size
            done[i] += extra * size
            wakes[i] += extra
    return catches, peak, done, before, wakes


@compiled
def _group(offset: float, nw: float, lam: float, w: float, ti: float, delay: float,
           pb: float, bursts: float, cycle: float, on: float, gap: float
           ) -> tuple[float, float, bool, float]:
    """(packets, next offset, catches up in its wake-up burst, the most it queues) of a
    group that starts `offset` packets into a burst."""
    ld = lam * w
    sp = cycle - pb * w  # what each later burst gives back
    # the wake-up burst (≥ 0: a watermark of 1 in a burst of 10¹¹ packets is below the
    # tolerance, which made it −1 and every group empty)
    b = max(np.ceil((offset + nw) / pb - 1e-9) - 1.0, 0.0)
    rest = (b + 1.0) * pb - offset - nw  # its packets after the wake-up
    work = ti + delay + nw * w
    catches = (ld < 1.0) and (work / np.maximum(1.0 - ld, _TINY) < rest / lam)
    # s the drain runs past that burst's gap, and the bursts it runs into
    over = work + rest * w - rest / lam - gap
    more = 0.0
    if over > 0:
        more = np.ceil(over / np.maximum(sp, _TINY) - 1e-9) if sp > 0 else bursts
    # the last of them: its backlog (r s of work) may clear before it ends, after
    # ⌈λr / (1 − λw)⌉ of its packets
    r = over - (more - 1.0) * sp
    mid = (more >= 1.0) and (ld < 1.0) and (r < on * (1.0 - ld))
    part = np.minimum(np.ceil(lam * r / np.maximum(1.0 - ld, _TINY) - 1e-9), pb - 1.0)
    stop = (b + more) * pb + part if mid else (b + more + 1.0) * pb
    # (a group that starts inside a burst may catch up in its wake-up burst: after
    # ⌈λ·work / (1 − λw)⌉ more packets, where the next count starts)
    up = offset + nw + np.ceil(lam * work / np.maximum(1.0 - ld, _TINY) - 1e-9)
    if catches:
        stop = up
    after = up - b * pb if catches else (part if mid else 0.0)
    # the queue peaks at the end of the wake-up burst or of the next (a burst past the
    # core's rate adds 1 − 1/λw of its packets)
    grows = np.maximum(1.0 - 1.0 / np.maximum(ld, _TINY), 0.0)
    peak = np.maximum(nw + rest * grows, over / w + pb * grows if over > 0 else 0.0)
    return np.minimum(stop, bursts * pb) - offset, after, catches, peak


def _backlog_wait(lam: np.ndarray, r: np.ndarray, on: np.ndarray, cap: np.ndarray,
                  peak: np.ndarray, w: np.ndarray, late: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and longest wait of the delivered packets of a queue served at r < λ while
    packets arrive for `on` s and at 1/w after: it grows linearly towards `peak` packets
    or, served only from `late` s in (a watermark's consumer asleep until then), at λ
    until then and at λ − r after; once it holds `cap` it admits only r a second. A packet
    that finds Q ahead waits until service starts and Q / r, or, if the arrivals end
    first, until then and Q − r·(time left) packets of w more (Gauss–Legendre over the
    arrival time)."""
    x = on[:, None] * _NODES[None, :]
    lt = late[:, None]
    q = np.where(lt > 0.0, lam[:, None] * np.minimum(x, lt)
                 + (lam - r)[:, None] * np.clip(x - lt, 0.0, None),
                 peak[:, None] / np.maximum(on, TINY)[:, None] * x)
    q = np.minimum(q, cap[:, None])
    rr = np.maximum(r, TINY)[:, None]
    admitted = np.where(q < cap[:, None], lam[:, None], np.where(x < lt, 0.0, rr))
    start = np.maximum(x, lt)  # (service starts)
    left = np.clip(on[:, None] - start, 0.0, None)
    wait = start - x + np.minimum(q / rr, left + np.clip(q - rr * left, 0.0, None)
                                  * w[:, None])
    return ((admitted * wait) @ _WEIGHTS / np.maximum(admitted @ _WEIGHTS, TINY),
            wait.max(axis=1))


def _saturate(cx: Ctx, res: dict[str, np.ndarray], act: np.ndarray, batched: np.ndarray,
              r: np.ndarray, high: np.ndarray, cap: np.ndarray, w: np.ndarray,
              fluid_delivered: np.ndarray, fluid_q: np.ndarray, fluid_tail: np.ndarray,
              behind: np.ndarray, n_wake: np.ndarray, fluid_area: np.ndarray,
              fluid_longest: np.ndarray, pas: np.ndarray, period: np.ndarray) -> None:
    """Elements whose core cannot keep up: the consumer gets r packets/s, its queue overflows.

    Alone on a host, per burst (cbr/poisson: one burst) the queue (backlog B in active_wait,
    else the ring R) fills at λ − r, drops beyond its capacity and drains after the last
    arrival; on a shared host the phases of `core_share` did that already (`fluid_*`: the
    packets delivered, the queue when arrivals end and how long it takes to drain, and the
    share of the span the consumer was behind: the rest of the time it sleeps and wakes as
    usual).
    """
    n, lam = cx.n, cx.lam
    on = cx.c("on") + 1.0 / lam
    per_burst, bursts = cx.c("per_burst"), cx.c("bursts")
    own = {key: res[key].copy() for key in ("duration", "stranded", "lat_mean", "lat_p99")}
    # (a watermark consumer that sleeps between bursts — its queue clears in the gap — is
    # served only from its n_w-th packet of a burst on; cbr and poisson are one burst, so
    # it starts there once)
    late = np.minimum(on, np.where(batched, (n_wake - 1.0) / lam, 0.0))
    # (cbr/poisson: the one wake-up's handler runs before the drain starts; passive_wait
    # wakes first at its first tick, a period after the first arrival — served from the
    # first arrival, a 100 ms tick delivered 545 222 of 1 000 000 packets, DES 382 877)
    ticks = pas & ~cx.onoff
    starts = batched & ~cx.onoff & ((n_wake > 1.0) | ticks)
    late = np.where(ticks, period, late)
    late = np.where(starts, np.minimum(on, late + cx.ti), late)
    q = np.clip(lam * on - r * (on - late), 0.0, cap)
    clears = (q < r * cx.c("off")) | ~cx.onoff
    late = np.where(clears, late, 0.0)
    q = np.where(clears, q, np.clip((lam - r) * on, 0.0, cap))
    # between bursts the queue drains with the core to itself, after the handlers an
    # active_wait burst past λ·Ti = 1 left pending in the ring (they come first: a ring
    # of them longer than the gap leaves no packet work there at all — served in the
    # gaps, a review's case delivered 56 000 packets where the DES delivers 1 000)
    pending = np.where(act & (high > 1.0), np.minimum(
        cx.ring, per_burst * (1.0 - 1.0 / np.maximum(high, 1.0))), 0.0)
    gap = np.clip(cx.c("off") - pending * cx.ti, 0.0, None)
    mid = np.minimum(per_burst, r * (on - late) + np.minimum(q, gap / w))
    last_n = n - (bursts - 1.0) * per_burst
    last_on = np.minimum(on, last_n / lam)
    last = np.minimum(last_n, r * np.clip(last_on - late, 0.0, None) + cap)
    delivered = (bursts - 1.0) * mid + last
    q_end = np.clip(last - r * np.clip(last_on - late, 0.0, None), 0.0, None)
    # active_wait past λ·Ti = 1: the ring holds what the handlers could not take yet
    q_irq = np.where(act & (high > 1.0), np.clip(
        res["interrupts"] - n / np.maximum(high, 1.0), 0.0, cx.ring), 0.0)
    fluid = np.isfinite(fluid_delivered)
    delivered = np.where(fluid, fluid_delivered, delivered)
    late_start = starts & ~fluid
    wait, longest = _backlog_wait(lam, r, on, cap, (lam - r) * on, w,
                                  np.where(late_start, late, 0.0))
    # shared: the phases' own queue, its mean wait by Little's law (the closed form above,
    # given the queue left at the end for its peak, said a backlog that had cleared by
    # then cost nothing: a busy-poller behind a saturated neighbour for 66 of 92 ms
    # waited 2.8 µs, the DES 9.2 ms)
    wait = np.where(fluid, fluid_area / np.maximum(fluid_delivered, 1.0), wait)
    longest = np.where(fluid, fluid_longest, longest)
    # (onoff past λ·Ti = 1: a burst's packets wait in the gap for the handlers pending)
    held = np.where(fluid | ~cx.onoff, 0.0, pending * cx.ti)
    wait, longest = wait + held, longest + held
    # (busy_poll takes no interrupt; a late start has it in the wait)
    ti = np.where((act | batched) & ~late_start, cx.ti, 0.0)
    lat = wait + ti + w
    # alone, bursts followed one by one (`_passive_bursts`) keep their counts, ends and
    # waits; watermark groups of bursts whose drains run across gaps (`_across_bursts`,
    # within the ring) also what is left below the watermark, where the mean load is
    # below the core's (else the backlog grows cycle by cycle) or the ring holds every
    # packet
    holds = (cx.c("rate") * cx.ws < 1.0) | (n <= cap)
    whole = (res["followed"] == ALL_FOLLOWED) & ~fluid & holds
    kept = whole | ((res["followed"] == COUNTS_FOLLOWED) & ~fluid)
    # (active_wait: a packet the ring had no room for never reaches the backlog)
    delivered = np.where(act, np.minimum(delivered, res["interrupts"]), delivered)
    res["delivered"] = np.where(kept, res["delivered"], delivered)
    # the queue left when arrivals end: alone it drains at full speed, on a shared core
    # when the phases say it is taken
    drain = np.where(fluid, fluid_tail, q_end * w)
    res["duration"] = cx.span + ti + drain + q_irq * cx.ti
    # (a consumer served at r ≈ 0 while it arrives delivers only its queue, at the end: its
    # packets wait for about the whole duration, not q / r)
    res["lat_mean"] = np.minimum(lat, res["duration"])
    res["lat_p99"] = np.minimum(np.maximum(0.99 * longest + ti + w, lat), res["duration"])
    # past livelock (λ·Ti > 1) packet work gets no time while packets arrive: the backlog
    # holds the first packets, served only after the last arrival — the k-th waits about
    # the duration less (B − k)·w and its arrival k/λ (half of that was said); onoff
    # bursts leave gaps in which the backlog is served, burst by burst, unless the
    # handlers pending from each burst fill its gap
    starved = act & (high > 1.0) & (~cx.onoff | (gap <= 0.0))
    spread = res["delivered"] * (w + 1.0 / lam)
    for key, share in (("lat_mean", 0.5), ("lat_p99", 0.01)):
        res[key] = np.where(starved, np.maximum(res[key], res["duration"] - share * spread),
                            res[key])
    # a batched consumer that caught up before its arrivals ended sleeps and wakes as
    # usual from then on: what its last wake-up leaves below the watermark waits for the
    # timeout or is stranded, as the mode says, and its packets wait at least as long as
    # the mode says
    caught = fluid & batched & (fluid_q < 1.0)
    res["stranded"] = np.where(whole | caught, own["stranded"], 0.0)
    for key in ("duration", "lat_mean", "lat_p99"):
        res[key] = np.where(kept, own[key], np.where(caught, np.maximum(res[key], own[key]),
                                                     res[key]))
    # a consumer that never empties its ring is woken once (onoff: once per burst, plus
    # its timer ticks in the gaps)
    # (a burst's backlog that outlasts the gap keeps it awake across bursts: once; on a
    # shared core, one behind only while a neighbour's backlog lasted — no drop, caught
    # up by its end — is behind for that stretch, not burst by burst)
    lossless = caught & (fluid_delivered > n - 0.5)
    sleeps = cx.onoff & (q / np.maximum(r, TINY) < cx.c("off")) & ~lossless
    awake = np.where(fluid, 1.0 - behind, 0.0)  # shared: the share of time it keeps up
    res["interrupts"] = np.where(batched & ~kept, np.where(
        sleeps, np.maximum(res["interrupts"], bursts), 1.0 + res["interrupts"] * awake),
        res["interrupts"])
    res["empty"] = np.where(batched & ~sleeps & ~kept, res["empty"] * awake, res["empty"])


def simulate(config: Config, settings: Mapping[str, NicSetting], *, seed: int = 0,
             exact: bool = False, window: int = 200_000) -> list[Metrics]:
    """One `Metrics` per transmission in `settings` (simulated together); seed, exact and
    window are accepted for interface parity and ignored, but for the seed of the arrivals
    that shared cores of sleepers follow (`fast_wakes`)."""
    del exact, window
    transmissions = config.select(list(settings))
    row = [settings[t.id] for t in transmissions]
    out = evaluate_batch(config, transmissions, SettingBatch.from_settings([row]), seed)
    return metrics_rows(transmissions, [row], out)[0]


def metrics_rows(transmissions: list[Transmission], rows: list[list[NicSetting]],
                 out: dict[str, np.ndarray]) -> list[list[Metrics]]:
    """`Metrics` of each row of settings from `evaluate`'s arrays (P, T) for them."""
    return [[_metrics(t, row[j], {k: float(out[k][i, j]) for k in METRIC_KEYS})
             for j, t in enumerate(transmissions)] for i, row in enumerate(rows)]


def _metrics(t: Transmission, setting: NicSetting, v: dict[str, float]) -> Metrics:
    """One transmission's `Metrics` from its figures `v` (`METRIC_KEYS`): whole packets
    that add up — stranded and dropped rounded, delivered the rest (two halves rounded up
    would make a packet of nothing)."""
    offered = round(v["packets_offered"])
    stranded = min(max(round(v["packets_stranded"]), 0), offered)
    dropped = min(max(round(v["packets_dropped"]), 0), offered - stranded)
    counts = {"packets_offered": offered, "packets_stranded": stranded,
              "packets_dropped": dropped, "packets_delivered": offered - stranded - dropped}
    return Metrics(transmission=t.id, engine="fast", setting=setting, **counts,
                   **{k: v[k] for k in METRIC_KEYS if k not in counts},
                   window_packets=t.packets, extrapolated=False)
