"""The reference engine: a SimPy discrete-event model of docs/model.md.

Transmissions whose settings put them on the same core of one host are simulated together
in one `simpy.Environment` around one `Core`. The core serves two priorities: interrupt
work (`irq` per interrupt or wake-up, FIFO, preempting) and packet work (w per packet,
preemptive-resume, FIFO by request across consumers, i.e. round-robin per packet while
several drain at once).

What is an event and what is not:
- wake-ups (passive_wait timer ticks, watermark level/timeout) are SimPy timeouts, scheduled
  only while a consumer sleeps, so a tick that would come while it drains is never created;
- arrivals are a NumPy array, never events; a drain is computed for a whole slice of it at
  once (`Core._drain`), cut at the next SimPy event so that a wake-up of another consumer
  preempts it exactly;
- active_wait and busy_poll are data-driven (their interrupts/polls follow the arrivals):
  the core processes them in its own loop between SimPy events; alone on a core they are
  solved in one vectorised pass (`_active_solo`, `_busy_solo`) with a sequential fallback
  from the first packet that overflows the ring or backlog;
- on a shared core the loop between SimPy events runs compiled (`des_loop.core_loop`:
  the same steps, the same results to the bit) wherever data-driven consumers are or
  batched ones take turns packet by packet; it hands back what needs SimPy or NumPy (a
  consumer going to sleep, a drain alone).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import replace

import numpy as np
import simpy

from nictune.errors import InputError
from nictune.model import Config, NicSetting, Transmission
from nictune.simulator.arrivals import arrival_times, full_span, onoff_bursts
from nictune.simulator.costs import memory_factors, pollers_cpu, work_per_packet
from nictune.simulator.des_loop import (
    ACTIVE,
    BATCHED,
    EVENTS,
    IH,
    IL,
    IRQ_C,
    IRQ_IDX,
    IRQ_KIND,
    LH,
    LL,
    LO_C,
    LO_IDX,
    POLL,
    RAN,
    SLEEPS,
    WHO,
    WHY,
    core_loop,
)
from nictune.simulator.metrics import Metrics

INF = math.inf
SLEEP, WAKING, DRAIN, DONE = range(4)
WAKE, AW = 0, 1  # interrupt kinds: a consumer wake-up, an active_wait packet
FIRST_CHUNK = 16  # arrivals a drain scans in plain Python before NumPy slices (x4 each)
MAX_CHUNK = 65536
WORTH_COMPILING = 8  # events of a stretch from which `core_loop` pays (`Core._advance`)
START_UP = 0.05  # share of a window's first phase whose drops count once
WAKE_UPS = 100  # wake-ups the window holds at least (`window_fraction`) ...
ONOFF_CYCLES = 10  # ... and onoff bursts (with their pauses) ...
MAX_WINDOWS = 20  # ... unless that simulates more than this many windows on a core
EXACT_PACKETS = 100_000_000  # the most packets of one core an exact run simulates
PACKET_BYTES = 80  # memory a simulated packet takes (its arrays), about
MIN_WINDOW_PACKETS = 100  # a window holds at least this many packets of each (or all) ...
FILL_DROPS = 100  # drops after the start-up that show a ring that filled (`_metrics`)
EXACT_SHARE = 0.3  # a longer window of at least this share runs exact instead
WINDOW = 200_000  # packets of each transmission a window holds by default (`simulate`)
WINDOW_GROWTHS = 2  # a window whose queue had not settled is simulated 4x longer, twice
GROWN_PACKETS = 20_000_000  # ... while the core's longer window holds at most this many
#   packets (× PACKET_BYTES: 1.6 GB; a worker per CPU each holding 100 M took 8 GB each)
WATERMARK_BATCHES = 16  # ... and at least this many watermarks of a watermark consumer


class Consumer:
    """One transmission's ring, consumer state and counters (window of `n` packets)."""

    def __init__(self, setting: NicSetting, arrivals: np.ndarray, w: float, irq: float,
                 poll_check: float, backlog: int, timer_phase: float | None = None):
        self.setting, self.mode = setting, setting.mode
        self.active, self.busy = self.mode == "active_wait", self.mode == "busy_poll"
        self.A, self.n, self.w, self.Ti, self.Tc = arrivals, len(arrivals), w, irq, poll_check
        self.notice = poll_check / 2  # busy_poll sees a packet half a poll check after it
        self.AL: list[float] = arrivals.tolist()  # for scalar look-ups, faster than NumPy's
        self.R, self.B = setting.ring_slots, backlog
        self.T = setting.poll_interval or 0.0
        self.W = setting.watermark or 0
        self.tau = setting.watermark_timeout or 0.0
        self.phase = timer_phase  # a free-running timeout: ticks at (phase + k)·tau
        self.nxt = 0  # next arrival not yet admitted or dropped
        self.acc = np.empty(self.n, dtype=np.int64)  # accepted packets, in order
        self.n_acc = self.n_taken = 0  # ring = acc[n_taken:n_acc]
        self.finish = np.full(self.n, np.nan)
        self.dropped = self.interrupts = self.empty = 0
        self.cpu = 0.0
        self.state = SLEEP
        self.in_backlog = 0  # active_wait: packets in the backlog
        self.requested = False  # busy_poll: a request is queued or in service
        self.step = max(1, math.ceil(self.Ti / self.T - 1e-9)) if self.T else 1
        self.woke = -INF  # when the last wake-up came (a tick is never served twice)
        self.on_wake: Callable[[simpy.Event], None] | None = None  # set by its Core
        # (interrupts, cpu, empty) when the core reached the last arrival, if asked for:
        # a window scales what came before it and counts the tail after it once
        self.at_last: tuple[int, float, int] | None = None

    def mark_last(self, _event: simpy.Event | None = None) -> None:
        self.at_last = (self.interrupts, self.cpu, self.empty)

    def ring(self) -> int:
        return self.n_acc - self.n_taken

    def admit(self, t: float) -> int:
        """Arrivals up to `t` enter the ring while it has room, the rest are dropped.

        Exact as long as nothing was taken from the ring since the previous call."""
        if self.nxt >= self.n or self.AL[self.nxt] > t:
            return 0
        k = bisect.bisect_right(self.AL, t, self.nxt)
        m = k - self.nxt
        room = max(0, self.R - self.ring())
        a = min(m, room)
        if a == 1:
            self.acc[self.n_acc] = self.nxt
            self.n_acc += 1
        elif a:
            self.acc[self.n_acc:self.n_acc + a] = np.arange(self.nxt, self.nxt + a)
            self.n_acc += a
        self.dropped += m - a
        self.nxt = k
        return a

    def take(self) -> int:
        idx = int(self.acc[self.n_taken])
        self.n_taken += 1
        return idx

    def tick(self, k: int) -> float:
        return self.AL[0] + k * self.T

    def deadline(self, first: float) -> float:
        """When the watermark timeout ends a batch whose first packet came at `first`:
        `tau` after it (PF_RING), or with a free-running timer (`phase`: Linux 6.18's
        TPACKET_V3 block timer) at its first tick from then on (never before `first`: a
        tick on an arrival can round below it)."""
        if self.phase is None:
            return first + self.tau
        return max(first, (math.ceil(first / self.tau - self.phase) + self.phase) * self.tau)


