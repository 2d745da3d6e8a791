"""Passive_wait cycles followed wake-up by wake-up (`fast_passive`'s evenly spaced
arrivals and onoff bursts): the state of each followed transmission, and the loop that
advances it, compiled (numba): each element steps on its own and stops at its own end.
"""

from __future__ import annotations

import numpy as np

from nictune.simulator.compiled import compiled


class Cycles:
    """The followed cycles' state (in packet gaps and timer periods); the first of the n
    arrivals comes `shift` s after tick 0, the first tick is one period after it."""

    def __init__(self, lam: np.ndarray, ws: np.ndarray, ti: np.ndarray, period: np.ndarray,
                 ring: np.ndarray, delay: np.ndarray, n: np.ndarray,
                 shift: np.ndarray | float = 0.0) -> None:
        # (the parameters, in the order `_follow` takes them)
        ring, n = np.asarray(ring, float), np.asarray(n, float)  # (one compiled kernel)
        self.params = (lam * period, lam * (ti - shift), ring, n, lam * ws,
                       1.0 / (1.0 - lam * ws), ti / period, ws / period, lam * delay,
                       delay / period)
        self.n = n
        self.j = np.ones(lam.shape)  # the next tick
        self.handled = np.zeros(lam.shape)  # packets taken or dropped so far
        # over the wake-ups counted in `follow`: wake-ups, ticks, packets taken, dropped,
        # empty wake-ups; the totals (`follow_to_end` only)
        self.late = np.zeros((5, lam.size))
        self.wakes, self.taken, self.dropped, self.empty = (np.zeros(lam.shape)
                                                            for _ in range(4))

    def put(self, idx: np.ndarray, sub: Cycles) -> None:
        """Take `sub`'s state for the elements `idx`."""
        for name in ("j", "handled", "late", "wakes", "taken", "dropped", "empty"):
            getattr(self, name)[..., idx] = getattr(sub, name)

    def follow(self, steps: int, first_late: int) -> None:
        """Advance every transmission by `steps` wake-ups, past its end too (no totals);
        those from `first_late` on count in `late`."""
        if not 0 <= first_late <= steps:
            raise ValueError(f"first_late {first_late} outside 0..{steps}")
        _follow(*self.params, self.j, self.handled, self.late, self.wakes, self.taken,
                self.dropped, self.empty, steps, first_late, False)

    def follow_to_end(self, horizon: int) -> None:
        """Follow each transmission from where it is until its last packet is handled or
        `horizon` wake-ups, with the totals; the second half of the horizon counts in
        `late`."""
        _follow(*self.params, self.j, self.handled, self.late, self.wakes, self.taken,
                self.dropped, self.empty, horizon, horizon // 2, True)


@compiled
def _follow(lam_t: np.ndarray, lam_ti: np.ndarray, ring: np.ndarray, n: np.ndarray,
            rho: np.ndarray, inv: np.ndarray, ti_t: np.ndarray, ws_t: np.ndarray,
            lam_d: np.ndarray, d_t: np.ndarray, j: np.ndarray, handled: np.ndarray,
            late: np.ndarray, wakes: np.ndarray, taken: np.ndarray, dropped: np.ndarray,
            empty: np.ndarray, steps: int, first_late: int, to_end: bool) -> None:
    """A wake-up at tick j takes, Ti after it (and after the wait for the others' work if
    the ring holds any), the packets that arrived (the ring keeps R of them, the rest are
    dropped), then the ones that arrive while it drains: the smallest k with arrival
    a + k after the drain of q + k packets. The next wake-up is the first tick at or after
    the drain's end. `to_end`: stop at the last packet and keep the totals.

    Step by step over the elements still going (independent elements one after the other
    let the CPU overlap them; one element's steps depend on each other)."""
    going = np.arange(j.size)
    count = j.size
    j_late = j.copy()
    for step in range(steps):
        kept = 0
        for i in range(count):
            e = going[i]
            jj, h = j[e], handled[e]
            if to_end and h >= n[e]:
                continue
            if step == first_late:
                j_late[e] = jj
            a = jj * lam_t[e] + lam_ti[e]  # the drain starts Ti after the tick
            arrived = min(np.floor(a + 1e-9) + 1.0, n[e])  # (none past the last)
            q = arrived - h
            drop = max(q - ring[e], 0.0)
            q -= drop
            busy = q > 0.0
            extra = 0.0
            if busy:
                a += lam_d[e]  # the drain's start
                extra = max(np.floor((q * rho[e] + a - arrived) * inv[e] + 1e-9) + 1.0,
                            0.0)
                extra = min(extra, n[e] - arrived)
            q += extra  # packets this wake-up takes
            arrived += extra  # now: packets handled after it
            # the next tick: max(⌈j + Ti/T (+ the wait) + q·w/T − 1e-9⌉, j + 1)
            nxt = jj + ti_t[e]
            if busy:
                nxt += d_t[e]
            nxt = max(np.ceil(nxt + q * ws_t[e] - 1e-9), jj + 1.0)
            if to_end:
                wakes[e] += 1.0
                taken[e] += q
                dropped[e] += drop
                empty[e] += not busy
            if step >= first_late:
                if to_end:
                    late[0, e] += 1.0
                    late[1, e] += nxt - jj
                late[2, e] += q
                late[3, e] += drop
                late[4, e] += not busy
            j[e], handled[e] = nxt, arrived
            going[kept] = e
            kept += 1
        count = kept
        if not count:
            break
    if not to_end:
        late[0] += max(steps - first_late, 0)
        late[1] += j - j_late
        wakes += steps
