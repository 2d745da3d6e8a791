"""The reference guard: a host's plan that the DES predicts worse than today is not kept.

The search runs on the fast engine; `--verify des` re-simulates the plan with the DES.
Where the two disagree (shared cores, docs/engines.md) the fast engine can choose a
setting that the DES predicts slower than the host's default, losing more packets, or
with a longer 99th-percentile latency than the default beyond the transmission's
`max_latency_p99`. For such a host the guard tries the next settings of its archive in
the preference's order (`ranked`), each checked with the DES, and keeps the first the
DES does not predict worse than the default; after `TRIES` candidates, the default
itself. Hosts never interact, so each host is checked and replaced on its own; the DES
runs of one round go through the evaluator's `map` together.
"""

from __future__ import annotations

import numpy as np

from nictune.model import Transmission
from nictune.optimizer.archive import HostArchive
from nictune.optimizer.objectives import CPU_SLACK, FEASIBLE, NOISE, pick
from nictune.optimizer.rings import default_rings
from nictune.optimizer.search import Search
from nictune.simulator.metrics import Metrics
from nictune.units import format_bitrate, format_duration

TRIES = 4  # archive candidates per host the DES checks before falling back to the default
REGRESSION = 0.01  # a DES throughput loss vs the default above this is "worse"
LOSS = 1e-3  # lost packets (dropped + stranded) above the default's by this share of all


def worse_than_default(t: Transmission, plan: Metrics, default: Metrics) -> list[str]:
    """Why the DES predicts `plan` worse than `default` for `t` (empty: it does not).

    Slower by more than `REGRESSION` (below, the DES's window extrapolation is noise on
    long transfers); more than `LOSS` of the offered packets lost beyond the default's
    losses; a 99th-percentile latency above both `max_latency_p99` and the default's.
    """
    out = []
    if plan.throughput_bps < default.throughput_bps * (1.0 - REGRESSION):
        out.append(f"{t.id} {format_bitrate(plan.throughput_bps)} < default "
                   f"{format_bitrate(default.throughput_bps)}")
    offered = max(plan.packets_offered, 1)
    lost, was = ((m.packets_dropped + m.packets_stranded) / offered for m in (plan, default))
    if lost > was + LOSS:
        out.append(f"{t.id} loses {100 * lost:.2f} % of its packets (default {100 * was:.2f} %)")
    bound = t.max_latency_p99
    if bound is not None and plan.latency_p99_s > max(bound, default.latency_p99_s):
        out.append(f"{t.id} p99 latency {format_duration(plan.latency_p99_s, 4)} > "
                   f"max_latency_p99 {format_duration(bound)}")
    return out


def ranked(archive: HostArchive, prefer: str, k: int) -> list[int]:
    """The archive's first `k` rows in the order `prefer` picks them (the first is
    `archive.best(prefer)`), among rows as eligible as that one: no more violation, and
    at least as fast as the default for every transmission if it is. After the first,
    only rows worth more than the default: faster by more than `REGRESSION` (what the DES
    check tells apart), or no more interrupts and at most `CPU_SLACK` times its CPU — a
    fallback that buys 0.8 % of throughput with 20× the interrupts is worse than keeping
    the default (rack.yaml, seed 2: compute-1 +1 679 % interrupts)."""
    first = archive.best(prefer)
    ok = (archive.violation <= max(FEASIBLE, archive.violation[first])) & (
        archive.worst >= min(1.0 - NOISE, archive.worst[first]))
    v = archive.values
    ok &= (v[:, 0] >= 1.0 + REGRESSION) | ((v[:, 1] <= 1.0) & (v[:, 2] <= CPU_SLACK))
    left = np.setdiff1d(np.flatnonzero(ok), [first])
    out = [first]
    while len(left) and len(out) < k:
        i = pick(archive.values[left], archive.violation[left], prefer, archive.worst[left])
        out.append(int(left[i]))
        left = np.delete(left, i)
    return out


def guard(search: Search, prefer: str, engine: str, default: list[Metrics]
          ) -> tuple[list[float], list[list[str]]]:
    """The plan's genes after the guard, and per transmission the guard's notes.

    `default`: the reference engine's metrics of the default settings (config order).
    """
    enc, ev = search.encoding, search.evaluate
    assert search.state is not None
    orders = [ranked(a, prefer, TRIES + 1) for a in search.state.archives]
    base = np.array(enc.default_genes())
    tried = [0] * len(orders)  # index into orders[h]; len(orders[h]): the default
    why: list[list[str]] = [[] for _ in orders]
    notes: list[list[str]] = [[] for _ in enc.transmissions]
    pending = set(range(len(orders)))
    while True:
        genes = _compose(search, orders, tried, base)
        (metrics,) = ev.run([enc.settings(genes)], engine)
        for h in sorted(pending):
            cols = enc.host_transmissions[h]
            reasons = [r for j in cols for r in worse_than_default(
                enc.transmissions[j], metrics[j], default[j])]
            if reasons and tried[h] < len(orders[h]):
                why[h].append(f"{_describe(search, h, genes)}: {'; '.join(reasons)}")
                tried[h] += 1
                continue
            pending.discard(h)
            if tried[h]:
                taken = ("the default" if tried[h] == len(orders[h]) else
                         f"candidate {tried[h] + 1} of its archive")
                note = (f"des_guard: the DES predicts the first choice for {enc.hosts[h]} "
                        f"worse than the default ({why[h][0]}); {len(why[h])} rejected, the "
                        f"plan takes {taken} ({_describe(search, h, genes)})")
                for j in cols:
                    notes[j].append(note)
        if not pending:
            return genes.tolist(), notes


def _compose(search: Search, orders: list[list[int]], tried: list[int],
             base: np.ndarray) -> np.ndarray:
    """Genes with every host's block at its current candidate (or the default's), rings
    kept at their defaults where the model has no use for others (`default_rings`)."""
    assert search.state is not None
    genes = base.copy()
    for archive, cols, order, k in zip(search.state.archives, search.encoding.host_genes,
                                       orders, tried, strict=True):
        if k < len(order):
            genes[cols] = archive.genes[order[k]]
    return np.array(default_rings(search, genes.tolist()))


def _describe(search: Search, h: int, genes: np.ndarray) -> str:
    """Host h's NIC settings in `genes`, as the summary writes them."""
    enc = search.encoding
    return ", ".join(f"{s.nic}: {st.describe()}" for s, st in zip(
        enc.spaces, enc.nic_settings(genes), strict=True) if s.host == enc.hosts[h])
