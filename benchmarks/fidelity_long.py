"""Batched consumers near saturation: the fast engine against a DES ten times as long.

Near saturation a passive_wait or watermark consumer's wake-ups hang on rare long drains,
and one DES run of a grid case's 30 000 packets is one sample of them: scaled up, it is
more than 5 % from a run of ten times the packets on 44 of the 200 passive_wait rows here
(some of them consumers that wake a few times whatever the size, which do not scale; and
the grids all draw their single-host arrivals from one Poisson stream, whose realised
rate is 0.82 % above λ — at λw = 0.95 that alone is 15 % of 1 − λw). `fidelity.py` holds
the fast engine to that sample; this holds it to the mean. It takes the single-host cases
of `random_cases` whose transmission is Poisson, passive_wait or watermark, at
0.35 < λw < 1 (for passive_wait the binned chain's and the renewal's ground,
docs/engines.md), scales every size by `--scale`, runs both engines on that and prints
the wake-up errors of the fast engine, and of the grid's own DES scaled up, against the
long DES, per mode (added in the twenty-fourth session; fast.md, "What changed in the
twenty-fourth session").

Run: `python benchmarks/fidelity_long.py [--seeds 0 1 2 3 4 5 20 ... 29] [--scale 10]
[--workers 2] [--json PATH]` (1–2 minutes for the 200 passive_wait and 199 watermark rows
of the developed-against grids).
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import time
from typing import Any

import numpy as np
from fidelity import DEVELOPED

from nictune.argtypes import count, out_file
from nictune.simulator import simulate
from nictune.simulator.fidelity import Case, packet_load, random_cases

LOAD = (0.35, 1.0)  # λw of the rows taken (`packet_load`: at the same-core cost)
MODES = ("passive_wait", "watermark")


def near_saturation(seed: int) -> list[Case]:
    """The single-host Poisson passive_wait and watermark cases of grid `seed` with λw in
    LOAD."""
    out = []
    for case in random_cases(500, seed=seed, packets=30_000):
        t = case.raw["transmissions"][0]
        if (case.kind == "single" and t["arrival"] == "poisson"
                and case.settings[t["id"]]["mode"] in MODES
                and LOAD[0] < packet_load(case) < LOAD[1]):
            out.append(case)
    return out


def scaled(case: Case, factor: float) -> Case:
    """`case` with every transmission `factor` times as large (same rates and settings)."""
    raw = copy.deepcopy(case.raw)
    for t in raw["transmissions"]:
        t["size"] = int(t["size"] * factor)
    return Case(name=case.name, kind=case.kind, raw=raw, settings=case.settings)


def row(job: tuple[int, Case, float]) -> dict[str, Any]:
    """Both engines' wake-ups on the scaled case, the grid's DES on the case as drawn."""
    seed, case, factor = job
    wakes = {}
    for key, c, engine in (("des_long", scaled(case, factor), "des"),
                           ("fast_long", scaled(case, factor), "fast"),
                           ("des_grid", case, "des")):
        config = c.config()
        wakes[key] = simulate(config, c.nic_settings(config), engine=engine,
                              exact=True)[0].interrupts
    return {"grid": seed, "case": case.name, "mode": case.settings["t0"]["mode"], **wakes,
            "des_grid_scaled": wakes["des_grid"] * factor}


def errors(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([abs(r[key] / r["des_long"] - 1.0) for r in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count(0), nargs="+", default=DEVELOPED,
                        help="grids of random_cases (default: the developed-against ones)")
    parser.add_argument("--scale", type=count(2), default=10,
                        help="the long DES's packets over a grid case's (default 10)")
    parser.add_argument("--workers", type=count(1), default=2)
    parser.add_argument("--json", type=out_file, help="write every row here")
    args = parser.parse_args(argv)
    jobs = [(s, c, float(args.scale)) for s in args.seeds for c in near_saturation(s)]
    if not jobs:
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: no single-host Poisson "
                     f"passive_wait or watermark case at {LOAD[0]} < λw < {LOAD[1]} in those grids")
    start = time.perf_counter()
    with multiprocessing.Pool(args.workers) as pool:
        rows = pool.map(row, jobs, chunksize=2)
    print(f"{len(rows)} single-host Poisson passive_wait and watermark rows at {LOAD[0]} < λw "
          f"< {LOAD[1]} of grids {' '.join(map(str, args.seeds))}; the long DES "
          f"{args.scale}× their packets; {time.perf_counter() - start:.0f} s with "
          f"{args.workers} workers\n")
    print("| wake-ups against the long DES | rows | median | p95 | max | rows above 5 % |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        part = [r for r in rows if r["mode"] == mode]
        for key, label in (("fast_long", "fast engine"),
                           ("des_grid_scaled", "the grid's DES (30 000 packets), scaled")):
            e = errors(part, key)
            if e.size:
                print(f"| {mode}: {label} | {e.size} | {np.median(e):.2%} | "
                      f"{np.percentile(e, 95):.2%} | {e.max():.2%} | {int((e > 0.05).sum())} |")
    e = errors(rows, "fast_long")
    print("\nworst for the fast engine:")
    for i in np.argsort(-e)[:8]:
        r = rows[i]
        print(f"- grid {r['grid']}, {r['case']} ({r['mode']}): long DES {r['des_long']:.0f}, fast "
              f"{r['fast_long']:.0f} ({e[i]:.1%}), the grid's DES ×{args.scale} "
              f"{r['des_grid_scaled']:.0f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
