"""Shared-host cost factors both engines use (docs/model.md, "Work per packet").

The memory-bus factor couples all transmissions of one host: m = max(1, D / (sustainable ·
bandwidth)), D = Σ λ·s·traffic_per_byte over the host's transmissions that are simulated
together. Placement scales the per-byte cost. Work per packet w = Tp + s·Tb·p·m.
"""

from __future__ import annotations

from collections.abc import Iterable

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
