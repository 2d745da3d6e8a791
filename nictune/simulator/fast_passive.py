"""The fast engine's passive_wait: timer ticks every T, a tick that finds the consumer idle
wakes it, the drain takes what the ring holds and what arrives meanwhile, and the next
tick comes ⌈(Ti + wait + drain)/T⌉ periods later.

`passive` picks a model per element: cbr cycles followed packet by packet
(`_passive_cbr`, `Cycles`), onoff bursts followed at their offsets against the ticks
(`_passive_onoff`) or burst by burst past λw = 1 or with a tick a burst at most
(`_passive_bursts`), the stationary distribution of a Markov chain on the ring content
for Poisson with few packets a tick (`_passive_chain`) or on bins of it past λw = 0.4
(`_passive_binned`), a renewal cycle for Poisson where ticks are fine against drains
whose ends fall at any phase of them (`_passive_renewal`), and an iterated fluid map
otherwise (`_passive_map`).
docs/engines.md has the derivations.
"""

from __future__ import annotations

import functools
import math

import llvmlite.binding
import numba
import numpy as np
from numba.extending import get_cython_function_address
from scipy.special import gammaln, ndtr

from nictune.simulator.compiled import compiled
from nictune.simulator.fast_base import (
    COUNTS_FOLLOWED,
    TINY,
    Ctx,
    Mode,
    random_wait,
)
from nictune.simulator.fast_cycles import Cycles

# (ring states, drain lengths) of the passive_wait chains, smallest first
CHAIN_SIZES = ((8, 24), (16, 48), (24, 80), (32, 120), (40, 160))
# `_passive_bursts`: the wake-ups within a burst after its first that it follows; the
# first HEAD bursts and the last TAIL are followed — more first ones where ticks are
# further apart, so that their second half holds TICKS ticks, for ticks up to
# TICKS_APART burst cycles apart
INNER, HEAD, TAIL, TICKS, TICKS_APART = 8, 112, 16, 16, 32
MOST = 2 * TICKS * TICKS_APART + TAIL  # (bursts followed at most: a whole transmission)
# `_renewal_fits`: the harmonics of the drains' phase checked, and how even they must be
RENEWAL_HARMONICS, RENEWAL_EVEN, RENEWAL_LOAD = 32, 0.02, 0.7


def _normal_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite nodes and weights (summing to 1) for the mean over a standard normal."""
    z, h = np.polynomial.hermite_e.hermegauss(n)
    return z, h / h.sum()


_HERMITE = _normal_nodes(7)


# scipy's Poisson survival function P(X > k) (`scipy.special.pdtrc`, the same C function),
# callable from compiled code by name: a named symbol, unlike a pointer, lets numba cache
# the code that calls it
llvmlite.binding.add_symbol("nictune_pdtrc", get_cython_function_address(
    "scipy.special.cython_special", "pdtrc"))
_pdtrc = numba.types.ExternalFunction("nictune_pdtrc", numba.types.float64(
    numba.types.float64, numba.types.float64, numba.types.int32))


@compiled
def excess(mu: float, k: float) -> float:
    """E[(X − k)+] for X ~ Poisson(mu): mu·P(X ≥ k) − k·P(X > k); exact within 12 σ of the
    mean, mu − k far below it, 0 far above it (NaN: 0)."""
    kf = np.floor(np.maximum(k, 0.0))
    spread = 12.0 * np.sqrt(mu) + 12.0
    if kf < mu - spread:
        return mu - kf
    if not np.abs(kf - mu) <= spread:
        return 0.0
    at_least = _pdtrc(np.maximum(kf - 1.0, 0.0), mu, 0) if kf > 0 else 1.0
    return np.maximum(mu * at_least - kf * _pdtrc(kf, mu, 0), 0.0)


@compiled
def _excess_each(mu: np.ndarray, k: np.ndarray) -> np.ndarray:
    out = np.empty(mu.size)
    for i in range(mu.size):
        out[i] = excess(mu[i], k[i])
    return out


def poisson_excess(mu: np.ndarray, k: np.ndarray) -> np.ndarray:
    """`excess` of each element of `mu` and `k` (arrays of one shape)."""
    mu, k = np.asarray(mu, float), np.asarray(k, float)
    return _excess_each(mu.ravel(), k.ravel()).reshape(mu.shape)


def _routes(cx: Ctx, period: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which model takes each element: evenly spaced arrivals follow the cycles packet by
    packet (`even`); Poisson ones take the exact chain of `size` (index into CHAIN_SIZES,
    −1: none fits) or, past λw = 0.4 with too many packets per tick for it, the binned
    chain (`binned`: the fluid map's noise feedback, slope λw/(1 − λw), is already 0.67
    there); the rest the fluid map."""
    lam, ws = cx.lam, cx.ws
    even = ~cx.poisson & ~cx.onoff & (lam * ws < 0.95)
    size = np.full(lam.shape, -1)
    po = np.flatnonzero(cx.poisson)
    size[po] = _chain_size(lam[po], ws[po], cx.ti[po], period[po], cx.ring[po])
    binned = cx.poisson & (size < 0) & (lam * ws > 0.4) & (lam * ws < 0.95)
    return even, size, binned


def _renewal_fits(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                  ring: np.ndarray) -> np.ndarray:
    """Where a Poisson consumer's drains end at a uniform phase of the tick grid, so that
    `_passive_renewal` holds: a drain of S packets ends Ti + S·w after its tick, and the
    busy period of one packet, taken as normal (sd σ₁ = √(ρ/(1 − ρ)³) packets), spreads
    over the lattice S·w mod T evenly — its h-th Fourier coefficient,
    e^(−2π²σ₁²·dist(h·w/T, ℤ)²), is below RENEWAL_EVEN·h for h ≤ RENEWAL_HARMONICS (w
    half a period, say, puts every drain's end on one of two phases). Besides: the ring
    never overflows (12 σ of the arrivals over a window). (`passive` asks only where there
    is no wait for others' work and λw > RENEWAL_LOAD: below 0.75 no w/T passes, on a
    grid of 300 000 of them from 0 to 3.)

    An approximation: the true one-packet busy period is Borel, P(S = 1) = e^(−ρ), and
    one drain's phase is far from even (its first coefficient 0.5 for the tests' λw =
    0.83, w/T = 0.87); what holds the renewal there is that successive cycles mix it. A
    review (twenty-fourth session) found 27 of 600 random accepted inputs more than 5 %
    off a simulation of the tick grid — w/T within a few % of 1 or ½ with a packet or so
    a tick, where the binned chain misses the DES by as much (6–14 %) — and, of 40 checked
    against the DES, 2 above 5 % (the binned chain 9)."""
    rho = lam * ws
    free = np.maximum(1.0 - rho, 1e-9)
    h = np.arange(1, RENEWAL_HARMONICS + 1, dtype=float)
    f = h[None, :] * (ws / period)[:, None]
    d = f - np.round(f)
    coeff = np.exp(-2.0 * np.pi**2 * (rho / free**3)[:, None] * d * d) / h[None, :]
    reach = lam * (np.maximum(1.0, np.ceil(ti / period - 1e-9)) * period + ti)
    return ((rho < 0.95) & (coeff.max(axis=1, initial=0.0) < RENEWAL_EVEN)
            & (reach + 12.0 * np.sqrt(reach) + 12.0 < ring))


