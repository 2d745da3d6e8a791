"""Setting-evaluations per second of the fast engine (one evaluation = one setting of one
transmission, i.e. one (p, t) element of `evaluate_batch`).

Run: `python benchmarks/bench_fast.py` (prints a table); `main()` returns the figures.
Random populations of P settings-vectors over the transmissions of configs/paper-47.yaml
(47 independent hosts) and configs/rack.yaml (4 shared hosts: the cores' phases couple
each row). Goal (issue 3): ≥ 1 000 000 setting-evaluations per second. Also the
wall time of one population of 64 (the optimizer's generation), which the goal does not
cover but a GA run feels.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from nictune.model import MODES, PLACEMENTS, load_config
from nictune.simulator.fast import SettingBatch, Workload, evaluate

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1_000_000
POPULATION = 4000
GENERATION = 64  # the optimizer's population


def population(rng: np.random.Generator, p: int, t: int, cores: int) -> SettingBatch:
    ring = rng.choice([256.0, 1024.0, 4096.0, 16384.0], size=(p, t))
    return SettingBatch(
        mode=rng.integers(0, len(MODES), (p, t)),
        poll_interval=np.exp(rng.uniform(np.log(1e-5), np.log(1e-1), (p, t))),
        watermark=np.maximum(1.0, np.floor(rng.uniform(0, 1, (p, t)) * ring / 2)),
        watermark_timeout=rng.choice([0.0, 1e-3, 0.5], size=(p, t)),
        ring_slots=ring,
        irq_core=rng.integers(0, cores, (p, t)),
        placement=rng.integers(0, len(PLACEMENTS), (p, t)),
    )


def measure(config_path: Path, p: int, repeat: int = 3) -> dict[str, Any]:
    config = load_config(config_path)
    ts = config.transmissions
    cores = min(h.cores for h in config.hosts.values())
    batch = population(np.random.default_rng(0), p, len(ts), cores)
    wl = Workload.build(config, ts)
    evaluate(wl, batch)  # warm-up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        evaluate(wl, batch)
        best = min(best, time.perf_counter() - start)
    rate = p * len(ts) / best
    return {"config": config_path.name, "population": p, "transmissions": len(ts),
            "wall_s": round(best, 4), "evals_per_s": round(rate), "goal": GOAL,
            "ok": rate >= GOAL}


def main() -> dict[str, Any]:
    names = ("paper-47.yaml", "rack.yaml")
    rows = [measure(ROOT / "configs" / name, POPULATION) for name in names]
    generation = [measure(ROOT / "configs" / name, GENERATION, repeat=20) for name in names]
    print("| config | P × T | wall (best of 3) | setting-evaluations/s | goal |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['population']} × {r['transmissions']} | "
              f"{r['wall_s'] * 1000:.0f} ms | {r['evals_per_s']:,} | "
              f"{'met' if r['ok'] else 'not met'} (≥ {GOAL:,}) |")
    for r in generation:
        print(f"- {r['config']}: one population of {r['population']} in "
              f"{r['wall_s'] * 1000:.1f} ms (best of 20)")
    return {"rows": rows, "generation": generation}


if __name__ == "__main__":
    main()
