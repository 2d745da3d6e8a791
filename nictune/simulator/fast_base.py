"""What the fast engine's parts share: the per-transmission inputs (`Workload`), one subset
of (setting, transmission) elements with its costs (`Ctx`) and a mode's result (`Mode`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nictune.model import ARRIVALS, Config, Transmission
from nictune.simulator.arrivals import onoff_bursts
from nictune.simulator.costs import memory_factors
from nictune.simulator.fast_wakes import Windows

CBR, POISSON, ONOFF = (ARRIVALS.index(a) for a in ("cbr", "poisson", "onoff"))


TINY = 1e-12
_LAGUERRE = np.polynomial.laguerre.laggauss(3)  # nodes and weights of an exponential


def rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_j a[p, i, j]·b[p, j], each row summed alone: the same bits whatever the number
    of rows p (einsum's paths depend on the shapes; the cbr cycles' thresholds turned a
    last-bit difference between a population of 1 and of 2 into 8 % more wake-ups)."""
    return (a * b[:, None, :]).sum(axis=-1)


def rowsum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_j a[p, i, j]·b[p, i, j], each row summed alone (see `rowdot`)."""
    return (a * b).sum(axis=-1)


@dataclass(frozen=True)
class Workload:
    """Per-transmission inputs as arrays of shape (T,) (static: no setting in here)."""

    n: np.ndarray  # packets
    size: np.ndarray  # bytes per packet
    rate: np.ndarray  # packets/s that arrive on average (onoff: a burst per cycle)
    offered: np.ndarray  # packets/s the config asks (= rate: onoff keeps the mean rate)
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
    nic: np.ndarray  # NIC index
    ti: np.ndarray
    tp: np.ndarray
    tb_mem: np.ndarray  # per_byte · memory factor
    tc: np.ndarray
    backlog: np.ndarray
    nic_idle: np.ndarray
    core_busy: np.ndarray
    groups: tuple[np.ndarray, ...]  # column indices of each host with several transmissions
    windows: Windows  # the arrivals of those hosts' windows (`fast_wakes`)

    @classmethod
    def build(cls, config: Config, transmissions: list[Transmission], seed: int = 0
              ) -> Workload:
        """The inputs of `transmissions`; `seed` draws the Poisson arrivals of the shared
        hosts' windows, as the DES's."""
        mem = memory_factors(config, transmissions)
        hosts = {name: i for i, name in enumerate(config.hosts)}
        nics = {name: i for i, name in enumerate(config.nics)}
        rows = []
        for t in transmissions:
            host, nic = config.host_of(t), config.nic_of(t)
            n, rate, arrival, local = t.packets, t.rate, t.arrival, t.rate
            if arrival == "onoff":
                local, per_burst, cycle = onoff_bursts(t, nic)  # as the DES's arrivals
                if per_burst >= n:  # all in one burst: evenly spaced at the burst rate
                    arrival = "cbr"
            if arrival == "onoff":  # (per_burst / cycle is the config's rate)
                rate = per_burst / cycle
                bursts = math.ceil(n / per_burst)
                last = n - (bursts - 1) * per_burst
                span = (bursts - 1) * cycle + (last - 1) / local
                on, off = (per_burst - 1) / local, cycle - (per_burst - 1) / local
            else:
                per_burst, bursts = n, 1
                span, on, off, cycle = (n - 1) / local, (n - 1) / local, 0.0, np.inf
            c = host.costs
            if arrival == "cbr":  # (an onoff transmission all in one burst: at its rate)
                rate = local
            rows.append((n, t.packet_size, rate, t.rate, local, span, bursts, per_burst, on,
                         off, cycle,
                         ARRIVALS.index(arrival), t.start, hosts[host.name], nics[t.nic],
                         c.irq,
                         c.per_packet, c.per_byte * mem[t.id], c.poll_check,
                         host.backlog_slots, nic.idle_power(host), host.power.core_busy))
        cols = [np.array(c, dtype=float) for c in zip(*rows, strict=True)]
        names = [f for f in cls.__dataclass_fields__ if f not in ("groups", "windows")]
        values = dict(zip(names, cols, strict=True))
        values["arrival"] = values["arrival"].astype(np.int64)
        values["host"] = values["host"].astype(np.int64)
        values["nic"] = values["nic"].astype(np.int64)
        groups = tuple(g for g in (np.flatnonzero(values["host"] == h)
                                   for h in np.unique(values["host"])) if g.size > 1)
        return cls(groups=groups, windows=Windows(config, transmissions, groups, seed),
                   **values)


COUNTS_FOLLOWED, ALL_FOLLOWED = 1.0, 2.0  # values of `Mode.followed`


@dataclass
class Mode:
    """One mode's closed-form result for its elements (1-D arrays)."""

    interrupts: np.ndarray
    empty: np.ndarray
    delivered: np.ndarray
    stranded: np.ndarray
    duration: np.ndarray
    lat_mean: np.ndarray
    lat_p99: np.ndarray
    # COUNTS_FOLLOWED: wake-ups, drops, the end and the waits followed burst by burst;
    # ALL_FOLLOWED: also what is left below a watermark, kept only where the ring holds
    # every packet or the mean load is below the core's (a saturated core keeps them)
    followed: np.ndarray | float = 0.0


