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

# per transmission, the predictions a default ring must not make worse (all lower is
# better), and below what difference they count as the same: half a packet or interrupt
# (a fast-engine prediction of 6.7e-5 packets dropped kept a 128-slot ring that lost
# 1 190 in the DES, where the default's 4 096 lost none)
WORSE = ("interrupts", "cpu_busy_s", "latency_p99_s", "packets_dropped", "packets_stranded",
         "energy_j")
FLOOR = {"interrupts": 0.5, "packets_dropped": 0.5, "packets_stranded": 0.5}


def first_choice(search: Search, prefer: str) -> list[float]:
    """The genes of the search's pick for `prefer` before the DES check (`guard.py`): its
    composite (`Search.composite`) with the rings it has no use for at their defaults."""
    return default_rings(search, search.composite(prefer))


def default_rings(search: Search, genes: list[float]) -> list[float]:
    """`genes` with each NIC's ring at its default size where the search's engine
    predicts it no worse for every transmission of its host than with `genes`: throughput
    within `TIE` (0.1 %) and never below the default setting's, the rest (`WORSE`) no
    higher beyond `TIE` or their `FLOOR`. NIC by NIC in each host's order, the k-th NICs
    of all hosts in one evaluation, each round compared with `genes` itself (so the
    rounds cannot add up past those bounds). A default ring that loses fewer packets goes
    back whatever CPU and latency say (delivering them costs both): compared both ways, a
    64-slot ring whose default predicted 983 bit/s less of 4 Gbit/s was kept, and lost 26
    packets per stream in the DES."""
    enc = search.encoding
    was = {key: v[0] for key, v in search.evaluate(np.array([genes])).items()}
    base = np.minimum(search.baseline["throughput_bps"][0], was["throughput_bps"])
    out = np.array(genes, dtype=float)
    order = [[i for i, s in enumerate(enc.spaces) if s.host == h] for h in enc.hosts]
    thr = "throughput_bps"
    for k in range(max(map(len, order))):
        snapped = out.copy()
        for nics in order:
            if k < len(nics):
                _default_ring(enc.spaces[nics[k]], snapped, nics[k])
        now = {key: v[0] for key, v in search.evaluate(snapped[None, :]).items()}
        lost = [now["packets_dropped"] + now["packets_stranded"],
                was["packets_dropped"] + was["packets_stranded"]]
        for gcols, tcols in zip(enc.host_genes, enc.host_transmissions, strict=True):
            fast = np.all(now[thr][tcols] >= was[thr][tcols] * (1.0 - TIE)) and np.all(
                now[thr][tcols] >= base[tcols] * (1.0 - NOISE))
            # (delivering packets the plan's ring lost costs CPU and adds latency: a
            # default ring that loses less is better whatever those say)
            saves = np.all(lost[0][tcols] <= lost[1][tcols] + 0.5) and np.any(
                lost[0][tcols] < lost[1][tcols] - 0.5)
            if fast and (saves or all(np.all(now[key][tcols] <= was[key][tcols] * (1.0 + TIE)
                                             + FLOOR.get(key, 0.0))
                                      for key in WORSE if key in now)):
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
