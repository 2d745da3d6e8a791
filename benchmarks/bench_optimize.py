"""Benchmark of `nictune optimize` (issue 4 goals).

1. Wall time of the whole paper-47 optimisation with DES verification (goal ≤ 30 s on
   the 2-core machine), as the user runs it: `nictune optimize configs/paper-47.yaml`.
2. Quality on paper-47 (independent NICs): an exhaustive fine grid of settings per
   transmission, scored with the same preference rule as the plan, gives the optimum;
   the GA plan must reach ≥ 99.5 % of its throughput with ≤ 1 % more interrupts.
3. Quality on configs/rack.yaml (coupled NICs on shared hosts): hypervolume of the
   feasible non-dominated set of everything evaluated, at the same evaluation budget, for
   nictune's NSGA-II, uniform random search and pymoo's NSGA-II (several seeds).
4. Scale: a generated data centre (250 hosts, 4 NICs each, 2 000 transmissions), two
   generations of 16 without DES verification, end to end (goal ≤ 60 s, a guard rather
   than an issue's goal: the reports alone once took 197 s, a per-row recount).

`python benchmarks/bench_optimize.py [--skip-wall] [--seeds N]` prints a Markdown report;
exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from nictune.argtypes import count
from nictune.model import MODES, Config, NicSetting, load_config
from nictune.optimizer.checkpoint import Options
from nictune.optimizer.encoding import Encoding
from nictune.optimizer.evaluate import Evaluator
from nictune.optimizer.objectives import fragile, pick, ratios, violations
from nictune.optimizer.rings import first_choice
from nictune.optimizer.search import Search
from nictune.simulator.fast import SettingBatch, evaluate_batch

REPO = Path(__file__).resolve().parents[1]
PAPER, RACK = REPO / "configs" / "paper-47.yaml", REPO / "configs" / "rack.yaml"


def bench_wall() -> dict[str, Any]:
    """The user's command, end to end, in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "nictune", "optimize", str(PAPER), "--out", tmp, "--json"],
            capture_output=True, text=True, check=True, cwd=REPO)
        wall = time.perf_counter() - started
    doc = json.loads(proc.stdout)
    flagged = sum(1 for t in doc["transmissions"] if t.get("flags"))
    return {"wall_s": wall, "internal_wall_s": doc["wall_s"], "evaluations": doc["evaluations"],
            "flagged": flagged}


def datacentre(hosts: int) -> str:
    """A config of `hosts` hosts of 8 cores, 4 10 Gbit/s NICs each, 2 transmissions a NIC
    of mixed packet sizes at 100–500 Mbit/s."""
    lines = ["hosts:", *(f"  h{h}: {{cores: 8}}" for h in range(hosts)), "nics:"]
    lines += [f"  h{h}-eth{k}: {{host: h{h}, link: 10Gbit/s, max_ring_slots: 8192}}"
              for h in range(hosts) for k in range(4)]
    lines.append("transmissions:")
    lines += [f"  - {{id: t{h}-{k}-{j}, nic: h{h}-eth{k}, size: 200MB, "
              f"packet_size: {(1500, 512, 128, 1400)[(k + j) % 4]}, "
              f"rate: {100 * (1 + j + k)}Mbit/s}}"
              for h in range(hosts) for k in range(4) for j in range(2)]
    return "\n".join(lines) + "\n"


