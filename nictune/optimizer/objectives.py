"""Objectives, constraints and the choice of one setting from a front.

Per transmission every objective is a ratio to the transmission's default setting, so a
large transmission does not outweigh a small one: throughput (maximise), interrupts,
CPU seconds and, optionally, energy (minimise). Interrupts get a floor of one per
`INTERRUPT_FLOOR` packets on both sides of the ratio, so a default that hardly wakes (a
saturated core drains forever after one wake-up) does not make every alternative look
thousands of times worse. A host's objectives are the geometric means over its
transmissions, an individual's the geometric means over all transmissions: ratios
multiply, and one transmission's 1000× cannot swamp the others.

Constraints: dropped and stranded packets (as fractions of the offered packets), where
the config sets `max_latency_p99` the relative excess of the 99th-percentile latency, and
fragility: a watermark above 1 without a timeout strands the packets of the last partial
batch unless the packet count happens to fit the batches exactly, which a real transfer's
size never does reliably, so such a setting counts as one full violation. Their sum is
the violation; a setting is feasible when it is (almost) zero. Constraint
domination is implemented through the fitness: an infeasible individual gets fitness
values worse than any feasible one, ordered by its violation, so NSGA-II's
non-dominated sorting puts every feasible individual first and prefers smaller
violations among the infeasible.
"""

from __future__ import annotations

import numpy as np

from nictune.model import Config, Transmission
from nictune.simulator.arrivals import arrivals_span
from nictune.simulator.batch import PASSIVE, WATERMARK, SettingBatch

OBJECTIVES = ("throughput", "interrupts", "cpu", "energy")
WEIGHTS = (1.0, -1.0, -1.0, -1.0)
FEASIBLE = 1e-9  # violation (sum of fractions) still counted as feasible
TIE = 1e-3  # throughputs within 0.1 % of the best count as equal (prefer throughput)
INT_TIE = 5e-3  # interrupt ratios within 0.5 % of the fewest count as equal
NOISE = 1e-9  # float noise: a plan this close to the default's throughput is "as fast"
CPU_SLACK = 2.0  # tied rows may use up to this times the frugal CPU (see `pick`)
PENALTY = 1e12
INTERRUPT_FLOOR = 1e4  # packets per interrupt below which interrupt counts are noise
PREFERENCES = ("throughput", "interrupts", "balanced")


def ratios(metrics: dict[str, np.ndarray], base: dict[str, np.ndarray],
           energy: bool) -> np.ndarray:
    """Per-transmission objective ratios, shape (P, T, K), K = 3 or 4 (with energy)."""
    base_thr = np.where(base["throughput_bps"] > 0, base["throughput_bps"], base["offered_bps"])
    floor = 1.0 + base["packets_offered"] / INTERRUPT_FLOOR
    parts = [metrics["throughput_bps"] / base_thr,
             (metrics["interrupts"] + floor) / (base["interrupts"] + floor),
             (metrics["cpu_busy_s"] + 1e-9) / (base["cpu_busy_s"] + 1e-9)]
    if energy:
        parts.append((metrics["energy_j"] + 1e-9) / (base["energy_j"] + 1e-9))
    return np.stack(parts, axis=-1)


def fragile(batch: SettingBatch) -> np.ndarray:
    """1 where a setting is a watermark above 1 without a timeout, shape (P, T)."""
    return ((batch.mode == WATERMARK) & (batch.watermark_timeout <= 0.0)
            & (batch.watermark > 1)).astype(float)


def end_wait(batch: SettingBatch) -> np.ndarray:
    """The longest a transfer's last packet can wait for its wake-up, shape (P, T): a poll
    period (passive_wait), the timeout (watermark; none without one, which `fragile`
    covers), nothing where the packet wakes the consumer itself."""
    return np.where(batch.mode == PASSIVE, batch.poll_interval,
                    np.where(batch.mode == WATERMARK, batch.watermark_timeout, 0.0))


def end_robust(config: Config, metrics: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`metrics` with each throughput as if the last packet waited `end_wait` after the
    arrivals' nominal end (`_last_arrival`), where that is longer than the engine's end.

    The engines start the poll timer with the first packet and send at the configured rate
    exactly, so a period close to the whole transfer can take every packet in one tick
    there, and wait a whole period more when the sender is a little slower or the timer's
    phase is another (the lab's t-rx2: a 963 ms poll for a 0.98 s transfer, 33 Mbit/s
    predicted, 16.6 measured with the sender at 69 % of its rate, which the DES at that
    rate predicts too). A pick must stay within the throughput tie (TIE) of the default
    so (`Search.score`); on transfers much longer than their timers that excludes
    nothing.
    """
    span = np.array([_last_arrival(config, t) for t in config.transmissions])
    duration = metrics["duration_s"]
    worst = np.maximum(duration, span + metrics["end_wait"])
    scale = np.where(worst > 0.0, duration / np.where(worst > 0.0, worst, 1.0), 1.0)
    return {**metrics, "throughput_bps": metrics["throughput_bps"] * scale}


def _last_arrival(config: Config, t: Transmission) -> float:
    """When `t`'s last packet arrives after its first: fixed for cbr and onoff (a burst's
    packets come at the peak rate, so the last can come well before packets / rate), the
    mean for poisson."""
    span = arrivals_span(t, config.nic_of(t), t.packets)
    return span if span is not None else t.packets / t.rate


def violations(config: Config, metrics: dict[str, np.ndarray],
               fragility: np.ndarray) -> np.ndarray:
    """Per-transmission constraint violation, shape (P, T)."""
    offered = np.maximum(metrics["packets_offered"], 1.0)
    out = (metrics["packets_dropped"] + metrics["packets_stranded"]) / offered + fragility
    bound = np.array([t.max_latency_p99 or np.inf for t in config.transmissions])
    excess = np.maximum(0.0, metrics["latency_p99_s"] / bound - 1.0)
    return out + np.where(np.isfinite(bound), excess, 0.0)


def gmean(values: np.ndarray, axis: int = 1) -> np.ndarray:
    """Geometric mean of positive ratios (zeros count as a tiny ratio)."""
    return np.exp(np.log(np.maximum(values, 1e-300)).mean(axis=axis))


def group_mean(values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Geometric mean over each group of transmissions: (P, T, ...) → (P, G, ...)."""
    return np.stack([gmean(values[:, g]) for g in groups], axis=1)