def _passive_renewal(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                     _ring: np.ndarray, _poisson: np.ndarray, _delay: np.ndarray
                     ) -> tuple[np.ndarray, ...]:
    """`_passive_map`'s statistics for Poisson arrivals whose drains end at a uniform phase
    of the ticks (`_renewal_fits`): each drain's end is a renewal point. The next tick
    comes V ~ U(0, T] later; the wake-up finds what arrived in V + Ti, none with
    probability p₀ = e^(−λTi)(1 − e^(−λT))/(λT), after which each further tick, k = ⌈Ti/T⌉
    periods on, finds none with p₁ = e^(−λkT). The time S from a drain's end to the next
    drain's start has E S = T/2 + Ti + kT·p₀/(1 − p₁); the drain is the M/G/1 busy period
    of what arrived in S, so a cycle lasts E S/(1 − λw) and holds 1 + p₀/(1 − p₁)
    wake-ups (exact in expectation where the phase is uniform: 45 144 wake-ups against
    the DES's 45 145 over 300 000 packets of a 2 µs tick at λw = 0.83)."""
    rho = lam * ws
    k_idle = np.maximum(1.0, np.ceil(ti / period - 1e-9))
    lt = lam * period
    p0 = np.exp(-lam * ti) * -np.expm1(-lt) / np.maximum(lt, TINY)
    p1 = np.exp(-lam * k_idle * period)
    empties = p0 / (1.0 - p1)
    cycle = (period / 2.0 + ti + k_idle * period * empties) / (1.0 - rho)
    wakes = 1.0 + empties
    return cycle / wakes, lam * cycle / wakes, np.zeros(lam.shape), empties / wakes


def draws_waits(cx: Ctx, period: np.ndarray) -> np.ndarray:
    """The elements whose model draws a random wait before each drain itself (the Poisson
    chains, exact and binned; `passive`'s `wait_mean`, `wait_busy`)."""
    _, size, binned = _routes(cx, period)
    return binned | (size >= 0)


