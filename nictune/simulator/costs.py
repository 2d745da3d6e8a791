"""Shared-host cost factors both engines use (docs/model.md, "Work per packet").

The memory-bus factor couples all transmissions of one host: m = max(1, D / (sustainable ·
bandwidth)), D = Σ λ·s·traffic_per_byte over the host's transmissions that are simulated
together. Placement scales the per-byte cost. Work per packet w = Tp + s·Tb·p·m.
A busy-polled NIC's transmissions share the core that spins for it (`pollers_cpu`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from nictune.model import PLACEMENT_COST, Config, Transmission


def memory_factors(config: Config, transmissions: Iterable[Transmission]) -> dict[str, float]:
    """Memory-bus factor m per transmission id (static, from offered rates)."""
    items = list(transmissions)
    demand: dict[str, float] = {}
    for t in items:
        host = config.host_of(t)
        demand[host.name] = demand.get(host.name, 0.0) + (
            t.rate * t.packet_size * host.memory.traffic_per_byte)
    out = {}
    for t in items:
        mem = config.host_of(t).memory
        out[t.id] = max(1.0, demand[config.host_of(t).name] / (
            mem.sustainable * mem.bandwidth))
    return out


def work_per_packet(config: Config, t: Transmission, placement: str, memory: float) -> float:
    """w = per_packet + packet_size · per_byte · placement factor · memory factor (s)."""
    c = config.host_of(t).costs
    return c.per_packet + t.packet_size * c.per_byte * PLACEMENT_COST[placement] * memory


def pollers_cpu(start: np.ndarray, end: np.ndarray, work: np.ndarray, same: np.ndarray
                ) -> np.ndarray:
    """CPU seconds of one host's transmissions where a busy-polled NIC's transmissions
    share the one core that spins for it (arrays (..., m): first arrival, last delivery,
    own work; `same` (..., m, m): both busy-poll on one NIC on one IRQ core, a
    transmission with itself included).

    A busy-polled NIC keeps one core busy from its first transmission's first arrival to
    its last one's last delivery. Its time is cut where their spans start or end; in each
    piece, what the work there (each transmission's spread evenly over its span) leaves
    idle is split between the transmissions there. Each takes its own work and its share
    of that: alone, its whole span. The NICs of a core are charged a core each, as a
    poller needs one to itself (the model's cores share the work as if the spinning
    yielded, not the time slices of spinners on one core). The others keep `work`."""
    s = np.broadcast_to(start, end.shape)
    edges = np.sort(np.concatenate([s, end], axis=-1), axis=-1)
    lo, hi = edges[..., :-1], edges[..., 1:]  # (..., K) pieces
    there = ((s[..., :, None] <= lo[..., None, :] + 1e-12)
             & (end[..., :, None] >= hi[..., None, :] - 1e-12)).astype(float)  # (..., m, K)
    rate = work / np.maximum(end - s, 1e-12)  # each one's work per second
    known = same & np.isfinite(rate)[..., None, :]  # (a NaN stays in its own row)
    busy = np.where(known, rate[..., None, :], 0.0) @ there
    crowd = same.astype(float) @ there
    idle = np.clip(1.0 - busy, 0.0, None) * (hi - lo)[..., None, :]
    spin = np.where(there > 0, idle / np.maximum(crowd, 1.0), 0.0).sum(axis=-1)
    poll = np.diagonal(same, axis1=-2, axis2=-1)
    return np.where(poll, np.minimum(work + spin, end - s), work)
