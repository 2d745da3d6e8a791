"""The DES core's own loop (`Core._advance`), compiled, for cores shared by several
transmissions.

Between two SimPy events a shared core runs its interrupt and packet work event by event:
an active_wait consumer's interrupt per arrival and its backlog, a busy_poll consumer's
request when it notices a packet (half a poll check after it arrives), a woken batched
consumer's (passive_wait, watermark) requests until its ring is empty; interrupts first
(FIFO, preempting), then packets, one per request, each consumer asking again behind the
requests made meanwhile (round-robin per packet). `core_loop` runs the same steps as
`Core._advance` — the same events in the same order, the same float operations — on
arrays, so the results are the same to the bit (tests/simulator/test_des_engine.py runs
both); only the interpreter's cost per event is gone. What needs SimPy or NumPy it hands
back: a batched consumer going to sleep (it schedules a wake-up: `Core._sleep`), and a
batched drain with the core to itself (`Core._drain`) — a guard: `Core._advance` calls it
on an all-batched core only while two consumers or more take turns, and their requests
grow fewer only through a consumer going to sleep, which ends the call first.

Per consumer i of the core, in the core's order: its arrivals, ring (`acc`: accepted
packets in order) and delivery times are `A`, `acc`, `finish` at offset `off[i]` (the
consumers' own arrays are views into them); `kind` (BATCHED, POLL, ACTIVE), `n`, `R`,
`B`, `w`, `ti`, `notice` its packets, ring and backlog slots, costs per packet and per
interrupt, and noticing delay; `st[i]` (columns NXT … STATE) and `cpu[i]` its state,
updated in place. The queues are circular buffers: interrupts `iq[:, (consumer, kind)]`,
packet requests `lq[:, (consumer, packet or −1)]`; `regs` and `times` hold the rest of
the core's state (IRQ_C … WHO, NOW … LO_END), updated in place too."""

from __future__ import annotations

import numpy as np

from nictune.simulator.compiled import compiled

BATCHED, POLL, ACTIVE = 0, 1, 2  # consumer kinds
AW = 1  # the interrupt of an active_wait packet (as in des.py; 0: a wake-up)
DRAIN = 2  # a consumer's state once woken (as in des.py)
# columns of `st`: a consumer's next arrival, packets accepted and taken, dropped, whether
# it has asked for the core (busy_poll), interrupts, empty wake-ups, backlog, state
NXT, N_ACC, N_TAKEN, DROPPED, REQUESTED, INTERRUPTS, EMPTY, BACKLOG, STATE = (
    0, 1, 2, 3, 4, 5, 6, 7, 8)
# `regs`: the interrupt in service (consumer, kind, packet), the packet in service
# (consumer, packet), the queues' heads and lengths, why it stopped and for whom, and how
# many events it processed
IRQ_C, IRQ_KIND, IRQ_IDX, LO_C, LO_IDX, IH, IL, LH, LL, WHY, WHO, EVENTS = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
NOW, HORIZON, IRQ_END, LO_END = 0, 1, 2, 3  # `times`
RAN, SLEEPS, DRAINS = 0, 1, 2  # why `core_loop` stopped: the horizon, or what it hands back


@compiled
def _admit(i: int, t: float, A: np.ndarray, acc: np.ndarray, off: np.ndarray, n: np.ndarray,
           R: np.ndarray, st: np.ndarray) -> int:
    """`Consumer.admit`: arrivals up to `t` enter the ring while it has room, the rest are
    dropped; returns how many entered."""
    o, nxt = off[i], st[i, NXT]
    if nxt >= n[i] or A[o + nxt] > t:
        return 0
    lo, hi = nxt, n[i]
    while lo < hi:  # bisect_right
        mid = (lo + hi) // 2
        if t < A[o + mid]:
            hi = mid
        else:
            lo = mid + 1
    m = lo - nxt
    room = max(0, R[i] - (st[i, N_ACC] - st[i, N_TAKEN]))
    a = min(m, room)
    for j in range(a):
        acc[o + st[i, N_ACC] + j] = nxt + j
    st[i, N_ACC] += a
    st[i, DROPPED] += m - a
    st[i, NXT] = lo
    return a


@compiled
def _take(i: int, acc: np.ndarray, off: np.ndarray, st: np.ndarray) -> int:
    """`Consumer.take`: the ring's first packet leaves it."""
    idx = acc[off[i] + st[i, N_TAKEN]]
    st[i, N_TAKEN] += 1
    return idx


