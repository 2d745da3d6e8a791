"""NSGA-II's variation, vectorised over the offspring with a private NumPy generator.

These are DEAP's `cxSimulatedBinaryBounded` and `mutPolynomialBounded` (Deb's NSGA-II C
code) on genes bounded to [0, 1], computed for all offspring at once. DEAP's own versions
draw from the global `random` module, which other threads of the process (a Dask client's
event loop) also draw from; a private generator keeps a run reproducible wherever its
evaluations run.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def tournament(pop: list[Any], k: int, rng: np.random.Generator) -> list[int]:
    """k binary tournaments: domination, then crowding distance, then a coin."""
    n = len(pop)
    first = rng.integers(0, n, k)
    second = (first + rng.integers(1, n, k)) % n
    coins = rng.random(k)
    out = []
    for i, j, coin in zip(first.tolist(), second.tolist(), coins.tolist(), strict=True):
        a, b = pop[i].fitness, pop[j].fitness
        if a.dominates(b):
            out.append(i)
        elif b.dominates(a):
            out.append(j)
        elif a.crowding_dist != b.crowding_dist:
            out.append(i if a.crowding_dist > b.crowding_dist else j)
        else:
            out.append(i if coin <= 0.5 else j)
    return out


def _spread(beta: np.ndarray, r: np.ndarray, eta: float) -> np.ndarray:
    alpha = 2.0 - beta ** -(eta + 1.0)
    return np.where(r <= 1.0 / alpha, (r * alpha) ** (1.0 / (eta + 1.0)),
                    (1.0 / np.abs(2.0 - r * alpha)) ** (1.0 / (eta + 1.0)))


def crossover(a: np.ndarray, b: np.ndarray, eta: float, cxpb: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Simulated binary crossover of row pairs (a[i], b[i]), each pair with probability
    `cxpb`, each gene of a crossed pair with probability 1/2."""
    n, g = a.shape
    pair = rng.random(n) <= cxpb
    gene = rng.random((n, g)) <= 0.5
    r, flip = rng.random((n, g)), rng.random((n, g)) <= 0.5
    x1, x2 = np.minimum(a, b), np.maximum(a, b)
    d = x2 - x1
    active = pair[:, None] & gene & (d > 1e-14)
    safe = np.where(active, d, 1.0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        c1 = 0.5 * (x1 + x2 - _spread(1.0 + 2.0 * x1 / safe, r, eta) * d)
        c2 = 0.5 * (x1 + x2 + _spread(1.0 + 2.0 * (1.0 - x2) / safe, r, eta) * d)
    c1, c2 = np.clip(np.nan_to_num(c1), 0.0, 1.0), np.clip(np.nan_to_num(c2), 0.0, 1.0)
    return (np.where(active, np.where(flip, c2, c1), a),
            np.where(active, np.where(flip, c1, c2), b))


def mutate(x: np.ndarray, eta: float, indpb: float, rng: np.random.Generator) -> np.ndarray:
    """Polynomial mutation of each gene with probability `indpb`."""
    hit = rng.random(x.shape) <= indpb
    r = rng.random(x.shape)
    power = 1.0 / (eta + 1.0)
    low = (2.0 * r + (1.0 - 2.0 * r) * (1.0 - x) ** (eta + 1.0)) ** power - 1.0
    high = 1.0 - (2.0 * (1.0 - r) + 2.0 * (r - 0.5) * x ** (eta + 1.0)) ** power
    moved = np.clip(x + np.where(r < 0.5, low, high), 0.0, 1.0)
    return np.where(hit, moved, x)


def bounds(x: np.ndarray, rate: float, rng: np.random.Generator, block: int) -> np.ndarray:
    """Boundary mutation: in each `block` of genes, with probability `rate`, set one of
    them to 0 or 1 (the saturated ends of a range: the longest interval, the largest
    watermark, the first core, `same_core`), where polynomial steps arrive only slowly;
    gene 0 (the mode, a category) is reset uniformly instead, so a good block also tries
    the other modes."""
    out = x.copy()
    rows, blocks = x.shape[0], x.shape[1] // block
    hit = rng.random((rows, blocks)) < rate
    which = rng.integers(0, block, (rows, blocks))
    value = np.where(which == 0, rng.random((rows, blocks)),
                     rng.integers(0, 2, (rows, blocks)).astype(float))
    r, b = np.nonzero(hit)
    out[r, b * block + which[r, b]] = value[r, b]
    return out