def bench_scale(hosts: int = 250) -> dict[str, Any]:
    """`nictune optimize` on `datacentre(hosts)`, end to end, and its time writing."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "dc.yaml"
        config.write_text(datacentre(hosts))
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "nictune", "optimize", str(config), "--out",
             str(Path(tmp) / "out"), "--population", "16", "--generations", "2",
             "--verify", "none"], capture_output=True, text=True, check=True, cwd=REPO)
        wall = time.perf_counter() - started
    written = [line.split()[2] for line in proc.stderr.splitlines()
               if line.startswith("written in ")]
    return {"hosts": hosts, "transmissions": 8 * hosts, "wall_s": wall,
            "written_s": float(written[0]) if written else float("nan")}


def grid(nic_min: int, nic_max: int, default: NicSetting) -> list[NicSetting]:
    """A fine grid of one NIC's settings: every ring, 10 points per decade of times, 40
    log-spaced watermarks per ring, timeouts 0 and 10 per decade."""
    rings = sorted({1 << k for k in range(21) if nic_min <= 1 << k <= nic_max})
    times = [float(f"{t:.3g}") for t in np.logspace(-5, 0, 51)]
    out = [default]
    for ring in rings:
        out += [NicSetting(mode=m, ring_slots=ring) for m in ("active_wait", "busy_poll")]
        out += [NicSetting(mode="passive_wait", ring_slots=ring, poll_interval=t)
                for t in times]
        marks = sorted({round(w) for w in np.geomspace(1, ring // 2, 40)})
        out += [NicSetting(mode="watermark", ring_slots=ring, watermark=w, watermark_timeout=t)
                for w, t in product(marks, [0.0, *times])]
    assert all(s.mode in MODES for s in out)
    return out


def score(config: Config, rows: list[list[NicSetting]]) -> tuple[np.ndarray, ...]:
    """Fast-engine ratios (P, T, 3), violations (P, T) and interrupts (P, T); row 0 must be
    the defaults."""
    metrics: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(rows), 1500):
        batch = SettingBatch.from_settings(rows[start:start + 1500])
        part = {**evaluate_batch(config, list(config.transmissions), batch),
                "fragile": fragile(batch)}
        for k, v in part.items():
            metrics.setdefault(k, []).append(v)
    m = {k: np.nan_to_num(np.concatenate(v)) for k, v in metrics.items()}
    base = {k: v[0] for k, v in m.items()}
    bad = violations(config, m, m["fragile"])
    return ratios(m, base, False), bad, m["throughput_bps"], m["interrupts"]


def bench_grid(seed: int = 0) -> dict[str, Any]:
    """GA plan (prefer throughput, rings as `optimize` ships them) vs the grid optimum,
    per transmission of paper-47."""
    config = load_config(PAPER)
    enc = Encoding(config)
    started = time.perf_counter()
    search = Search(config, Options(seed=seed), Evaluator(config, enc, "fast", seed, 200_000))
    search.run()
    ga_s = time.perf_counter() - started
    chosen = enc.settings(first_choice(search, "throughput"))
    defaults = enc.settings(enc.default_genes())
    _, _, ga_thr, ga_int = score(config, [defaults, chosen])
    space = enc.spaces[0]  # every paper-47 NIC has the same limits and default
    assert all(s.rings == space.rings and s.default == space.default for s in enc.spaces)
    settings = grid(min(space.rings), max(space.rings), space.default)
    started = time.perf_counter()
    r, bad, thr, ints = score(config, [[s] * len(defaults) for s in settings])
    grid_s = time.perf_counter() - started
    rows = []
    for t in range(len(defaults)):
        best = pick(r[:, t], bad[:, t], "throughput")
        rows.append((config.transmissions[t].id, ga_thr[1, t] / thr[best, t],
                     (ga_int[1, t] + 1) / (ints[best, t] + 1), settings[best].describe(),
                     chosen[t].describe()))
    thr_ratio = np.array([x[1] for x in rows])
    int_ratio = np.array([x[2] for x in rows])
    return {"grid_points": len(settings), "grid_s": grid_s, "ga_s": ga_s,
            "evaluations": search.state.evaluations if search.state else 0,
            "min_throughput_pct": 100 * thr_ratio.min(),
            "max_extra_interrupts_pct": 100 * (int_ratio.max() - 1),
            "total_extra_interrupts_pct": 100 * ((ga_int[1].sum() + 1) / (
                sum(ints[pick(r[:, t], bad[:, t], "throughput"), t]
                    for t in range(len(defaults))) + 1) - 1),
            "worst": sorted(rows, key=lambda x: -x[2])[:3], "rows": rows}


# ----------------------------------------------------------------------------- rack


def _front_hv(values: np.ndarray, bad: np.ndarray) -> float:
    """Hypervolume of the feasible non-dominated set; minimised (−thr, ints, cpu) with
    reference point (0, 10, 10): throughput ratio above 0, ≤ 10× default interrupts/CPU."""
    from pymoo.indicators.hv import HV

    ok = values[bad <= 1e-9]
    if not len(ok):
        return 0.0
    f = np.column_stack([-ok[:, 0], ok[:, 1], ok[:, 2]])
    return float(HV(ref_point=np.array([0.0, 10.0, 10.0]))(f))


def _spy(search: Search) -> list[tuple[np.ndarray, np.ndarray]]:
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    real = search.score

    def recording(genes: np.ndarray) -> tuple[np.ndarray, ...]:
        out = real(genes)
        seen.append((out[0], out[1]))
        return out

    search.score = recording  # type: ignore[method-assign]
    return seen


def _pymoo_hv(score: Any, size: int, population: int, budget: int, seed: int) -> float:
    """pymoo's NSGA-II on the same problem (genes in [0, 1], violation ≤ 0 feasible)."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.optimize import minimize

    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Rack(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=size, n_obj=3, n_ieq_constr=1, xl=0.0, xu=1.0)

        def _evaluate(self, x: np.ndarray, out: dict[str, Any], *a: Any, **k: Any) -> None:
            v, b, *_ = score(x)
            seen.append((v, b))
            out["F"] = np.column_stack([-v[:, 0], v[:, 1], v[:, 2]])
            out["G"] = (b - 1e-9)[:, None]

    minimize(Rack(), NSGA2(pop_size=population), ("n_eval", budget), seed=seed, verbose=False)
    return _front_hv(np.concatenate([v for v, _ in seen]), np.concatenate([b for _, b in seen]))


