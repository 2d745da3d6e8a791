"""Per-host archives of the best settings seen so far.

Hosts never interact (cores and memory bus are per host), so a host's objectives depend
only on its own genes. Each host keeps the non-dominated (feasible-first) gene blocks of
every individual evaluated so far; the plan takes, per host, the block its preference picks,
and the search injects those composites back into the population every generation. This
solves the independent sub-problems separately while NSGA-II still explores the whole
front.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nictune.optimizer.objectives import PREFERENCES, candidates, crowding, dominated, pick

CAP = 48  # rows kept per host beyond the preference picks


class HostArchive:
    """Gene blocks of one host with their host-level objectives and violation."""

    def __init__(self, genes: np.ndarray, values: np.ndarray, violation: np.ndarray,
                 worst: np.ndarray):
        self.genes, self.values, self.violation, self.worst = genes, values, violation, worst

    def update(self, genes: np.ndarray, values: np.ndarray, violation: np.ndarray,
               worst: np.ndarray) -> None:
        """Merge newly evaluated rows and keep the archive small and non-dominated.

        `worst` is each row's lowest per-transmission throughput ratio; it joins the
        objectives for domination so a row that keeps every transmission at least as fast
        as its default is never dropped for one that is faster on average only.
        """
        g = np.concatenate([self.genes, genes])
        v = np.concatenate([self.values, values])
        c = np.concatenate([self.violation, violation])
        w = np.concatenate([self.worst, worst])
        _, first = np.unique(np.column_stack([v, c, w]), axis=0, return_index=True)
        keep = np.sort(first)
        keep = keep[candidates(c[keep])]
        both = np.column_stack([v[keep], w[keep]])
        keep = keep[~dominated(both, maximise=(0, both.shape[1] - 1))]
        if len(keep) > CAP:
            picks = {int(keep[pick(v[keep], c[keep], p, w[keep])]) for p in PREFERENCES}
            dist = crowding(v[keep])
            ranked = [int(keep[i]) for i in np.argsort(-dist, kind="stable")]
            chosen = picks | set([i for i in ranked if i not in picks][:CAP])
            keep = np.array(sorted(chosen))
        self.genes, self.values, self.violation, self.worst = g[keep], v[keep], c[keep], w[keep]

    def best(self, prefer: str) -> int:
        return pick(self.values, self.violation, prefer, self.worst)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k).tolist() for k in ("genes", "values", "violation", "worst")}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> HostArchive:
        return cls(*(np.array(raw[k], dtype=float)
                     for k in ("genes", "values", "violation", "worst")))
