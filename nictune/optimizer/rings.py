"""Rings the model has no use for stay at their default size.

In the model a ring costs nothing until it overflows, so wherever none does the search's
ring size is a random draw: plans shrank 4 096-slot rings to 16 for no predicted gain.
That leaves no room for what the fast engine misses (`fidelity_plans.py`: half of the
first choices the DES rejected lost packets in such rings), and `ethtool -G` makes many
drivers reallocate their rings, stopping traffic for a moment, so a ring change that buys
nothing is not free on a host. A plan's rings therefore go back to each NIC's default
wherever the search's engine (fast by default) predicts the same with them, within 0.1 %
(docs/optimize.md, "Rings the model has no use for").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nictune.optimizer.encoding import GENES_PER_NIC, NicSpace
from nictune.optimizer.objectives import NOISE, TIE
from nictune.optimizer.search import Search

# per transmission, the predictions that must stay the same (throughput: and not fall)
SAME = ("throughput_bps", "interrupts", "cpu_busy_s", "latency_p99_s", "packets_dropped",
        "packets_stranded", "energy_j")


def first_choice(search: Search, prefer: str) -> list[float]:
    """The genes of the search's pick for `prefer` before the DES check (`guard.py`): its
    composite (`Search.composite`) with the rings it has no use for at their defaults."""
    return default_rings(search, search.composite(prefer))


def default_rings(search: Search, genes: list[float]) -> list[float]:
    """`genes` with each NIC's ring at its default size where the search's engine
    predicts the same for every transmission of its host as with `genes` — throughput no
    lower (beyond float noise), the rest within `TIE` (0.1 %). NIC by NIC in each host's
    order, the k-th NICs of all hosts in one evaluation, each round compared with `genes`
    itself (so the rounds cannot add up past those bounds)."""
    enc = search.encoding
    was = {key: v[0] for key, v in search.evaluate(np.array([genes])).items()}
    out = np.array(genes, dtype=float)
    order = [[i for i, s in enumerate(enc.spaces) if s.host == h] for h in enc.hosts]
    thr = "throughput_bps"
    for k in range(max(map(len, order))):
        snapped = out.copy()
        for nics in order:
            if k < len(nics):
                _default_ring(enc.spaces[nics[k]], snapped, nics[k])
        now = {key: v[0] for key, v in search.evaluate(snapped[None, :]).items()}
        for gcols, tcols in zip(enc.host_genes, enc.host_transmissions, strict=True):
            if np.all(now[thr][tcols] >= was[thr][tcols] * (1.0 - NOISE)) and all(
                    np.allclose(now[key][tcols], was[key][tcols], rtol=TIE, atol=0.0)
                    for key in SAME if key in now):
                out[gcols] = snapped[gcols]
    return out.tolist()


def _default_ring(space: NicSpace, genes: np.ndarray, i: int) -> None:
    """NIC i's block of `genes` with its default ring, in place (unless its watermark
    needs more than half of that ring)."""
    cols = slice(i * GENES_PER_NIC, (i + 1) * GENES_PER_NIC)
    s = space.decode(genes[cols])
    ring = space.default.ring_slots
    if s.ring_slots != ring and (s.mode != "watermark" or (s.watermark or 1) <= ring // 2):
        genes[cols] = space.encode(replace(s, ring_slots=ring))