@dataclass
class Ctx:
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
    def build(cls, wl: Workload, col: np.ndarray, ws: np.ndarray, ring: np.ndarray) -> Ctx:
        arrival = wl.arrival[col]
        return cls(wl=wl, col=col, lam=wl.local[col], n=wl.n[col], span=wl.span[col],
                   ti=wl.ti[col], ws=ws, ring=ring, poisson=arrival == POISSON,
                   onoff=arrival == ONOFF)

    def c(self, name: str) -> np.ndarray:
        return getattr(self.wl, name)[self.col]

    def time_of(self, idx: np.ndarray) -> np.ndarray:
        """Arrival time of packet `idx` (1-based, fluid) after the first arrival; `idx`
        has a row per element, (e,) or (e, k)."""
        i = np.clip(idx - 1.0, 0.0, None)
        per_row = (-1,) + (1,) * (i.ndim - 1)
        lam = self.lam.reshape(per_row)
        out = i / lam
        oo = np.flatnonzero(self.onoff)  # onoff: whole bursts, then the burst rate
        if oo.size:
            col, i = self.col[oo], i[oo]
            pb = self.wl.per_burst[col].reshape(per_row)
            bursts = np.floor(i / pb + 1e-9)
            out[oo] = bursts * self.wl.cycle[col].reshape(per_row) + (i - bursts * pb) / lam[oo]
        return out

    def mean_arrival(self, count: np.ndarray) -> np.ndarray:
        """The mean arrival time of packets 1 to `count` after packet 1 (onoff: from a
        burst's start, whole bursts of `per_burst` then the rest)."""
        out = (count - 1.0) / (2.0 * self.lam)
        oo = np.flatnonzero(self.onoff)
        if oo.size:
            col, k = self.col[oo], np.maximum(count[oo], 1.0)
            pb, cycle, g = self.wl.per_burst[col], self.wl.cycle[col], 1.0 / self.lam[oo]
            whole = np.floor(k / pb + 1e-9)
            rest = k - whole * pb
            total = (pb * cycle * whole * (whole - 1.0) / 2.0 + whole * pb * (pb - 1.0) / 2.0 * g
                     + rest * whole * cycle + rest * (rest - 1.0) / 2.0 * g)
            out[oo] = total / k
        return out


def random_wait(mean: np.ndarray, busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A random wait before each drain (`fast_shared.mix_waits`): none with probability
    1 − `busy`, else about exponential with mean `mean` / `busy`. Returns (weights, waits),
    arrays (4, e): no wait, then the exponential's three Gauss–Laguerre nodes (all the
    weight on no wait where `busy` is 0)."""
    nodes, weights = _LAGUERRE
    given = np.divide(mean, busy, out=np.zeros(mean.shape), where=busy > 0)
    return (np.vstack([1.0 - busy, busy * weights[:, None]]),
            np.vstack([np.zeros(mean.shape), given * nodes[:, None]]))