class Core:
    """One core of a host and the consumers whose IRQs it takes, in one SimPy environment.

    `t` is the time the core's state is exact up to; it runs ahead of `env.now` but never
    past the next SimPy event (`H`), so every wake-up finds the core's state as of its time.
    """

    def __init__(self, env: simpy.Environment, consumers: Sequence[Consumer],
                 vectorised: bool = True, mark_last: bool = False):
        self.env, self.cs = env, list(consumers)
        self.mark_last = mark_last
        self.t = min(c.AL[0] for c in self.cs)
        self.H = INF
        self.soonest: tuple[float, simpy.Timeout] | None = None  # earliest wake-up scheduled
        self.irq_q: deque[tuple[Consumer, int, int]] = deque()
        self.irq_cur: tuple[Consumer, int, int] | None = None
        self.irq_end = INF
        self.lo_q: deque[tuple[Consumer, int]] = deque()  # (consumer, packet or -1 = next)
        self.lo_cur: Consumer | None = None
        self.lo_idx, self.lo_end = -1, INF
        self.vectorised = vectorised
        self.solo = vectorised and len(self.cs) == 1
        self.batched = vectorised and all(c.mode in ("passive_wait", "watermark")
                                          for c in self.cs)
        self.driven = [c for c in self.cs if c.mode in ("active_wait", "busy_poll")]
        # a shared core's loop runs compiled (`core_loop`); its consumers' arrays pooled
        self.pooled = self.cs if vectorised and not self.solo else []
        if self.pooled:
            self._pool()
        self.compiling = bool(self.pooled)  # the last stretch was long (`_advance`)
        for c in self.cs:
            c.on_wake = lambda _ev, c=c: self._woken(c)

    def _pool(self) -> None:
        """Put the consumers' arrays end to end for `core_loop` (each consumer keeps a
        view of its part), with its constants and room for its queues."""
        ps = self.pooled
        sizes = np.array([c.n for c in ps], dtype=np.int64)
        self.p_off = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self.p_A = np.concatenate([c.A for c in ps])
        self.p_acc = np.empty(int(sizes.sum()), dtype=np.int64)
        self.p_finish = np.full(int(sizes.sum()), np.nan)
        for c, o in zip(ps, self.p_off.tolist(), strict=True):  # (fresh: nothing to copy)
            part = slice(o, o + c.n)
            c.A, c.acc, c.finish = self.p_A[part], self.p_acc[part], self.p_finish[part]
        self.p_kind = np.array([ACTIVE if c.active else POLL if c.busy else BATCHED
                                for c in ps], dtype=np.int64)
        self.p_n, self.p_R = sizes, np.array([c.R for c in ps], dtype=np.int64)
        self.p_B = np.array([c.B for c in ps], dtype=np.int64)
        self.p_w, self.p_ti = np.array([c.w for c in ps]), np.array([c.Ti for c in ps])
        self.p_notice = np.array([c.notice for c in ps])
        self.p_index = {id(c): i for i, c in enumerate(ps)}
        # an active_wait consumer queues an interrupt per packet in its ring and a request
        # per packet in its backlog, the others one of each at most
        self.p_iq = np.zeros((len(ps) + 1 + sum(c.R for c in ps if c.active), 2), np.int64)
        self.p_lq = np.zeros((len(ps) + 1 + sum(c.B for c in ps if c.active), 2), np.int64)

    # ------------------------------------------------------------------ SimPy process
    def run(self) -> Generator[simpy.Event, None, None]:
        """The core's process: advance to the next SimPy event, yield to it, repeat."""
        if self.solo and self.cs[0].mode == "active_wait":
            _active_solo(self.cs[0])
            return
        if self.solo and self.cs[0].mode == "busy_poll":
            _busy_solo(self.cs[0])
            return
        for c in self.cs if self.mark_last else ():  # (first at their time: FIFO)
            self.env.timeout(c.AL[-1] - self.env.now).callbacks.append(c.mark_last)
        for c in self.cs:
            if c.mode in ("passive_wait", "watermark"):
                self._sleep(c, c.AL[0])
        while True:
            self.soonest = None
            self._advance(self.env.peek())
            if self.H == INF:
                return
            if self.soonest is not None and self.soonest[0] == self.H:
                yield self.soonest[1]  # the wake-up itself: its callback runs first
            else:
                yield self.env.timeout(self.H - self.env.now)

    def _schedule(self, c: Consumer, at: float) -> None:
        delay = max(0.0, at - self.env.now)
        ev = self.env.timeout(delay)
        ev.callbacks.append(c.on_wake)
        when = self.env.now + delay  # what SimPy computes
        if when < self.H:
            self.H, self.soonest = when, (when, ev)

    def _woken(self, c: Consumer) -> None:
        if c.state == SLEEP:
            c.state, c.woke = WAKING, self.env.now
            self.irq_q.append((c, WAKE, -1))

    # ------------------------------------------------------------------ the core's loop
    def _advance(self, horizon: float) -> None:
        """Process every internal event (interrupt end, packet end, data-driven arrival) up
        to `horizon` (the next SimPy event) or to a wake-up scheduled meanwhile. On a
        shared core `core_loop` runs the same steps compiled, where data-driven consumers
        are or batched ones take turns packet by packet, when it pays (a call costs a few
        packets' worth of the Python loop): for the whole stretch when the previous one
        held `WORTH_COMPILING` events or more, else from the event that brings this one
        to that many."""
        self.H = horizon
        self._dispatch()
        events, long_before = 0, self.compiling
        while True:
            if ((long_before or events >= WORTH_COMPILING) and self.pooled
                    and (self.driven or self._taking_turns())):
                why, ran = self._run_compiled()
                events += ran
                if why == RAN:
                    self.compiling = events >= WORTH_COMPILING
                    return
                self._dispatch()
                continue
            te, what, c = self.irq_end, 0, None
            if self.lo_end < te:
                te, what = self.lo_end, 1
            for d in self.driven:
                tc = max(self._next_driven(d), self.t)
                if tc < te:
                    te, what, c = tc, 2, d
            if te > self.H or te == INF:
                break
            self.t = te
            if what == 0:
                self._irq_done()
            elif what == 1:
                self._lo_done()
            elif c is not None and c.active:
                for _ in range(c.admit(te)):
                    self.irq_q.append((c, AW, -1))
            elif c is not None:
                c.requested = True
                self.lo_q.append((c, -1))
            self._dispatch()
            events += 1
        self.compiling = events >= WORTH_COMPILING
        self._to_horizon()

    def _taking_turns(self) -> bool:
        """Batched consumers take turns packet by packet (a drain alone is `_drain`'s)."""
        return len(self.lo_q) + (self.lo_cur is not None) > 1

    def _run_compiled(self) -> tuple[int, int]:
        """The rest of `_advance` in one call of `core_loop` (the same steps, compiled),
        up to the horizon or to a consumer it hands back: to `_sleep` or `_drain`. Returns
        why it stopped (RAN, SLEEPS, DRAINS) and how many events it processed."""
        ps, index, iq, lq = self.pooled, self.p_index, self.p_iq, self.p_lq
        st = np.array([(c.nxt, c.n_acc, c.n_taken, c.dropped, c.requested, c.interrupts,
                        c.empty, c.in_backlog, c.state) for c in ps], dtype=np.int64)
        cpu = np.array([c.cpu for c in ps])
        for j, (c, kind, _) in enumerate(self.irq_q):
            iq[j] = index[id(c)], kind
        for j, (c, idx) in enumerate(self.lo_q):
            lq[j] = index[id(c)], idx
        irq, lo = self.irq_cur, self.lo_cur
        regs = np.array([
            index[id(irq[0])] if irq else -1, irq[1] if irq else -1, irq[2] if irq else -1,
            index[id(lo)] if lo else -1, self.lo_idx if lo else -1,
            0, len(self.irq_q), 0, len(self.lo_q), RAN, -1, 0], dtype=np.int64)
        times = np.array([self.t, self.H, self.irq_end, self.lo_end])
        core_loop(self.p_A, self.p_acc, self.p_finish, self.p_off, self.p_kind, self.p_n,
                  self.p_R, self.p_B, self.p_w, self.p_ti, self.p_notice, st, cpu, iq, lq,
                  regs, times, self.batched)
        for c, row, busy in zip(ps, st.tolist(), cpu.tolist(), strict=True):
            (c.nxt, c.n_acc, c.n_taken, c.dropped, requested, c.interrupts, c.empty,
             c.in_backlog, c.state) = row
            c.requested, c.cpu = bool(requested), busy
        r = regs.tolist()
        self.irq_q.clear()
        self.irq_q.extend((ps[x], kind, -1) for x, kind in
                          (iq[(r[IH] + j) % len(iq)].tolist() for j in range(r[IL])))
        self.lo_q.clear()
        self.lo_q.extend((ps[x], idx) for x, idx in
                         (lq[(r[LH] + j) % len(lq)].tolist() for j in range(r[LL])))
        self.irq_cur = (ps[r[IRQ_C]], r[IRQ_KIND], r[IRQ_IDX]) if r[IRQ_C] >= 0 else None
        self.lo_cur = ps[r[LO_C]] if r[LO_C] >= 0 else None
        self.lo_idx = r[LO_IDX]
        self.t, _, self.irq_end, self.lo_end = times.tolist()
        if r[WHY] == SLEEPS:
            self._sleep(ps[r[WHO]], self.t)
        elif r[WHY] != RAN:
            self._drain(ps[r[WHO]], self.t)
        return r[WHY], r[EVENTS]

    def _to_horizon(self) -> None:
        """Nothing more happens before the next SimPy event: the core's time moves to it."""
        if self.H < INF:
            self.t = max(self.t, self.H)

    def _next_driven(self, c: Consumer) -> float:
        """When a data-driven consumer next needs the core: active_wait at its next
        arrival, busy_poll when it notices a packet while no request of its is queued."""
        if c.active:
            return c.AL[c.nxt] if c.nxt < c.n else INF
        if c.requested:
            return INF
        if c.ring():
            return c.AL[int(c.acc[c.n_taken])] + c.notice
        return c.AL[c.nxt] + c.notice if c.nxt < c.n else INF

    def _dispatch(self) -> None:
        """Start interrupt work if any is queued, else packet work if any is requested."""
        t = self.t
        if self.irq_cur is None and self.irq_q:
            c, kind, _ = self.irq_q.popleft()
            idx = c.take() if kind == AW else -1
            self.irq_cur, self.irq_end = (c, kind, idx), t + c.Ti
            if self.lo_cur is not None:
                self.lo_end += c.Ti  # preempted: resumes after the interrupt
            return
        if self.irq_cur is not None or self.lo_cur is not None:
            return
        while self.lo_q:
            c, idx = self.lo_q.popleft()
            if c.active:
                c.in_backlog -= 1
                self._serve(c, idx, t + c.w)
                return
            c.admit(t)
            if c.busy:
                if c.ring() and c.AL[int(c.acc[c.n_taken])] + c.notice <= t:
                    self._serve(c, c.take(), t + c.w)
                    return
                c.requested = False
                continue
            if not c.ring():
                self._sleep(c, t)
                continue
            if self.batched and not self.lo_q:
                self._drain(c, t)
            else:
                self._serve(c, c.take(), t + c.w)
            return

    def _serve(self, c: Consumer, idx: int, end: float) -> None:
        self.lo_cur, self.lo_idx, self.lo_end = c, idx, end

    def _irq_done(self) -> None:
        assert self.irq_cur is not None
        c, kind, idx = self.irq_cur
        self.irq_cur, self.irq_end = None, INF
        c.interrupts += 1
        c.cpu += c.Ti
        if kind == AW:
            if c.in_backlog >= c.B:
                c.dropped += 1
            else:
                c.in_backlog += 1
                self.lo_q.append((c, idx))
            return
        c.state = DRAIN
        c.admit(self.t)
        if c.ring():
            self.lo_q.append((c, -1))
        else:
            c.empty += 1
            self._sleep(c, self.t)

    def _lo_done(self) -> None:
        c = self.lo_cur
        assert c is not None
        c.finish[self.lo_idx] = self.t
        c.cpu += c.w
        self.lo_cur, self.lo_idx, self.lo_end = None, -1, INF
        if not c.active:
            self.lo_q.append((c, -1))  # asks for its next packet, behind earlier requests

    # ------------------------------------------------------------------ batched modes
    def _sleep(self, c: Consumer, x: float) -> None:
        """The consumer found its ring empty at `x` (or starts): schedule its wake-up."""
        c.state = SLEEP
        c.admit(x)
        q = c.ring()
        if q == 0 and c.nxt >= c.n:
            c.state = DONE  # ticks stop after the last delivery
            return
        if c.mode == "passive_wait":
            k = max(1, math.ceil((x - c.AL[0]) / c.T))
            while k > 1 and c.tick(k - 1) >= x:
                k -= 1
            while c.tick(k) < x or c.tick(k) <= c.woke:  # (irq 0: x is the tick itself)
                k += 1
            if q == 0 and self.vectorised and self._idle():
                k += c.step * self._empty_ticks(c, k, self._quiet_until())
            self._schedule(c, c.tick(k))
            return
        first = c.AL[int(c.acc[c.n_taken])] if q else c.AL[c.nxt]
        wake = INF
        if q >= c.W:
            wake = x
        elif c.W <= c.R and c.nxt + c.W - q - 1 < c.n:  # a ring of R never holds more
            wake = c.AL[c.nxt + c.W - q - 1]
        if c.tau > 0:
            wake = min(wake, max(x, c.deadline(first)))
        if wake == INF:
            c.state = DONE  # below the watermark with no timeout: stranded
            return
        self._schedule(c, wake)

    def _idle(self) -> bool:
        """No interrupt or packet work under way or waiting on this core."""
        return (self.irq_cur is None and not self.irq_q and self.lo_cur is None
                and not self.lo_q)

    def _quiet_until(self) -> float:
        """When anything may next happen on the core besides a sleeping consumer's ticks:
        the next SimPy event or data-driven arrival."""
        if not self.driven:
            return self.H
        return min(self.H, *(self._next_driven(d) for d in self.driven))

    def _empty_ticks(self, c: Consumer, k: int, until: float) -> int:
        """A passive consumer's ticks before its next arrival are empty wake-ups. While
        the core has nothing else to do until `until`, count and pay those that end by
        then at once instead of simulating each; returns how many."""
        a = c.AL[c.nxt]
        span = c.step * c.T
        m = max(0, math.ceil((min(a, until) - c.Ti - c.tick(k)) / span))
        while m > 0 and (c.tick(k + (m - 1) * c.step) + c.Ti >= a
                         or c.tick(k + (m - 1) * c.step) + c.Ti > until):
            m -= 1
        while (c.tick(k + m * c.step) + c.Ti < a
               and c.tick(k + m * c.step) + c.Ti <= until):
            m += 1
        c.interrupts += m
        c.empty += m
        c.cpu += m * c.Ti
        return m

    def _drain(self, c: Consumer, s: float) -> None:
        """Drain `c`'s ring from `s` with the core to itself: packet j of the drain starts at
        s + j·w while packets keep coming in time. Computed for a slice of arrivals at once;
        the slice ends where the ring runs empty, an arrival would overflow it, the next
        SimPy event comes, or the slice runs out. The last packet taken stays in service."""
        q, w = c.ring(), c.w
        count, taken_n, accept = _drain_extent_short(c, q, s)
        if count < 0:
            count, taken_n, accept = _drain_extent(c, q, s, self.H)
        if self.H < INF:
            taken_n = max(1, min(taken_n, math.ceil((self.H - s) / w)))
        if count:
            last_start = s + (taken_n - 1) * w
            accept = min(accept, bisect.bisect_right(c.AL, last_start, c.nxt, c.nxt + count)
                         - c.nxt)
            accept = max(accept, taken_n - q)
            c.acc[c.n_acc:c.n_acc + accept] = np.arange(c.nxt, c.nxt + accept)
            c.n_acc += accept
            c.nxt += accept
        idx = c.acc[c.n_taken:c.n_taken + taken_n]
        c.n_taken += taken_n
        c.finish[idx[:-1]] = s + np.arange(1, taken_n) * w
        c.cpu += (taken_n - 1) * w
        self._serve(c, int(idx[-1]), s + taken_n * w)