def group_min(values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    return np.stack([values[:, g].min(axis=1) for g in groups], axis=1)


def group_sum(values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    return np.stack([values[:, g].sum(axis=1) for g in groups], axis=1)


def fitness(values: np.ndarray, violation: np.ndarray) -> list[tuple[float, ...]]:
    """DEAP fitness values: the objectives if feasible, else a graded penalty."""
    out = []
    for v, bad in zip(values, violation, strict=True):
        if bad <= FEASIBLE:
            out.append(tuple(float(x) for x in v))
        else:
            worst = PENALTY * (1.0 + float(bad))
            out.append((-worst,) + (worst,) * (len(v) - 1))
    return out


def dominated(values: np.ndarray, maximise: tuple[int, ...] = (0,)) -> np.ndarray:
    """Mask of rows dominated by another row (columns `maximise` maximised, the rest
    minimised)."""
    signed = values.copy()
    signed[:, list(maximise)] *= -1.0
    out = np.zeros(len(signed), dtype=bool)
    # (in blocks of columns: the pairwise comparison of a whole archive of n rows took
    # n² · objectives bytes at once, 116 GiB for a population of a million)
    step = max(1, (1 << 26) // max(1, len(signed) * signed.shape[1]))
    for j in range(0, len(signed), step):
        block = signed[None, j:j + step, :]
        better_eq = (signed[:, None, :] <= block).all(axis=2)
        strictly = (signed[:, None, :] < block).any(axis=2)
        out[j:j + step] = (better_eq & strictly).any(axis=0)
    return out


def crowding(values: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance of each row (extremes get infinity)."""
    n = len(values)
    dist = np.zeros(n)
    for k in range(values.shape[1]):
        order = np.argsort(values[:, k], kind="stable")
        span = values[order[-1], k] - values[order[0], k]
        dist[order[0]] = dist[order[-1]] = np.inf
        if span > 0 and n > 2:
            dist[order[1:-1]] += (values[order[2:], k] - values[order[:-2], k]) / span
    return dist


def candidates(violation: np.ndarray) -> np.ndarray:
    """Indices allowed to be picked: the feasible ones, else those of least violation."""
    feasible = np.flatnonzero(violation <= FEASIBLE)
    if len(feasible):
        return feasible
    return np.flatnonzero(violation <= violation.min() * (1 + 1e-9))


def pick(values: np.ndarray, violation: np.ndarray, prefer: str,
         worst: np.ndarray | None = None) -> int:
    """The index a preference chooses; the default has ratio 1 on every objective.

    In this order (docs/optimize.md, "The plan"):
    1. eligible: the rows at least as fast as the default for every transmission
       (`worst`, the lowest per-transmission throughput ratio of the row — as predicted,
       and within `TIE` with the last packet's worst wait, `Search.score`; "as fast"
       allows `NOISE`); if none (the default is infeasible), the rows within `TIE` of
       the highest `worst`, and of those the fastest (within `TIE`);
    2. throughput only: the fastest of those (within `TIE`);
    3. at most `CPU_SLACK` times the CPU of the default or of the most frugal row kept so
       far, whichever is more (else busy polling, no interrupts but a whole core, would
       win the interrupt count) — for throughput relative to the fastest rows, so where
       they all spin, a spinning row is taken;
    4. throughput: the fewest interrupts (ties within `INT_TIE`), then the least CPU;
       interrupts: the fewest interrupts (within `INT_TIE`), the highest throughput
       (within `TIE`), the least CPU; balanced: among the non-dominated rows, the one
       closest to the ideal point after scaling each objective's logarithm to [0, 1]
       (the knee of the front).
    """
    idx = candidates(violation)
    low = (values[:, 0] if worst is None else worst)[idx]
    keep = idx[low >= 1.0 - NOISE]
    if not len(keep):  # none as fast as the default: the closest on their slowest
        keep = idx[low >= (1.0 - TIE) * low.max()]  # transmission, then the fastest
        keep = keep[values[keep, 0] >= (1.0 - TIE) * values[keep, 0].max()]
    if prefer == "throughput":
        keep = keep[values[keep, 0] >= (1.0 - TIE) * values[keep, 0].max()]
    keep = keep[values[keep, 2] <= CPU_SLACK * max(1.0, values[keep, 2].min())]
    v = values[keep]
    if prefer in ("throughput", "interrupts"):
        few = v[:, 1] <= (1.0 + INT_TIE) * v[:, 1].min()
        if prefer == "interrupts":
            few &= v[:, 0] >= (1.0 - TIE) * v[few, 0].max()
        keep, v = keep[few], v[few]
        return int(keep[np.lexsort((v[:, 1], v[:, 2]))[0]])
    front = keep[~dominated(v)]
    signed = np.log(np.maximum(values[front], 1e-300)) * -np.asarray(WEIGHTS[:v.shape[1]])
    lo, hi = signed.min(axis=0), signed.max(axis=0)
    scaled = (signed - lo) / np.where(hi > lo, hi - lo, 1.0)
    return int(front[np.argmin(np.sqrt((scaled ** 2).sum(axis=1)))])