def bench_rack(seeds: int) -> dict[str, Any]:
    config = load_config(RACK)
    enc = Encoding(config)
    opts = Options()
    budget = opts.population * (opts.generations + 1)
    out: dict[str, list[float]] = {"nictune NSGA-II": [], "random search": [],
                                   "pymoo NSGA-II": []}
    for seed in range(seeds):
        search = Search(config, Options(seed=seed),
                        Evaluator(config, enc, "fast", seed, 200_000))
        seen = _spy(search)
        search.run()
        out["nictune NSGA-II"].append(_front_hv(np.concatenate([v for v, _ in seen]),
                                                np.concatenate([b for _, b in seen])))
        rng = np.random.default_rng(seed)
        genes = np.vstack([enc.default_genes(), rng.random((budget - 1, enc.size))])
        v, b, *_ = search.score(genes)
        out["random search"].append(_front_hv(v, b))
        out["pymoo NSGA-II"].append(_pymoo_hv(search.score, enc.size, opts.population,
                                              budget, seed))
    return {"budget": budget, "hv": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-wall", action="store_true",
                        help="skip part 1, the timed paper-47 optimisation")
    parser.add_argument("--seeds", type=count(1), default=3,
                        help="seeds of the rack.yaml hypervolume comparison (default 3)")
    args = parser.parse_args()
    ok = True
    print("# bench_optimize\n")
    if not args.skip_wall:
        w = bench_wall()
        met = w["wall_s"] <= 30
        ok &= met
        print(f"## paper-47 wall time (fast search + DES verification)\n\n"
              f"- `nictune optimize configs/paper-47.yaml`: {w['wall_s']:.1f} s end to end "
              f"({w['internal_wall_s']:.1f} s inside the run), {w['evaluations']} evaluations, "
              f"{w['flagged']} transmissions flagged — goal ≤ 30 s: "
              f"{verdict(met)}\n")
    g = bench_grid()
    met = g["min_throughput_pct"] >= 99.5 and g["max_extra_interrupts_pct"] <= 1.0
    ok &= met
    print(f"## paper-47 quality vs exhaustive grid (per transmission)\n\n"
          f"- grid: {g['grid_points']} settings × 47 transmissions in {g['grid_s']:.1f} s; "
          f"GA: {g['evaluations']} evaluations in {g['ga_s']:.1f} s\n"
          f"- worst transmission: {g['min_throughput_pct']:.3f} % of the grid optimum's "
          f"throughput; at most {g['max_extra_interrupts_pct']:+.2f} % interrupts vs the grid "
          f"optimum (all transmissions: {g['total_extra_interrupts_pct']:+.2f} %) — goal "
          f"≥ 99.5 % and ≤ +1 %: {verdict(met)}")
    for tid, thr, ints, best, ga in g["worst"]:
        print(f"  - {tid}: throughput {100 * thr:.3f} %, interrupts {100 * (ints - 1):+.2f} %; "
              f"grid `{best}`, GA `{ga}`")
    r = bench_rack(args.seeds)
    hv = {k: float(np.mean(v)) for k, v in r["hv"].items()}
    met = hv["nictune NSGA-II"] >= max(hv["random search"], hv["pymoo NSGA-II"])
    ok &= met
    print(f"\n## rack.yaml hypervolume at {r['budget']} evaluations ({args.seeds} seeds)\n\n"
          "| algorithm | mean hypervolume | per seed |\n|---|---|---|")
    for k, v in r["hv"].items():
        print(f"| {k} | {hv[k]:.4f} | {', '.join(f'{x:.4f}' for x in v)} |")
    print(f"\ngoal nictune ≥ random and ≥ pymoo: {verdict(met)}")
    sc = bench_scale()
    met = sc["wall_s"] <= 60
    ok &= met
    print(f"\n## scale: {sc['hosts']} hosts, {sc['transmissions']:,} transmissions\n\n"
          f"- `nictune optimize dc.yaml --population 16 --generations 2 --verify none`: "
          f"{sc['wall_s']:.1f} s end to end, {sc['written_s']:.1f} s of it writing the "
          f"results — goal ≤ 60 s: {verdict(met)}")
    return 0 if ok else 1


def verdict(met: bool) -> str:
    """A goal line's ending."""
    return "met" if met else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