def _drain_extent_short(c: Consumer, q: int, s: float) -> tuple[int, int, int]:
    """`_drain_extent` for drains that end within FIRST_CHUNK arrivals, in plain Python
    (the same float expressions); (-1, 0, 0) when the drain goes on longer."""
    w, nxt, AL = c.w, c.nxt, c.AL
    count = min(c.n - nxt, FIRST_CHUNK)
    for m in range(count):
        a = AL[nxt + m]
        if a > s + (q + m) * w:
            return count, q + m, m
        taken_by = math.floor((a - s) / w) + 1.0
        if q + m - taken_by >= c.R:
            return count, max(1, int(taken_by)), m
    return (count, q + count, count) if count == c.n - nxt else (-1, 0, 0)


def _drain_extent(c: Consumer, q: int, s: float, horizon: float) -> tuple[int, int, int]:
    """How far a drain from `s` with `q` packets in the ring goes before something ends it:
    (arrivals looked at, packets taken, arrivals accepted). Packet j of the drain starts at
    s + j·w; arrival m is the drain's packet q + m and is there in time when it comes by
    s + (q+m)·w (else the ring runs empty: the drain ends), and overflows the ring when R
    packets wait at its arrival (the drain is cut at the last packet taken before it)."""
    w = c.w
    size = FIRST_CHUNK * 4 + 2 * q
    while True:  # widen the slice until something ends the drain
        count = min(c.n - c.nxt, size)
        if not count:
            return 0, q, 0
        fut = c.A[c.nxt:c.nxt + count]
        pos = np.arange(q, q + count, dtype=np.float64)
        gap = fut > s + pos * w
        taken_by = np.floor((fut - s) / w) + 1.0
        over = (pos - taken_by) >= c.R
        m0 = int(gap.argmax()) if gap.any() else count
        m1 = int(over.argmax()) if over.any() else count
        if m1 < m0:
            return count, max(1, int(taken_by[m1])), m1
        if m0 < count:
            return count, q + m0, m0
        if count == c.n - c.nxt or s + (q + count) * w >= horizon or size >= MAX_CHUNK:
            return count, q + count, count
        size *= 4