def passive(cx: Ctx, period: np.ndarray, delay: np.ndarray,
            wait_mean: np.ndarray | None = None, wait_busy: np.ndarray | None = None) -> Mode:
    """Timer ticks every T; a tick that finds the consumer idle wakes it (`_passive_map`).

    onoff arrivals: when a burst holds several cycles, the cycle is that of the burst rate
    and the gaps between bursts add idle ticks; bursts the consumer cannot keep up with,
    or that hold one tick at most, are followed burst by burst (`_passive_bursts`); a
    cycle otherwise longer than a burst treats the arrivals as smooth at the average rate,
    except that the ring overflows by the bursts a window holds (`_window_overflow`).

    Poisson arrivals whose drains end at any phase of the ticks, with no wait for others'
    work and no overflow, take the renewal cycle (`_renewal_fits`, `_passive_renewal`)
    instead of a chain or the map.

    `wait_mean`, `wait_busy`: a random wait before each drain on top of `delay`
    (`fast_shared.mix_waits`); the Poisson chains (exact and binned) draw it per drain in
    their transitions (`draws_waits` says where), the other models leave it to the
    caller.
    """
    lam, ti, ws, ring = cx.lam, cx.ti, cx.ws, cx.ring
    even, size, binned = _routes(cx, period)
    cycle, taken, dropped, p_empty = (np.zeros(lam.shape) for _ in range(4))
    # (the chains draw a random wait per drain: those elements apart from the rest)
    waits = None if wait_mean is None or wait_busy is None else (wait_mean, wait_busy)
    drawn = (binned | (size >= 0)) & (wait_busy > 0) if waits else np.zeros(lam.shape, bool)
    renew = np.zeros(lam.shape, bool)
    ask = np.flatnonzero(cx.poisson & (size < 0) & ~drawn & (lam * ws > RENEWAL_LOAD)
                         & (delay == 0.0))
    renew[ask] = _renewal_fits(lam[ask], ws[ask], ti[ask], period[ask], ring[ask])
    binned = binned & ~renew
    rest = ~even & (size < 0) & ~binned & ~renew
    parts = [(np.flatnonzero(even), _passive_cbr),
             (np.flatnonzero(renew), _passive_renewal),
             (np.flatnonzero(rest & ~cx.onoff), _passive_map),
             (np.flatnonzero(rest & cx.onoff), _passive_phases)]
    parts += [(sel[j:j + 256], _passive_binned)
              for sel in (np.flatnonzero(binned & drawn), np.flatnonzero(binned & ~drawn))
              for j in range(0, sel.size, 256)]
    for i, dims in enumerate(CHAIN_SIZES):
        # in chunks that keep the (elements, states, drains) arrays in cache
        step = max(1, 2**18 // (dims[0] * dims[1]))
        parts += [(sel[j:j + step], functools.partial(_passive_chain, dims=dims))
                  for sel in (np.flatnonzero((size == i) & drawn),
                              np.flatnonzero((size == i) & ~drawn))
                  for j in range(0, sel.size, step)]
    for sel, fn in parts:
        if sel.size:
            extra = {"n": cx.n[sel], "span": cx.span[sel]} if fn is _passive_cbr else {}
            if waits and drawn[sel[0]]:  # (a chain's part)
                extra = {"waits": (waits[0][sel], waits[1][sel])}
            part = fn(lam[sel], ws[sel], ti[sel], period[sel], ring[sel], cx.poisson[sel],
                      delay[sel], **extra)
            for arr, value in zip((cycle, taken, dropped, p_empty), part, strict=True):
                arr[sel] = value
    on, off = cx.c("on"), cx.c("off")
    smooth = np.zeros_like(cx.onoff)
    oo = np.flatnonzero(cx.onoff)
    if oo.size:
        avg = _passive_map(cx.c("rate")[oo], ws[oo], ti[oo], period[oo], ring[oo],
                           cx.poisson[oo], delay[oo])
        smooth[oo] = (avg[0] > on[oo] + off[oo]) & (lam[oo] * ws[oo] < 1.0)
        # the ring holds what arrives from a drain's end to the next tick: whole bursts and
        # parts of them, more or fewer by where the window falls, so it overflows by the
        # mean over that phase, more than at the mean rate
        window = avg[0] - avg[1] * ws[oo] - delay[oo]
        over = _window_overflow(lam[oo], cx.c("per_burst")[oo], cx.c("cycle")[oo], window,
                                ring[oo])
        avg = (avg[0], np.clip(avg[1] + avg[2] - over, 0.0, None), over, avg[3])
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
    end = resid + ti + last_n * ws  # (from the last arrival to the last delivery)
    # Poisson: the last arrival falls in a drain D/C of the time — which then ends once
    # the queue ahead, D·(1 − λw)/2 of work on average, is taken — and otherwise in the
    # idle rest of the cycle, (C − D)/2 before the next tick
    drain = np.minimum(taken * ws, cycle)
    idle = cycle - drain
    in_idle = idle / 2.0 + ti + np.clip(lam * (idle / 2.0 + ti), 1.0, ring) * ws
    end = np.where(cx.poisson & (cycle < busy_on), (idle * in_idle + drain * drain * np.clip(
        1.0 - lam * ws, 0.0, None) / 2.0) / np.maximum(cycle, TINY), end)
    # ... unless the span varies by much less than a period (√N/λ): then the last arrival
    # comes at a known time since the last tick (the ticks are on the period's grid), in
    # that tick's drain or after it, what came since waiting for the next tick
    since = cx.span - np.floor(cx.span / period) * period
    busy = drain + ti - since
    known = cx.poisson & (cycle < busy_on) & (np.sqrt(cx.n) / lam < period / 4.0)
    end = np.where(known, np.where(busy > 0.0, busy * np.clip(1.0 - lam * ws, 0.0, None) + ws,
                                   period - since + ti + np.clip(-lam * busy, 1.0, ring) * ws),
                   end)
    delivered = cx.n * np.clip(1.0 - dropped / np.maximum(taken + dropped, TINY), 0.0, 1.0)
    interrupts = np.maximum(1.0, ticks + gap_ticks)
    empty = np.clip(ticks - 1.0, 0.0, None) * p_empty + gap_ticks
    # bursts of evenly spaced arrivals the consumer keeps up with: cycle by cycle
    ev = np.flatnonzero(bursty & (lam * ws < 0.95) & (on > 8.0 * period))
    if ev.size:
        interrupts[ev], empty[ev], lost = _passive_onoff(
            lam[ev], ws[ev], ti[ev], period[ev], ring[ev], delay[ev], cx.n[ev],
            cx.c("per_burst")[ev], bursts[ev], cx.c("cycle")[ev])
        delivered[ev] = cx.n[ev] - np.minimum(lost, cx.n[ev])
    # bursts the consumer cannot keep up with, or that hold INNER + 1 ticks at most: burst
    # by burst on the tick grid — all of them (up to MOST bursts), or where ticks come at
    # least every TICKS_APART burst cycles (the bursts followed hold enough ticks to
    # extrapolate the others); a passive_wait consumer never wakes more often than its
    # ticks (`fast._evaluate` holds every model to that)
    whole = on + 1.0 / lam  # (a burst's packets over λ; `on` ends at its last arrival)
    cyc = cx.c("cycle")
    follow = np.flatnonzero(cx.onoff & ((lam * ws >= 1.0) | (INNER * k_idle * period >= whole))
                            & ((bursts <= MOST) | (k_idle * period <= TICKS_APART * cyc)))
    if follow.size:
        wakes, gaps, lost, ends, mean, p99 = _passive_bursts(
            lam[follow], ws[follow], ti[follow], period[follow], ring[follow], on[follow],
            np.maximum(last_on[follow], 0.0), cyc[follow], bursts[follow], k_idle[follow])
        interrupts[follow] = wakes + gaps
        empty[follow] = gaps
        delivered[follow] = cx.n[follow] - np.minimum(lost, cx.n[follow])
    lat = _latency(cycle, taken, ws, ti, period, lam, on, ring, bursty)
    duration = cx.span + end
    if follow.size:
        duration[follow], lat[0][follow], lat[1][follow] = ends, mean, p99
    zero = np.zeros_like(delivered)
    followed = zero.copy()
    followed[follow] = COUNTS_FOLLOWED
    return Mode(interrupts=interrupts, empty=empty, delivered=delivered, stranded=zero,
                 followed=followed, duration=duration,
                 lat_mean=lat[0], lat_p99=lat[1])


def _latency(cycle: np.ndarray, taken: np.ndarray, ws: np.ndarray, ti: np.ndarray,
             period: np.ndarray, lam: np.ndarray, on: np.ndarray, ring: np.ndarray,
             bursty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 99th percentile latency. A cycle of C s whose drain takes D = taken·ws:
    the packets arrive evenly over it and each drain ends as the last one arrives, so the
    first packet after a drain waits ws + C − D and the last ws, evenly between (not
    C/2 + Ti on average: those that come during the interrupt and the drain are taken by
    it). onoff bursts the consumer cannot keep up with: the backlog grows through the
    burst, (λ·ws − 1)·t packets at time t, up to the ring; bursts it keeps up with start
    on a sleeping consumer: the packets of the first period/2 + Ti wait that long, and the
    backlog takes t_c = λ·(T/2 + Ti)·ws / (1 − λ·ws) to catch up, the wait falling
    linearly meanwhile."""
    idle = np.clip(cycle - taken * ws, 0.0, None)
    behind = np.minimum(np.clip(lam * ws - 1.0, 0.0, None) * on, ring * ws)
    first = period / 2.0 + ti
    catch = np.minimum(lam * first, ring) * ws / np.clip(1.0 - lam * ws, 1e-9, None)
    start = first * np.where(catch <= on, catch / (2.0 * np.maximum(on, TINY)),
                             1.0 - on / (2.0 * np.maximum(catch, TINY)))
    over = bursty & (lam * ws >= 1.0)
    mean = np.where(over, ti + ws + behind / 2.0, ws + idle / 2.0 + bursty * start)
    p99 = np.where(over, ti + ws + 0.99 * behind, ws + 0.99 * idle)
    p99 = np.where(bursty & ~over & (catch >= 0.01 * on), np.maximum(p99, ws + period + ti),
                   p99)
    return mean, p99


def _passive_bursts(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                    ring: np.ndarray, on: np.ndarray, last_on: np.ndarray, cycle: np.ndarray,
                    bursts: np.ndarray, k_idle: np.ndarray) -> tuple[np.ndarray, ...]:
    """(wake-ups that find packets, empty wake-ups, packets dropped, end of the last drain
    from the first arrival, mean and 99th-percentile latency) of onoff arrivals followed
    burst by burst on the tick grid (ticks at j·T from the first arrival; a tick within Ti
    before a burst starts finds its first packets when its handler ends): bursts that
    outrun the consumer (λw ≥ 1), or that hold a few ticks at most (`passive` says which).
    A burst is its first packet at its start and the rest evenly to its last (`on` s).

    Awake when a burst starts (a drain left over: `carry` s of it), the consumer drains all
    through the burst; asleep, it wakes at the burst's first tick, φ in, with what the
    ring kept (the rest is dropped). Draining, its ring fills at λ − 1/w: up to R, the
    excess dropped (λw ≥ 1), or it catches up and sleeps, what arrives meanwhile waiting in
    the ring for the next tick, within the burst (up to INNER more times) or after it
    (λw < 1). A burst that ends before its first tick leaves
    the ring for that tick too. A ring left for a tick is drained at it — in the gap or,
    when no tick comes before the next burst, ahead of that burst's packets. A drain that
    outlasts the gap runs into the next burst; otherwise the consumer sleeps and the ticks
    left in the gap are empty wake-ups (every k ticks when Ti spans k). The last burst
    holds what is left of the packets.

    Latency: a burst's accepted packets wait in stretches, each a linear function of the
    arrival time (so evenly spread between its ends): the first packet; those arriving
    while the consumer sleeps (until the drain reaches them); each drain (the ring filling
    or emptying behind it) and each sleep after one (until the next tick); the ring full
    ((R + 1)·w).

    φ moves by the burst period modulo T from burst to burst. The first HEAD bursts (more
    where ticks are further apart: their second half holds TICKS ticks) and the last TAIL
    are followed, the ones between extrapolated from the second half of the first; the
    last start from the grid's tick and the state the first ones left (a sleeping
    consumer whose ticks are further apart than bursts: with what arrived since the tick
    before). Compiled, element by element (`_bursts_one`).
    """
    out = np.zeros((6, lam.size))
    _bursts_each(*(np.asarray(a, float) for a in (lam, ws, ti, period, ring, on, last_on,
                                                  cycle, bursts, k_idle)), out)
    return tuple(out)


@compiled
def _bursts_each(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                 ring: np.ndarray, on: np.ndarray, last_on: np.ndarray, cycle: np.ndarray,
                 bursts: np.ndarray, k_idle: np.ndarray, out: np.ndarray) -> None:
    """`_passive_bursts` element by element into `out` (its six results by rows)."""
    # room for the stretches of waits of the most bursts followed (packets, shortest and
    # longest wait): per burst the first packet, those asleep, each drain and the sleep
    # after it, the ring full or the rest of the burst asleep
    pieces = np.zeros((3, (4 + 2 * INNER) * (2 * TICKS * TICKS_APART + TAIL)))
    for i in range(lam.size):
        out[:, i] = _bursts_one(lam[i], ws[i], ti[i], period[i], ring[i], on[i], last_on[i],
                                cycle[i], bursts[i], k_idle[i], pieces)


@compiled
def _bursts_one(lam: float, ws: float, ti: float, period: float, ring: float, on: float,
                last_on: float, cycle: float, bursts: float, k_idle: float,
                pieces: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """`_passive_bursts` of one element (`pieces`: room for its stretches of waits)."""
    carry = 0.0  # drain left when a burst starts (0: asleep)
    held = 0.0  # packets in the ring of a sleeping consumer at a burst's start
    phi = period  # the first tick is one period after the first arrival
    end = wakes = empty = dropped = 0.0
    # (the first bursts' second half holds TICKS ticks or more)
    head = max(HEAD, int(min(math.ceil(2.0 * TICKS * k_idle * period / cycle),
                             2.0 * TICKS * TICKS_APART)))
    jumps = bursts > head + TAIL
    middle = bursts - head - TAIL if jumps else 0.0
    rest = middle / (head - head // 2)  # (the weight of each extrapolated burst)
    steps = int(min(bursts, head + TAIL))
    count, lo, hi = pieces[0], pieces[1], pieces[2]
    n_p = 0  # stretches so far
    g = lam - 1.0 / ws  # how fast the ring fills (< 0: empties) behind a drain
    fills = g >= 0.0
    for m in range(steps):
        idx = m + middle if jumps and m >= head else float(m)
        start = idx * cycle
        if jumps and m == head:
            # past the extrapolated bursts, a sleeping consumer waits for the grid's next
            # tick, and where ticks are further apart than bursts, with what arrived since
            # the one before
            tick = math.ceil((start - ti) / period - 1e-9) * period - start
            if carry <= 0.0 and k_idle * period > cycle:
                since = min(tick - period + ti, 0.0)
                back = (_arrived(start, lam * on + 1.0, lam, cycle)
                        - _arrived(start + since, lam * on + 1.0, lam, cycle))
                held = max(min(back, ring), 0.0)
            phi = tick
        final = idx + 1.0 >= bursts
        on_m = last_on if final else on
        awake = carry > 0.0
        woken = not awake and phi + ti < on_m  # its first tick comes within the burst
        after = not awake and not woken  # ... after the burst has ended
        s0 = 0.0 if awake else phi + ti  # the drain starts
        weight = 1.0 + rest if head // 2 <= m < head else 1.0
        # the burst's first packet comes at its start, the rest evenly over on_m
        ahead = carry / ws if awake else held
        first = min(max(ring - ahead, 0.0), 1.0)
        at = (ahead + 1.0) * ws + (0.0 if awake else s0)
        n_p = _put(count, lo, hi, n_p, first * weight, at, at)
        if awake:
            carry += first * ws
        else:
            held += first
        # asleep until s0: the ring keeps what it has room for
        t_a = 0.0 if awake else min(s0, on_m)
        kept_a = max(min(lam * t_a, ring - held), 0.0)
        q0 = carry / ws if awake else held + kept_a
        # (the rest's places in the queue leave the first out: the fluid counts half a
        # packet more than have come at any moment, the one in service half done)
        n_p = _put(count, lo, hi, n_p, kept_a * weight, s0 + (ahead + 1.0) * ws,
                   s0 - kept_a / lam + (ahead + kept_a) * ws)
        lost = 1.0 - first + lam * t_a - kept_a
        # draining from s with q packets until the ring is full (λw ≥ 1: the excess is
        # dropped) or empty (λw < 1: asleep until the next tick, which may come within
        # the burst, up to INNER times), or the burst ends
        s, q, q_end, e, extra, caught = s0, q0, 0.0, s0, 0, False
        t1, shift = phi, first
        if fills and not after:
            d = max(min(on_m - s, (ring - q) / max(g, 1e-12)), 0.0)
            q_end = q + g * d
            n_p = _put(count, lo, hi, n_p, lam * d * weight, (q + 1.0 - shift) * ws,
                       (q_end + 1.0 - shift) * ws)
            lost += g * (on_m - s - d)
            n_p = _put(count, lo, hi, n_p, (on_m - s - d) / ws * weight,
                       (ring + 1.0) * ws, (ring + 1.0) * ws)
        while not fills and not after:
            limit = q / max(-g, 1e-12)  # until it catches up
            if limit >= on_m - s:  # still draining when the burst ends
                q_end = q + g * (on_m - s)
                n_p = _put(count, lo, hi, n_p, lam * (on_m - s) * weight,
                           (q + 1.0 - shift) * ws, (q_end + 1.0 - shift) * ws)
                break
            n_p = _put(count, lo, hi, n_p, lam * limit * weight, (q + 1.0 - shift) * ws, ws)
            e = s + limit
            t1 = math.ceil((start + e) / period - 1e-9) * period - start
            if t1 + ti >= on_m or extra == INNER:
                caught = True
                break
            # a tick within the burst: what arrived since e waits for its drain
            s = t1 + ti
            q = min(lam * (s - e), ring)
            lost += lam * (s - e) - q
            n_p = _put(count, lo, hi, n_p, q * weight, s - e + ws,
                       s - e - q / lam + q * ws)
            extra, shift = extra + 1, 0.0
        # a ring left for a tick: the burst ended before its first tick, or it caught up
        # (the rest of the burst waits in the ring)
        left = after or caught
        kept_d = min(lam * (on_m - e), ring) if caught else 0.0
        if caught:
            lost += lam * (on_m - e) - kept_d
        ring_left = q0 if after else kept_d
        phi_n = phi if after else t1
        missed = left and not final and phi_n + ti >= cycle  # no tick before the next burst
        drains = left and not missed and ring_left > 0.0
        s1 = phi_n + ti
        if caught:
            n_p = _put(count, lo, hi, n_p, kept_d * weight, s1 - e + ws,
                       s1 - e - kept_d / lam + kept_d * ws)
        # the last drain of the burst ends (a ring left for a tick: at that tick's)
        done = (s1 + ring_left * ws if drains else e) if left else on_m + q_end * ws
        merge = not missed and not final and done >= cycle
        carry = done - cycle if merge else 0.0
        held = ring_left if missed else 0.0
        # asleep after the drain: ticks from the first one at its end up to the next
        # burst's first (a tick within Ti before the burst counts for the burst)
        t2 = math.ceil((start + done) / period - 1e-9) * period
        gaps = 0.0
        if not (merge or missed or final):
            gaps = max(math.ceil((start + cycle - ti - t2) / (k_idle * period) - 1e-9), 0.0)
        if missed:
            phi = phi_n - cycle
        elif not merge:
            phi = t2 + gaps * k_idle * period - start - cycle
        end = start + done
        wakes += ((1.0 if woken else 0.0) + (1.0 if drains else 0.0) + extra) * weight
        empty += gaps * weight
        dropped += lost * weight
    total = mean = 0.0
    for j in range(n_p):
        total += count[j]
        mean += count[j] * (lo[j] + hi[j]) / 2.0
    mean /= max(total, 1e-12)
    return (wakes, empty, dropped, end, mean,
            _mixture_quantile(count[:n_p], lo[:n_p], hi[:n_p], 0.99))


@compiled
def _put(count: np.ndarray, lo: np.ndarray, hi: np.ndarray, j: int, c: float, a: float,
         b: float) -> int:
    """A stretch of `_bursts_one` at j: c packets whose waits spread evenly between a
    and b (none where c ≤ 0); returns where the next one goes."""
    if c <= 0.0:
        return j
    count[j], lo[j], hi[j] = c, min(a, b), max(a, b)
    return j + 1


@compiled
def _arrived(t: float, per_burst: float, lam: float, cycle: float) -> float:
    """Packets of onoff arrivals (bursts of `per_burst` at λ every `cycle` s, the first
    packet at 0) by time t."""
    return math.floor(t / cycle) * per_burst + min(
        lam * (t - math.floor(t / cycle) * cycle) + 1.0, per_burst)


@compiled
def _mixture_quantile(count: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: float,
                      rounds: int = 20) -> float:
    """The p-quantile of a mixture of uniform distributions on [lo, hi] (lo ≤ hi; a point
    where lo = hi) weighted by `count` (> 0): bisection to 2⁻²⁰ of their range, then
    linear between the two ends (the mixture's distribution is piecewise linear)."""
    if not count.size:
        return 0.0
    target = p * count.sum()
    a, b = lo.min(), hi.max()
    fa, fb = 0.0, count.sum()
    slope = 1.0 / np.maximum(hi - lo, 1e-12)
    for _ in range(rounds):
        x = (a + b) / 2.0
        below = 0.0
        for j in range(count.size):
            below += count[j] * min(max((x - lo[j]) * slope[j], 0.0), 1.0)
        if below < target:
            a, fa = x, below
        else:
            b, fb = x, below
    return a + (b - a) * min(max((target - fa) / max(fb - fa, 1e-300), 0.0), 1.0)


def _window_overflow(lam: np.ndarray, per_burst: np.ndarray, cycle: np.ndarray,
                     window: np.ndarray, ring: np.ndarray, phases: int = 32) -> np.ndarray:
    """Packets a ring of `ring` slots loses per window of onoff arrivals (bursts of
    `per_burst` packets at rate λ every `cycle` s): the mean over where the window starts
    in the burst cycle (`phases` points) of what arrives in it beyond the ring."""
    u = (np.arange(phases) + 0.5)[None, :] / phases * cycle[:, None]
    burst = (per_burst / lam)[:, None]

    def arrived(t: np.ndarray) -> np.ndarray:  # packets from the cycle's start to t
        # (the remainder from the same floor: `np.mod` could disagree with it by a cycle
        # within an ulp of a burst's start)
        whole = np.floor(t / cycle[:, None])
        return (whole * per_burst[:, None]
                + lam[:, None] * np.minimum(t - whole * cycle[:, None], burst))

    held = arrived(u + np.clip(window, 0.0, None)[:, None]) - arrived(u)
    return np.clip(held - ring[:, None], 0.0, None).mean(axis=1)


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
    return tuple(_map(lam, ws, ti, period, ring, poisson, delay, phase))


@compiled
def _map(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
         ring: np.ndarray, poisson: np.ndarray, delay: np.ndarray, phase: float
         ) -> np.ndarray:
    """`_passive_map`, element by element: its four statistics (4, e)."""
    e = lam.size
    out = np.zeros((4, e))
    steps, keep = 24, 12
    for i in range(e):
        free = np.maximum(1.0 - lam[i] * ws[i], 1e-6)
        q = np.minimum(ring[i], 1.0 + lam[i] * (phase * period[i] + ti[i]))  # the first tick
        a = ws[i] / free / period[i]  # periods of drain per packet in the ring
        k_idle = np.maximum(1.0, np.ceil(ti[i] / period[i] - 1e-9))
        slope = np.minimum(np.maximum(lam[i] * ws[i] / free, 0.0), 0.95)
        amplify = 1.0 / (1.0 - slope * slope)
        reach = lam[i] * (period[i] + ti[i])
        near = np.abs(ring[i] - reach) < 12.0 * np.sqrt(reach) + 12.0  # may overflow
        for step in range(steps):
            d = (q * ws[i] + delay[i] * (1.0 - np.exp(-q))) / free
            k = np.maximum(1.0, np.ceil((ti[i] + d) / period[i] - 1e-9))
            if poisson[i]:
                # an empty ring gives ⌈Ti/T⌉; otherwise E⌈(Ti + q·w/(1 − λw))/T⌉ over q > 0
                p0 = np.exp(-q)
                mean = q / np.maximum(1.0 - p0, 1e-12)
                var = np.maximum((q + q * q) / np.maximum(1.0 - p0, 1e-12) - mean * mean, 0.0)
                # the drain feeds the next window back with slope λw/(1 − λw): variance grows
                var = var * amplify
                wait = delay[i] / free / period[i]  # (others' work first)
                k_pos = np.maximum(1.0, _mean_ceil(ti[i] / period[i] + mean * a + wait,
                                                   np.sqrt(var) * a))
                k = p0 * k_idle + (1.0 - p0) * k_pos
            x = np.maximum(lam[i] * (k * period[i] - d), 0.0)
            q_new = np.minimum(x, ring[i])
            if near and poisson[i]:  # the Poisson tail matters
                q_new = x - excess(x, ring[i])
            if step >= steps - keep:
                out[0, i] += k * period[i]
                out[1, i] += q + lam[i] * d
                out[2, i] += x - q_new
                out[3, i] += np.exp(-x) if poisson[i] else np.minimum(np.maximum(1.0 - x, 0.0),
                                                                      1.0)
            q = q_new
    return out / keep


def _passive_chain(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                   ring: np.ndarray, _poisson: np.ndarray, delay: np.ndarray,
                   dims: tuple[int, int] = CHAIN_SIZES[-1],
                   waits: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, ...]:
    """`_passive_map`'s statistics for Poisson arrivals with a few packets per tick, exact.

    The ring content q when a drain starts is a Markov chain: the drain takes S packets, an
    M/D/1 busy period started by q (Borel–Tanner: P(S = n) = q/n · e^(−ρn) (ρn)^(n−q) /
    (n − q)!, ρ = λw); it ends Ti + S·w (+ the wait for the others' work) after its tick, the
    next tick is k = ⌈(Ti + drain)/T⌉ periods later, and the next q is Poisson over the
    window from the drain's end to that tick + Ti (at most T + Ti long), capped by the ring.
    Its stationary distribution (a linear solve over `dims` = (ring states, drain lengths),
    `_chain_size`) gives the mean cycle, packets per wake-up, drops and the share of empty
    wake-ups. `waits` (mean, probability): a random wait added to each drain
    (`fast_shared.mix_waits`), drawn per drain: the next q is the mixture over its nodes.
    """
    e = lam.size
    n_q, n_s = dims
    rho = np.clip(lam * ws, 1e-6, 0.95)
    ss = np.arange(n_s, dtype=float)
    # P(S = n | q) = table[q, n] · ρ^(−q) · (ρ e^(−ρ))^n: row q normalised, ρ^(−q) cancels
    table, table_t = _borel_tanner_table(n_q, n_s)
    v = np.exp(ss[None, :] * (np.log(rho) - rho)[:, None])  # (e, S)
    norm = np.matmul(v, table_t)  # (e, Q): Σ_n table[q, n] v[n]
    cap = np.minimum(ring, n_q - 1).astype(np.int64)
    small = np.flatnonzero(cap < n_q - 1)  # else the ring is beyond the Poisson tail
    # the next q (and the cycle, the drops) mixed over the wait's nodes (K, e): each drain
    # draws its own
    pw, extra = _wait_nodes(e, waits)
    add = (delay + extra) / (1.0 - rho)  # (K, e)
    drain = (ss > 0) * add[:, :, None] + ss * ws[:, None]  # (K, e, S)
    k = np.maximum(1.0, np.ceil((ti[:, None] + drain) / period[:, None] - 1e-9))
    mu = lam[:, None] * (k * period[:, None] - drain)  # the mean of the next q
    pm = _next_ring(v, mu, pw, cap, n_q)
    k_mean = (pw[:, :, None] * k).sum(axis=0)
    excess = np.zeros((small.size, n_s))
    if small.size:
        over = poisson_excess(mu[:, small], np.broadcast_to(ring[small, None],
                                                            mu[:, small].shape))
        excess = (pw[:, small, None] * over).sum(axis=0)
    # the transition matrix transposed, M[q, x] = Σ_n P(S = n | q) · P(next = x | S = n)
    lhs = np.matmul(pm, table_t)
    lhs /= norm[:, None, :]
    pi = _stationary(lhs)
    sig = np.matmul(pi / norm, table) * v  # distribution of S
    dropped = np.zeros(e)
    dropped[small] = (sig[small] * excess).sum(axis=1)
    return (sig * k_mean).sum(axis=1) * period, (sig * ss).sum(axis=1), dropped, pi[:, 0]


@compiled
def _next_ring(v: np.ndarray, mu: np.ndarray, weight: np.ndarray, cap: np.ndarray,
               n_q: int) -> np.ndarray:
    """`_passive_chain`'s v[n] · P(next q = x | S = n) on its `n_q` states, mixed over the
    wait's nodes: (e, Q, S). The next q is Poisson(mu) (mu (K, e, S) at each of the K nodes,
    `weight` (K, e)), capped: the ring holds at most `cap` (e,) < n_q, the tail lumped
    there. Built by v e^(−μ) Π μ/i along q."""
    n_k, e, n_s = mu.shape
    out = np.zeros((e, n_q, n_s))
    p, held = np.empty(n_s), np.empty(n_s)
    for i in range(e):
        for j in range(n_k):
            w = weight[j, i]
            for s in range(n_s):
                p[s] = v[i, s] * math.exp(-mu[j, i, s])
                held[s] = 0.0
            for q in range(cap[i]):
                for s in range(n_s):
                    out[i, q, s] += w * p[s]
                    held[s] += p[s]
                    p[s] *= mu[j, i, s] / (q + 1.0)
            for s in range(n_s):
                out[i, cap[i], s] += w * (v[i, s] - held[s])
    return out


def _wait_nodes(e: int, waits: tuple[np.ndarray, np.ndarray] | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(weights, waits) (K, e) of the wait a chain adds to `delay` before each drain: none
    (K = 1), or `random_wait` of `waits` (mean, probability)."""
    if waits is None:
        return np.ones((1, e)), np.zeros((1, e))
    return random_wait(*waits)


def _passive_binned(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                    ring: np.ndarray, _poisson: np.ndarray, delay: np.ndarray,
                    bins: int = 48, windows: int = 48,
                    waits: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, ...]:
    """`_passive_chain` for Poisson arrivals with many packets per tick and λw > 0.4, where
    `_passive_map`'s fixed point is unstable (past ½) or nearly so: the chain of the ring
    content q when a drain starts, on `bins` bins (bin 0: an empty ring; then bins of Δ
    packets up to the Poisson tail of λ(T + Ti), beyond which no window reaches; the last:
    a full ring or beyond).

    From q (the bin's middle) the drain takes S = q + Y packets, Y lognormal with the
    M/D/1 busy period's mean qρ/(1 − ρ) and variance qρ/(1 − ρ)³ (Gauss–Hermite nodes
    scaled to that mean); the next tick
    is k = ⌈(Ti + drain)/T⌉ periods later, so the next window x = kT − drain lies in
    [Ti, T + Ti): a grid of `windows` points, each node's x split between its two
    neighbours, or, for a drain spread over an eighth of a period or more, the wrapped
    normal integrated over each point's cell (`_wrapped_mass`). From a grid point the
    next q is Poisson(λx): P(0) exactly, the last bin from the normal's CDF, the bins
    between from its density. The transition is the product of the two (bins → windows →
    bins); its stationary distribution gives the mean cycle, packets per wake-up, drops
    and the share of empty wake-ups. `waits` (mean, probability): a random wait added to
    each drain, none or exponential (`fast_shared.mix_waits`), drawn per drain: its
    Gauss–Laguerre nodes multiply the drain's.
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
    # S = q + Y, Y lognormal with the busy period's mean and variance, its nodes scaled
    # to keep the mean (the normal clipped at q that was here made short drains longer:
    # 1.55× the mean for q = 1 at ρ = 0.83, 1.12× for q = 5)
    mean_y = q * (rho / free)[:, None]
    sig2 = np.log1p(sd * sd / np.maximum(mean_y * mean_y, 1e-300))
    y = np.exp(np.log(np.maximum(mean_y, 1e-300)) - sig2 / 2.0)[:, :, None] * np.exp(
        np.sqrt(sig2)[:, :, None] * z)
    y *= (mean_y / np.maximum((y * h).sum(axis=2), 1e-300))[:, :, None]
    s = q[:, :, None] + y
    # the waits before a drain (e, K) and their weights: the mean alone, or none and the
    # exponential's nodes (`_bins_to_windows` takes each drain node after each wait node)
    pw, extra = (np.ascontiguousarray(a.T) for a in _wait_nodes(e, waits))
    add = delay[:, None] + extra
    wait = (add / free[:, None])[:, None, :] * (1.0 - np.exp(-q))[:, :, None]  # (e, B, K)
    # a drain spread over an eighth of a period or more: its few nodes would alias against
    # the tick grid (`_wrapped_mass`)
    spread = sd * ws[:, None] / period[:, None]
    to_window, cycles = _bins_to_windows(s, h, ws, wait, pw, ti, period, spread, spread >= 0.13,
                                         windows)
    # (a wake-up comes a whole tick after the last at least; the wrapped normal of a drain
    # far longer than a small ring's content could lose that: 0.76 T with ring 2)
    cycles = np.maximum(cycles, period[:, None])
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
    excess = poisson_excess(mu.ravel(), np.repeat(ring, windows)).reshape(mu.shape)
    return ((pi * cycles).sum(axis=1), (pi * (s * h).sum(axis=2)).sum(axis=1),
            (seen * excess).sum(axis=1), (seen * p0).sum(axis=1))


@compiled
def _bins_to_windows(s: np.ndarray, h: np.ndarray, ws: np.ndarray, wait: np.ndarray,
                     pw: np.ndarray, ti: np.ndarray, period: np.ndarray, spread: np.ndarray,
                     wide: np.ndarray, windows: int) -> tuple[np.ndarray, np.ndarray]:
    """`_passive_binned`'s step from bins to windows: for each element and bin, the
    distribution of the next window on the grid of `windows` points over [0, T + Ti), and
    the mean cycle (e, B, X), (e, B).

    The drain's nodes (`s` (e, B, J) packets, weights `h`) after each wait node (`wait`
    (e, B, K), weights `pw` (e, K)) give k = ⌈(Ti + drain)/T⌉ and the window kT − drain,
    split linearly between its two grid points. A `wide` drain (its sd `spread` periods)
    instead takes the wrapped normal's mass on each point's cell (`_wrapped_mass`), and the
    mean cycle from its mean window (k·T = window + drain)."""
    e, bins, n_j = s.shape
    n_k = wait.shape[2]
    to_window = np.zeros((e, bins, windows))
    cycles = np.zeros((e, bins))
    mass = np.zeros(windows)
    for i in range(e):
        reach = period[i] + ti[i]
        cells = _cells(ti[i], period[i], windows if np.any(wide[i]) else 0)
        for b in range(bins):
            if wide[i, b]:
                mean = 0.0
                for j in range(n_j):
                    mean += s[i, b, j] * h[j]
                mean *= ws[i]
                for k in range(n_k):
                    window = _wrapped_mass(mean + wait[i, b, k] + ti[i], spread[i, b],
                                           period[i], reach, cells, mass,
                                           ws[i] / period[i], mean / ws[i])
                    for x in range(windows):
                        to_window[i, b, x] += pw[i, k] * mass[x]
                    cycles[i, b] += pw[i, k] * (window + (mean + wait[i, b, k]))
                continue
            cycle = 0.0
            for j in range(n_j):
                for k in range(n_k):
                    weight = h[j] * pw[i, k]
                    drain = s[i, b, j] * ws[i] + wait[i, b, k]
                    ticks = max(1.0, np.ceil((ti[i] + drain) / period[i] - 1e-9))
                    u = min(max((ticks * period[i] - drain) / reach, 0.0), 1.0) * (windows - 1)
                    lo = min(max(math.floor(u), 0), windows - 2)  # (NaN: cell 0, a NaN weight)
                    frac = u - lo
                    to_window[i, b, int(lo)] += weight * (1.0 - frac)
                    to_window[i, b, int(lo) + 1] += weight * frac
                    cycle += ticks * weight
            cycles[i, b] = cycle * period[i]
    return to_window, cycles


@compiled
def _cells(ti: float, period: float, windows: int, terms: int = 8
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells of `_bins_to_windows`' grid points in u = window − Ti ∈ [0, T): their
    widths in periods (X,), and the differences of cos and sin of 2πm·u/T across each
    (terms, X), for `_wrapped_mass` (none for `windows` 0)."""
    reach = period + ti
    half = reach / (2.0 * (windows - 1))
    width = np.zeros(windows)
    d_cos, d_sin = np.zeros((terms, windows)), np.zeros((terms, windows))
    for x in range(windows):
        point = reach * x / (windows - 1)
        lo = min(max(point - half - ti, 0.0), period)
        hi = min(max(point + half - ti, 0.0), period)
        width[x] = (hi - lo) / period
        for m in range(terms):
            a, b = 2.0 * np.pi * (m + 1) * lo / period, 2.0 * np.pi * (m + 1) * hi / period
            d_cos[m, x] = math.cos(b) - math.cos(a)
            d_sin[m, x] = math.sin(b) - math.sin(a)
    return width, d_cos, d_sin


@compiled
def _wrapped_mass(lag: float, spread: float, period: float, reach: float,
                  cells: tuple[np.ndarray, np.ndarray, np.ndarray], mass: np.ndarray,
                  lattice: float, packets: float) -> float:
    """The distribution of the window from a drain's end to the next tick + Ti over the
    grid's cells (`_cells`), into `mass`, and its mean, for a drain normal with mean
    `lag` − Ti and sd `spread`·T.

    The window is Ti + ((−lag) mod T): a wrapped normal, whose Fourier series (8 terms:
    past the 4th below 3e-4 for a spread of 0.13 periods or more) is integrated exactly
    over each cell. Point samples of the drain (the Gauss–Hermite nodes) alias against the
    tick grid once the drain's spread nears a period. A drain is whole packets, S·w
    (`lattice` = w/T, `packets` = E S): its phase keeps the lattice's structure however
    wide S spreads (w = T/2 puts every end on one of two phases), so each coefficient
    adds the normal's aliases at m·w/T − k, k ≠ 0 (Poisson summation); higher terms
    matter there (the 2-phase case of the tests: 16 % too many wake-ups with none of
    them, 5.8 % with 4 terms, 2.9 % with 8).
    """
    width, d_cos, d_sin = cells
    windows = width.size
    mass[:] = width
    # u ≡ −lag (mod T): ∫ cell of (2ρ_m/T)·cos(2πm(u + lag)/T), ρ_m = exp(−2π²m²σ²) = ρ_1^m²;
    # cos and sin of mθ (θ = 2π·lag/T) by the angle-addition recurrence
    phase = 2.0 * np.pi * lag / period
    cos_1, sin_1 = math.cos(phase), math.sin(phase)
    rho_1 = math.exp(-2.0 * np.pi ** 2 * spread * spread)
    cos_m, sin_m, rho_m, step = cos_1, sin_1, rho_1, rho_1 ** 3  # (ρ_(m+1) = ρ_m·ρ_1^(2m+1))
    sd_packets = spread / max(lattice, 1e-300)
    for m in range(d_cos.shape[0]):
        # a drain of whole packets, S·w: the lattice's other aliases k ≠ 0 of the normal's
        # characteristic function at m·w/T (Poisson summation)
        f = (m + 1.0) * lattice
        re, im = rho_m, 0.0
        for k in range(math.floor(f) - 1, math.ceil(f) + 2):
            power = 2.0 * np.pi ** 2 * sd_packets * sd_packets * (f - k) ** 2
            if k != 0 and power < 40.0:  # (beyond: below 4e-18)
                g = math.exp(-power)
                re += g * math.cos(2.0 * np.pi * k * packets)
                im -= g * math.sin(2.0 * np.pi * k * packets)
        damp = 1.0 / (np.pi * (m + 1.0))
        c = damp * (cos_m * re - sin_m * im)
        s = damp * (sin_m * re + cos_m * im)
        for x in range(windows):
            mass[x] += c * d_sin[m, x] + s * d_cos[m, x]
        cos_m, sin_m = cos_m * cos_1 - sin_m * sin_1, sin_m * cos_1 + cos_m * sin_1
        rho_m, step = rho_m * step, step * rho_1 * rho_1
    total, mean = 0.0, 0.0
    for x in range(windows):
        mass[x] = max(mass[x], 0.0)
        total += mass[x]
        mean += mass[x] * x
    scale = 1.0 / max(total, 1e-300)
    for x in range(windows):
        mass[x] *= scale
    return mean * scale * reach / (windows - 1)


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
    c = Cycles(lam, ws, ti, period, ring, delay, n)
    c.follow(cycles, skip)
    per_wake = (c.late[2] + c.late[3]) / np.maximum(c.late[0], 1.0)
    # the ones that ended (and overran their end) or look to end within `reach`: again
    # from the start, each counting only its own wake-ups, up to `horizon`
    redo = np.flatnonzero((c.handled >= n) | (
        cycles + (n - c.handled) / np.maximum(per_wake, TINY) <= reach))
    if redo.size:
        sub = Cycles(lam[redo], ws[redo], ti[redo], period[redo], ring[redo], delay[redo],
                      n[redo])
        sub.follow_to_end(horizon)
        c.put(redo, sub)
    done = c.handled >= n
    w_late = np.maximum(c.late[0], 1.0)
    per = np.maximum(c.wakes, 1.0)
    # `passive` counts ⌈span / cycle⌉ wake-ups and (count − 1) · P(empty) empty ones
    return (np.where(done, span / per, c.late[1] * period / w_late),
            np.where(done, c.taken / per, c.late[2] / w_late),
            np.where(done, c.dropped / per, c.late[3] / w_late),
            np.where(done, c.empty / np.maximum(c.wakes - 1.0, 1.0), c.late[4] / w_late))


def _passive_onoff(lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                   ring: np.ndarray, delay: np.ndarray, n: np.ndarray, per_burst: np.ndarray,
                   bursts: np.ndarray, cycle: np.ndarray, samples: int = 8,
                   horizon: int = 1024) -> tuple[np.ndarray, ...]:
    """(wake-ups, empty ones, drops) of onoff bursts of evenly spaced arrivals that the
    consumer keeps up with, each burst followed cycle by cycle (`Cycles`).

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
    sub = Cycles(rep(lam), rep(ws), rep(ti), rep(period), rep(ring), rep(delay),
                  rep(np.minimum(per_burst, n)), shift)
    # the first tick whose Ti ends after the burst's first arrival takes it (an earlier
    # one is an empty wake-up of the gap); the transmission's first tick is one period in
    sub.j = np.where(index.ravel() > 0, np.ceil((shift - rep(ti)) / rep(period) - 1e-9), 1.0)
    sub.follow_to_end(horizon)
    # a burst longer than the horizon: the rest at the pace of the horizon's second half,
    # and never more wake-ups than ticks in the time it lasts (a half that held no packet
    # — packets further apart than 512 ticks — gave 10¹³ wake-ups)
    late = np.maximum(sub.late[0], 1.0)
    k_idle = np.maximum(1.0, np.ceil(rep(ti) / rep(period) - 1e-9))
    left = np.clip(sub.n - sub.handled, 0.0, None)
    more = np.minimum(left / np.maximum((sub.late[2] + sub.late[3]) / late, TINY),
                      left / rep(lam) / (k_idle * rep(period)) + 1.0)
    nxt = np.ceil((shift + rep(cycle) - rep(ti)) / rep(period) - 1e-9)
    gap = np.ceil(np.clip(nxt - sub.j, 0.0, None) / k_idle - 1e-9)
    gap = np.where(more > 0, np.clip(rep(cycle) - rep(per_burst) / rep(lam), 0.0, None)
                   / (k_idle * rep(period)), gap)
    # (of those, one a packet at least is not empty where packets are that far apart)
    w_all = sub.wakes + more
    e_all = sub.empty + np.minimum(more * sub.late[4] / late, np.clip(more - left, 0.0, None))
    per = [v.reshape(k, m) for v in (w_all, e_all, sub.dropped + more * sub.late[3] / late)]
    gaps = gap.reshape(k, m)
    # the bursts after the first: their mean (the last holds what is left of n); the gaps
    # between bursts: B − 1 of them
    rest = np.clip(bursts - 2.0 + (n - (bursts - 1.0) * per_burst) / per_burst, 0.0, None)
    n_gaps = np.clip(bursts - 1.0, 0.0, None)
    gap_total = np.where(n_gaps > 0, gaps[0] + (n_gaps - 1.0) * gaps[1:].mean(axis=0), 0.0)
    wakes, empty, dropped = (v[0] + rest * v[1:].mean(axis=0) for v in per)
    return wakes + gap_total, empty + gap_total, dropped


@compiled
def _mean_ceil(mu: float, sigma: float) -> float:
    """E⌈Y⌉ for Y ≈ Normal(mu, sigma²): mu + ½ + Σₖ sin(2πk·mu)/(πk)·exp(−2π²k²σ²), or,
    for σ < 0.12 (where that series needs many terms), L + Σₙ P(Y > n) over the integers n
    within 8σ of mu (L the lowest): a mean near an integer gets the share of each side."""
    if sigma < 0.12:
        near = mu - math.floor(mu + 0.5)  # from the nearest integer
        if sigma < 1e-12 or abs(near) > 8.0 * sigma:  # (the sum's terms: 0 and 1)
            return np.ceil(mu - 1e-9)
        low = math.floor(mu - 8.0 * sigma)
        out = float(low)
        for n in range(low, math.ceil(mu + 8.0 * sigma) + 1):
            out += 0.5 * math.erfc((n - mu) / (sigma * math.sqrt(2.0)))
        return out
    out = mu + 0.5
    for k in range(1, 7):  # the k-th term is below e^-20 once σ ≥ 1/k
        if not sigma < 1.0 / k:
            break
        out += np.sin(2 * np.pi * k * mu) / (np.pi * k) * np.exp(
            -2 * np.pi**2 * k * k * sigma**2)
    return out