@compiled
def core_loop(A: np.ndarray, acc: np.ndarray, finish: np.ndarray, off: np.ndarray,
              kind: np.ndarray, n: np.ndarray, R: np.ndarray, B: np.ndarray, w: np.ndarray,
              ti: np.ndarray, notice: np.ndarray, st: np.ndarray, cpu: np.ndarray,
              iq: np.ndarray, lq: np.ndarray, regs: np.ndarray, times: np.ndarray,
              batched: bool) -> None:
    """`Core._advance` from times[NOW] to times[HORIZON]: `Core._dispatch`, then event
    after event (an interrupt ends, a packet ends, a data-driven consumer's arrival or
    notice), each followed by `Core._dispatch`, until the next event lies past the
    horizon or a batched consumer is to be handed back (regs[WHY]: RAN, SLEEPS or
    DRAINS; regs[WHO]: which; regs[EVENTS]: how many events it processed). `batched`:
    every consumer of the core is batched (a drain with the core to itself is
    `Core._drain`'s)."""
    k, n_iq, n_lq = len(off), len(iq), len(lq)
    irq_c, irq_kind, irq_idx = regs[IRQ_C], regs[IRQ_KIND], regs[IRQ_IDX]
    lo_c, lo_idx = regs[LO_C], regs[LO_IDX]
    ih, il, lh, ll = regs[IH], regs[IL], regs[LH], regs[LL]
    t, horizon, irq_end, lo_end = times[NOW], times[HORIZON], times[IRQ_END], times[LO_END]
    why, who, events = RAN, -1, 0
    while True:
        # `Core._dispatch`: interrupt work if any is queued, else packet work if requested
        if irq_c < 0 and il > 0:
            irq_c, irq_kind = iq[ih, 0], iq[ih, 1]
            ih, il = (ih + 1) % n_iq, il - 1
            irq_idx = _take(irq_c, acc, off, st) if irq_kind == AW else -1
            irq_end = t + ti[irq_c]
            if lo_c >= 0:
                lo_end += ti[irq_c]  # preempted: resumes after the interrupt
        elif irq_c < 0 and lo_c < 0:
            while ll > 0:
                c, idx = lq[lh, 0], lq[lh, 1]
                lh, ll = (lh + 1) % n_lq, ll - 1
                if kind[c] == ACTIVE:
                    st[c, BACKLOG] -= 1
                    lo_c, lo_idx, lo_end = c, idx, t + w[c]
                    break
                _admit(c, t, A, acc, off, n, R, st)
                o = off[c]
                if kind[c] == POLL:
                    if (st[c, N_ACC] > st[c, N_TAKEN]
                            and A[o + acc[o + st[c, N_TAKEN]]] + notice[c] <= t):
                        lo_c, lo_idx, lo_end = c, _take(c, acc, off, st), t + w[c]
                        break
                    st[c, REQUESTED] = 0
                    continue
                if st[c, N_ACC] == st[c, N_TAKEN]:
                    why, who = SLEEPS, c
                    break
                if batched and ll == 0:
                    why, who = DRAINS, c
                    break
                lo_c, lo_idx, lo_end = c, _take(c, acc, off, st), t + w[c]
                break
            if why != RAN:
                break
        # the next event
        te, what, c = irq_end, 0, -1
        if lo_end < te:
            te, what = lo_end, 1
        for d in range(k):  # each data-driven consumer's next arrival or notice
            o = off[d]
            if kind[d] == ACTIVE:
                if st[d, NXT] >= n[d]:
                    continue
                tc = A[o + st[d, NXT]]
            elif kind[d] == POLL and st[d, REQUESTED] == 0:
                if st[d, N_ACC] > st[d, N_TAKEN]:
                    tc = A[o + acc[o + st[d, N_TAKEN]]] + notice[d]
                elif st[d, NXT] < n[d]:
                    tc = A[o + st[d, NXT]] + notice[d]
                else:
                    continue
            else:
                continue
            if tc < t:
                tc = t
            if tc < te:
                te, what, c = tc, 2, d
        if te > horizon or te == np.inf:
            if horizon < np.inf and t < horizon:
                t = horizon
            break
        t = te
        events += 1
        if what == 0:  # `Core._irq_done`
            c = irq_c
            st[c, INTERRUPTS] += 1
            cpu[c] += ti[c]
            if irq_kind == AW:
                if st[c, BACKLOG] >= B[c]:
                    st[c, DROPPED] += 1
                else:
                    st[c, BACKLOG] += 1
                    j = (lh + ll) % n_lq
                    lq[j, 0], lq[j, 1], ll = c, irq_idx, ll + 1
                irq_c, irq_kind, irq_idx, irq_end = -1, -1, -1, np.inf
            else:
                irq_c, irq_kind, irq_idx, irq_end = -1, -1, -1, np.inf
                st[c, STATE] = DRAIN
                _admit(c, t, A, acc, off, n, R, st)
                if st[c, N_ACC] > st[c, N_TAKEN]:
                    j = (lh + ll) % n_lq
                    lq[j, 0], lq[j, 1], ll = c, -1, ll + 1
                else:
                    st[c, EMPTY] += 1
                    why, who = SLEEPS, c
                    break
        elif what == 1:  # `Core._lo_done`
            c = lo_c
            finish[off[c] + lo_idx] = t
            cpu[c] += w[c]
            lo_c, lo_idx, lo_end = -1, -1, np.inf
            if kind[c] != ACTIVE:  # asks for its next packet, behind earlier requests
                j = (lh + ll) % n_lq
                lq[j, 0], lq[j, 1], ll = c, -1, ll + 1
        elif kind[c] == ACTIVE:  # arrivals, an interrupt each
            for _ in range(_admit(c, t, A, acc, off, n, R, st)):
                j = (ih + il) % n_iq
                iq[j, 0], iq[j, 1], il = c, AW, il + 1
        else:  # a busy_poll consumer notices a packet
            st[c, REQUESTED] = 1
            j = (lh + ll) % n_lq
            lq[j, 0], lq[j, 1], ll = c, -1, ll + 1
    regs[IRQ_C], regs[IRQ_KIND], regs[IRQ_IDX] = irq_c, irq_kind, irq_idx
    regs[LO_C], regs[LO_IDX] = lo_c, lo_idx
    regs[IH], regs[IL], regs[LH], regs[LL] = ih, il, lh, ll
    regs[WHY], regs[WHO], regs[EVENTS] = why, who, events
    times[NOW], times[IRQ_END], times[LO_END] = t, irq_end, lo_end