# ---------------------------------------------------------------------- solo fast paths
def _first_overflow(ready: np.ndarray, starts: np.ndarray, slots: int, tie_waits: bool) -> int:
    """First job that finds `slots` earlier jobs still waiting (start after its ready time,
    or at it when `tie_waits`)."""
    if len(ready) <= slots:
        return len(ready)
    later, now = starts[:-slots], ready[slots:]
    bad = later >= now if tie_waits else later > now
    return int(bad.argmax()) + slots if bad.any() else len(ready)


def _fifo_bounded(ready: np.ndarray, w: float, slots: int, tie_waits: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    """FIFO service w with at most `slots` jobs waiting (`ready` ascending).

    Returns the accepted jobs and, per accepted job k (k-th accepted), its *base* b_k with
    start_k = k·w + b_k; b_k = max(b_{k-1}, ready_k − k·w) is the Lindley recursion s_k =
    max(ready_k, s_{k-1} + w) without the rounding of adding and removing k·w. Vectorised
    (a running maximum) up to the first overflow, sequential from there. `tie_waits`: a
    job that starts at the very time another becomes ready still counts as waiting."""
    k = np.arange(len(ready), dtype=np.float64) * w
    base = np.maximum.accumulate(ready - k)
    v = _first_overflow(ready, k + base, slots, tie_waits)
    if v == len(ready):
        return np.arange(len(ready)), base
    keep = list(range(v))
    bases = base[:v].tolist()
    waiting = deque((k[max(0, v - slots):v] + base[max(0, v - slots):v]).tolist())
    b = bases[-1] if bases else -INF
    for i in range(v, len(ready)):
        r = float(ready[i])
        while waiting and (waiting[0] < r or (waiting[0] == r and not tie_waits)):
            waiting.popleft()
        if len(waiting) >= slots:
            continue
        n = len(keep)
        b = max(b, r - n * w)
        keep.append(i)
        bases.append(b)
        waiting.append(n * w + b)
    return np.asarray(keep, dtype=np.int64), np.asarray(bases)


def _active_solo(c: Consumer) -> None:
    """active_wait alone on a core, exactly as the generic loop would run it.

    Interrupt work depends only on the arrivals (handlers are FIFO, start when the packet
    arrives or the previous handler ends, and free its ring slot). Packet work is a FIFO
    queue in the core's *available* time V(t) = t − interrupt time before t: the k-th
    handler runs while V = hs_k − k·Ti (its Lindley base), and a packet finishing at V = f
    finishes in real time at f + Ti · #{handlers with V < f}."""
    ring_ok, u = _fifo_bounded(c.A, c.Ti, c.R)
    c.dropped = c.n - len(ring_ok)
    c.interrupts = len(ring_ok)
    kept, base = _fifo_bounded(u, c.w, c.B, tie_waits=True)  # a full backlog drops
    c.dropped += len(ring_ok) - len(kept)
    f = np.arange(1, len(kept) + 1) * c.w + base
    c.finish[ring_ok[kept]] = f + c.Ti * u.searchsorted(f, "left")
    c.cpu = c.interrupts * c.Ti + len(kept) * c.w
    last = c.AL[-1]  # handler k starts at k·Ti + u_k
    handled = int((np.arange(len(u)) * c.Ti + u <= last).sum())
    c.at_last = (handled, handled * c.Ti + int((c.finish[ring_ok[kept]] <= last).sum()) * c.w,
                 0)
    c.nxt = c.n  # every arrival was admitted or dropped


def _busy_solo(c: Consumer) -> None:
    """busy_poll alone on a core: a packet is noticed Tc/2 after it arrives, served FIFO,
    and leaves the ring when taken; an arrival finding R packets waiting is dropped."""
    kept, base = _fifo_bounded(c.A + c.Tc / 2, c.w, c.R, tie_waits=True)
    c.dropped = c.n - len(kept)
    c.finish[kept] = np.arange(1, len(kept) + 1) * c.w + base
    c.cpu = len(kept) * c.w
    c.at_last = (0, int((c.finish[kept] <= c.AL[-1]).sum()) * c.w, 0)
    c.nxt = c.n  # every arrival was admitted or dropped


# ---------------------------------------------------------------------- entry point
def run_core(consumers: Sequence[Consumer], vectorised: bool = True,
             mark_last: bool = False) -> None:
    """Simulate consumers that share one core, in one SimPy environment.

    `vectorised=False` runs every packet through the core's event loop (no solo fast
    paths, no batched drains): slow, and the check that the fast paths change nothing.
    `mark_last`: record each consumer's counters at its last arrival (`at_last`)."""
    env = simpy.Environment()
    core = Core(env, consumers, vectorised, mark_last)
    env.process(core.run())
    env.run()


def simulate(config: Config, settings: Mapping[str, NicSetting], *, seed: int = 0,
             exact: bool = False, window: int = WINDOW, vectorised: bool = True,
             timer_phase: float | None = None) -> list[Metrics]:
    """One `Metrics` per transmission in `settings` (in that order).

    Transmissions of one host are simulated together: those on the same IRQ core in one
    SimPy environment; the memory bus couples a host's cores through w. Unless `exact`,
    each core's transmissions are shortened by one factor (`window_fraction`: about
    `window` packets each, at least 100 wake-ups) and the totals scaled (`_metrics`,
    `extrapolated`). `timer_phase` in [0, 1), for exact runs: watermark timeouts run
    freely instead, ticking at (timer_phase + k)·timeout from time 0 (`Consumer.deadline`);
    one phase for every consumer, as for the one transmission the validator re-predicts."""
    if window < 1:
        raise InputError(f"window must be at least 1 packet, got {window}")
    if timer_phase is not None and not (exact and 0 <= timer_phase < 1):
        raise InputError(f"timer_phase must be in [0, 1) and the run exact, got {timer_phase} "
                         f"(exact={exact})")
    transmissions = config.select(list(settings))
    index = {t.id: k for k, t in enumerate(config.transmissions)}
    memory = memory_factors(config, transmissions)
    groups: dict[tuple[str, int], list[Transmission]] = {}
    for t in transmissions:
        groups.setdefault((config.host_of(t).name, settings[t.id].irq_core), []).append(t)
    packets = {key: sum(t.packets for t in group) for key, group in groups.items()}
    for (host, core), count in packets.items() if exact else ():
        if count > EXACT_PACKETS:
            raise InputError(
                f"--exact: core {core} of host {host} takes {count:,} packets, more than "
                f"the {EXACT_PACKETS:,} an exact run holds in memory (~{PACKET_BYTES} bytes each); "
                "simulate a window instead (no --exact)")
    results: dict[str, Metrics] = {}
    for key, group in groups.items():  # one core at a time: only its arrays in memory
        fraction = 1.0 if exact else window_fraction(
            [t.packets for t in group], window,
            [_wake_share(config, settings[t.id], t) for t in group])
        for longer in range(WINDOW_GROWTHS + 1):
            starts = [t.start * fraction for t in group]
            arrivals = [arrival_times(replace(t, start=start), config.nic_of(t), seed,
                                      index[t.id], window_packets(config, t, settings[t.id],
                                                                  fraction))
                        for t, start in zip(group, starts, strict=True)]
            consumers = [Consumer(settings[t.id], a, work_per_packet(
                config, t, settings[t.id].placement, memory[t.id]),
                config.host_of(t).costs.irq, config.host_of(t).costs.poll_check,
                config.host_of(t).backlog_slots, timer_phase)
                for t, a in zip(group, arrivals, strict=True)]
            run_core(consumers, vectorised, mark_last=fraction < 1)
            wider = min(1.0, fraction * 4)
            if wider >= EXACT_SHARE:  # (a window that long costs as much as every packet)
                wider = 1.0
            if fraction == 1 or longer == WINDOW_GROWTHS or \
                    packets[key] * wider > GROWN_PACKETS or not any(
                    c.n < t.packets and _unsettled(c, _start_up(a, arrivals, starts))
                    for t, c, a in zip(group, consumers, arrivals, strict=True)):
                break
            fraction = wider
        results.update((t.id, _metrics(config, t, c, _start_up(a, arrivals, starts),
                                       alone=len(group) == 1))
                       for t, c, a in zip(group, consumers, arrivals, strict=True))
    _spin(config, settings, transmissions, results)
    return [results[t.id] for t in transmissions]


def _spin(config: Config, settings: Mapping[str, NicSetting],
          transmissions: list[Transmission], results: dict[str, Metrics]) -> None:
    """Give each busy-poller in `results` its share of the one core that spins for its NIC
    on its IRQ core (`pollers_cpu`), and its energy with it."""
    nics: dict[tuple[str, int], list[Transmission]] = {}
    for t in transmissions:  # (a NIC's pollers on one IRQ core: one core between them)
        if settings[t.id].mode == "busy_poll":
            nics.setdefault((t.nic, settings[t.id].irq_core), []).append(t)
    for group in nics.values():
        ms = [results[t.id] for t in group]
        start = np.array([t.start for t in group])
        cpu = pollers_cpu(start, start + np.array([m.duration_s for m in ms]),
                          np.array([m.cpu_busy_s for m in ms]),
                          np.ones((len(group), len(group)), dtype=bool))
        power = config.host_of(group[0]).power.core_busy
        for t, m, s in zip(group, ms, cpu.tolist(), strict=True):
            results[t.id] = replace(m, cpu_busy_s=s,
                                    cpu_util=s / m.duration_s if m.duration_s > 0 else 0.0,
                                    energy_j=m.energy_j + power * (s - m.cpu_busy_s))


def _start_up(own: np.ndarray, arrivals: Sequence[np.ndarray], starts: Sequence[float]
              ) -> tuple[float, float]:
    """(first arrival, end of the start-up) of one transmission of a core: START_UP of the
    time from its first arrival until a transmission of the core starts or ends."""
    first = own[0]
    edges = [t for t in (*starts, *(a[-1] for a in arrivals)) if t > first]
    return first, first + START_UP * ((min(edges) if edges else first) - first)


def window_fraction(packets: Sequence[int], window: int,
                    wakes: Sequence[float] = ()) -> float:
    """The fraction of each of one core's transmissions that the DES simulates.

    Alone on its core, a transmission's first `window` packets. Beside others, every one is
    shortened by the same factor — its packets and its start time — so that the phases of
    the core (who is arriving, who has ended) keep their order and proportions: the first
    `window` packets of each would cover different stretches of time, and a stream that
    outlives its neighbours would be extrapolated from the crowded start alone. The factor
    leaves the shortest transmission `window` packets, unless the core would then simulate
    more than two windows per transmission (a short one beside long ones keeps fewer).

    `wakes`: each one's time between wake-ups as a share of its span. The window holds at
    least WAKE_UPS of them (a tick every 160 ms needs 16 s: with fewer, the start-up's
    swings and the ticks' phases against the neighbours' do not average out), unless that
    is more than MAX_WINDOWS windows in all.

    Never more than GROWN_PACKETS in all, the memory a longer window may take: a
    window each of 200 transmissions on one core would be 40 M packets (~3 GB)."""
    if not packets:
        return 1.0
    total = max(sum(packets), 1)
    by_packets = min(window / max(min(packets), 1), 2.0 * window * len(packets) / total)
    by_wakes = min(WAKE_UPS * max(wakes, default=0.0), MAX_WINDOWS * window / total)
    return min(1.0, max(by_packets, by_wakes), GROWN_PACKETS / total)


def _unsettled(c: Consumer, start_up: tuple[float, float]) -> bool:
    """Whether the window ended before the consumer's queue settled: its drops began late
    (after a quarter of the window's span, past the start-up), or it was still filling
    (its mean queue over the last quarter of the span a quarter above the third's, and
    by more than 0.2 % of a quarter's arrivals). A core just past its capacity fills a
    4 096-slot ring over hundreds of thousands of packets: its window saw no drops, and
    scaling it said none."""
    if c.n < 4:
        return False
    first, last, settled = c.AL[0], c.AL[-1], start_up[1]
    ok = np.isfinite(c.finish)
    dropped = _dropped(c, ok)
    late = dropped & (settled < c.A)
    if late.any():
        return float(c.A[late][0]) > first + (last - first) / 4
    admitted = ok.copy()
    admitted[c.acc[c.n_taken:c.n_acc]] = True  # (stranded in the ring)
    came, done = c.A[admitted], np.sort(c.finish[ok])

    def mean_queue(quarter: int) -> float:
        ts = first + (last - first) * (quarter + (np.arange(32) + 0.5) / 32) / 4
        return float((np.searchsorted(came, ts, "right")
                      - np.searchsorted(done, ts, "right")).mean())

    q3, q4 = mean_queue(2), mean_queue(3)
    return q4 - q3 > max(0.25 * q3, 0.002 * c.n / 4)


def _dropped(c: Consumer, ok: np.ndarray) -> np.ndarray:
    """Which of the window's packets were dropped (`ok`: delivered): not delivered, not
    stranded in the ring, and offered (a consumer that stopped was offered no more)."""
    gone = ~ok
    gone[c.acc[c.n_taken:c.n_acc]] = False
    gone[c.nxt:] = False
    return gone


def _emptied(c: Consumer, ok: np.ndarray, settled: float) -> bool:
    """Whether, after the start-up, a delivered packet found every packet delivered
    before it already served: the queue empties, so the drain after the last arrival is
    one of many (an onoff burst's), not the end of a queue that never emptied."""
    idx = np.flatnonzero(ok)
    if len(idx) < 2:
        return False
    served = np.maximum.accumulate(c.finish[idx])[:-1]
    arrived = c.A[idx[1:]]
    return bool(((arrived >= served) & (arrived > settled)).any())


def window_packets(config: Config, t: Transmission, s: NicSetting, fraction: float) -> int:
    """The packets of `t` in a window of `fraction`: at least MIN_WINDOW_PACKETS, and for
    a watermark consumer WATERMARK_BATCHES watermarks (or all of them), so that a short
    transmission beside long ones is not extrapolated from a packet or two, nor from a
    window its watermark never fills (every packet stranded). An onoff window of a burst or
    more holds whole bursts and the first packet of the next, so it has a pause for every
    burst (ending on a burst's last packet, 10 bursts had 9 pauses: time-driven counts
    were 10 % low)."""
    least = max(MIN_WINDOW_PACKETS, WATERMARK_BATCHES * (s.watermark or 0)
                if s.mode == "watermark" else 0)
    n = max(round(t.packets * fraction), min(t.packets, least))
    per_burst = onoff_bursts(t, config.nic_of(t))[1] if t.arrival == "onoff" else 0
    if 0 < per_burst <= n < t.packets:  # (a window inside one burst stays as it is)
        n = math.ceil(n / per_burst) * per_burst + 1
    return min(n, t.packets)


def _wake_share(config: Config, s: NicSetting, t: Transmission) -> float:
    """The share of `t`'s span between its wake-ups, for `window_fraction` — or, for onoff
    arrivals, ONOFF_CYCLES / WAKE_UPS of a burst cycle's share if more: a window holds at
    least that many bursts and pauses."""
    share = _wake_interval(s, t) * t.rate / t.packets
    if t.arrival == "onoff":
        cycle = onoff_bursts(t, config.nic_of(t))[2]
        share = max(share, cycle * t.rate / t.packets * ONOFF_CYCLES / WAKE_UPS)
    return share


def _wake_interval(s: NicSetting, t: Transmission) -> float:
    """About how long a consumer sleeps between wake-ups (0: it wakes per packet)."""
    if s.mode == "passive_wait":
        return s.poll_interval or 0.0
    if s.mode == "watermark":
        fill = (s.watermark or 1) / t.rate
        return min(fill, s.watermark_timeout) if s.watermark_timeout else fill
    return 0.0


def _scaled_counts(parts: Sequence[int], total: int) -> list[int]:
    """Scale counts so they sum to `total` exactly (largest remainder)."""
    n = sum(parts)
    exact = [p * total / n for p in parts]
    out = [math.floor(x) for x in exact]
    order = sorted(range(len(parts)), key=lambda i: exact[i] - out[i], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def after_arrivals(config: Config, t: Transmission, m: Metrics, seed: int) -> float:
    """s from `t`'s last arrival to its last delivery in the DES run `m` of seed `seed`:
    its duration less the span of the arrivals it drew, extrapolated as `_metrics` does."""
    a = arrival_times(t, config.nic_of(t), seed, config.transmissions.index(t),
                      m.window_packets)
    return m.duration_s - full_span(t, config.nic_of(t), float(a[-1] - a[0]), len(a))


def _metrics(config: Config, t: Transmission, c: Consumer, start_up: tuple[float, float],
             alone: bool = False) -> Metrics:
    """Totals for the whole transmission. From a window, steady-state quantities scale by
    N/window: delivered and dropped packets, interrupts, CPU, and the arrival span in the
    duration; end effects do not: the stranded packets (those after the last wake-up),
    the tail from the last arrival to the last delivery — its duration, the packets
    delivered in it and, where the core marked the consumer's counters at its last
    arrival (`at_last`), its interrupts and CPU: in receive livelock the whole ring and
    backlog are served there — and the packets dropped in the start-up (`_start_up`:
    e.g. the ring a first tick finds overfull) happen once; the drop rate of as long a
    stretch after it stands in for the start-up's own stretch, which the window shortens
    like the rest."""
    host, nic = config.host_of(t), config.nic_of(t)
    ok = np.isfinite(c.finish)
    delivered = int(ok.sum())
    stranded = c.n - delivered - c.dropped
    last = float(c.finish[ok].max()) if delivered else c.AL[-1]
    scale = t.packets / c.n
    span = c.AL[-1] - c.AL[0]
    full = full_span(t, nic, span, c.n)
    kept = c.n - stranded  # (the stranded packets are the window's last arrivals)
    if c.n < t.packets and stranded and kept >= 2:
        # the arrivals up to the last one not stranded, as many in the whole transmission
        # as stranded in the window, and the tail after it: an onoff window's extra packet,
        # stranded after a whole pause, had taken that pause off the duration (2.6 %)
        end = c.AL[kept - 1]
        duration_s = (full_span(t, nic, end - c.AL[0], kept, t.packets - stranded)
                      + max(last - end, 0.0))
    else:
        duration_s = max(last - c.AL[0], 0.0) + full - span
    # what scales: the arrivals that were not stranded (those happen once)
    steady = (t.packets - stranded) / max(c.n - stranded, 1)
    # the tail after the last arrival comes once where the queue never emptied (livelock,
    # a ring still filling); elsewhere it is one drain of many, scaled with the rest
    emptied = c.n < t.packets and _emptied(c, ok, start_up[1])
    split = c.at_last is not None and c.n < t.packets and not emptied  # (tail once)
    tail = int((c.finish[ok] > c.AL[-1]).sum()) if split else 0  # delivered once
    lost = c.dropped * steady
    if delivered - tail < c.dropped:  # mostly lost (livelock): scale the fewer deliveries
        lost = t.packets - stranded - tail - (delivered - tail) * steady
    elif c.dropped and steady > 1 and t.arrival != "onoff":  # (onoff: every burst is like
        gone = _dropped(c, ok)  # the first, and a window of whole bursts scales plainly)
        first, end = start_up
        d1, d2 = (int(gone[:np.searchsorted(c.A, first + k * (end - first), "right")].sum())
                  for k in (1, 2))
        lost = max(d1 + (c.dropped - d1) * steady + (d2 - d1) * (steady - 1), 0.0)
        late = np.flatnonzero(gone & (end < c.A))
        if alone and len(late) > FILL_DROPS and not emptied:
            # alone on its core (no phases) and never emptied since the start-up: the ring
            # filled at the first drop after it; the window's drops stand, and the packets
            # beyond it arrive in the regime after that drop (a core just past capacity
            # fills a ring over a fifth of the window: scaled whole, its drops were 19 %
            # low)
            rate = (len(late) - 1) / max(c.n - int(late[0]) - 1, 1)
            lost = c.dropped + rate * (t.packets - c.n)
    if delivered + c.dropped:
        lost = min(lost, t.packets - stranded)
        d, dropped = _scaled_counts([t.packets - stranded - lost, lost], t.packets - stranded)
    else:
        d, dropped, stranded = 0, 0, t.packets
    # the work before the last arrival scales with the arrivals; the tail's comes once
    per = steady if c.n > stranded else scale
    # (passive_wait's wake-ups are timer ticks: they scale with the time, which for onoff
    # is not the packets' share — a window of whole bursts has a pause per burst, the
    # whole transmission one fewer)
    ticks = full / span if c.mode == "passive_wait" and span > 0 else per
    before = (c.at_last if c.at_last is not None and split and c.n > stranded else
              (c.interrupts, c.cpu, c.empty))  # (all of it scales)
    interrupts, busy, empty = (b * k + (total - b) for b, total, k in zip(
        before, (c.interrupts, c.cpu, c.empty), (ticks, per, ticks), strict=True))
    # (one core: a consumer's work fits in its span; scaled, it can exceed it by a hair)
    # (a busy-poller's own work here; `_spin` gives it its share of its NIC's core)
    cpu_s = min(busy, duration_s) if c.n < t.packets else busy
    latency = c.finish[ok] - c.A[ok]
    bytes_delivered = float(d * t.packet_size)
    return Metrics(
        transmission=t.id, engine="des", setting=c.setting,
        packets_offered=t.packets, packets_delivered=d, packets_dropped=dropped,
        packets_stranded=stranded, bytes_delivered=bytes_delivered, duration_s=duration_s,
        offered_bps=8.0 * t.packet_size * t.rate,
        throughput_bps=8.0 * bytes_delivered / duration_s if duration_s > 0 else 0.0,
        interrupts=interrupts, empty_wakeups=empty,
        cpu_busy_s=cpu_s, cpu_util=cpu_s / duration_s if duration_s > 0 else 0.0,
        latency_mean_s=float(latency.mean()) if delivered else 0.0,
        latency_p99_s=float(np.percentile(latency, 99)) if delivered else 0.0,
        energy_j=nic.idle_power(host) * duration_s + host.power.core_busy * cpu_s,
        window_packets=c.n, extrapolated=c.n < t.packets,
    )
