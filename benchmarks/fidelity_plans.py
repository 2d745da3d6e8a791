"""How often the optimizer's first choice is one the DES predicts worse than the default,
and what the reference guard (`nictune/optimizer/guard.py`) ships instead.

The fidelity grids draw settings at random; the optimizer goes where the fast engine
scores best, which is where its errors pay. This runs the search (fast engine) on random
shared-host configs — `nic_pair_cases` (one NIC, two or three transmissions) and the
shared cases of `random_cases` — and checks the result as `optimize --verify des` does.
Per host: was the first choice rejected by the DES (slower than the default by more than
1 %, more packets lost, or later than `max_latency_p99`), did the guard fall back to the
default; and the DES's throughput and interrupts of the first choice and of the plan
shipped, as geometric means of the per-transmission ratios to the default.

Run: `python benchmarks/fidelity_plans.py [--pairs 40] [--shared 40] [--packets 30000]
[--population 32] [--generations 15] [--workers 2] [--worst 5]` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any

import numpy as np

from nictune.argtypes import count
from nictune.optimizer.checkpoint import Options
from nictune.optimizer.encoding import Encoding
from nictune.optimizer.evaluate import Evaluator
from nictune.optimizer.export import outcome
from nictune.optimizer.rings import first_choice
from nictune.optimizer.search import Search
from nictune.simulator.fidelity import Case, nic_pair_cases, random_cases

PREFER = "throughput"


def _ratio(plan: list[Any], default: list[Any], key: str, cols: np.ndarray) -> float:
    p = np.array([float(getattr(plan[j], key)) for j in cols])
    d = np.array([float(getattr(default[j], key)) for j in cols])
    return float(np.exp(np.mean(np.log(np.maximum(p, 1.0) / np.maximum(d, 1.0)))))


def run_case(job: tuple[Case, int, int]) -> list[dict[str, Any]]:
    """One search and its guarded outcome: a row per host."""
    case, population, generations = job
    config = case.config()
    enc = Encoding(config)
    search = Search(config, Options(population=population, generations=generations),
                    Evaluator(config, enc, "fast", 0, 200_000))
    search.run()
    out = outcome(search, PREFER, "des")
    (first,) = search.evaluate.run(
        [enc.settings(first_choice(search, PREFER))], "des")
    rows = []
    for h, cols in enumerate(enc.host_transmissions):
        notes = [f for f in out.flags[cols[0]] if f.startswith("des_guard")]
        rows.append({
            "case": case.name, "host": enc.hosts[h], "transmissions": len(cols),
            "rejected": bool(notes), "fallback": any("takes the default" in n for n in notes),
            "note": notes[0] if notes else "",
            "first_throughput": _ratio(first, out.default, "throughput_bps", cols),
            "plan_throughput": _ratio(out.optimized, out.default, "throughput_bps", cols),
            "plan_interrupts": _ratio(out.optimized, out.default, "interrupts", cols)})
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=count(0), default=40,
                        help="configs of one NIC with two or three transmissions (default 40)")
    parser.add_argument("--shared", type=count(0), default=40,
                        help="shared-host cases of random_cases (at most; default 40)")
    parser.add_argument("--packets", type=count(10), default=30_000,
                        help="packets per transmission (default 30000)")
    parser.add_argument("--population", type=count(4), default=32,
                        help="the search's population (default 32)")
    parser.add_argument("--generations", type=count(1), default=15,
                        help="the search's generations (default 15)")
    parser.add_argument("--workers", type=count(1), default=2,
                        help="processes for the DES checks (default 2)")
    parser.add_argument("--worst", type=count(0), default=5, help="rows of the worst list")
    args = parser.parse_args(argv)
    cases = nic_pair_cases(args.pairs, seed=11, packets=args.packets)
    shared = [c for c in random_cases(args.shared * 6, seed=12, packets=args.packets)
              if c.kind == "shared"]
    cases += shared[:args.shared]
    jobs = [(c, args.population, args.generations) for c in cases]
    started = time.perf_counter()
    if args.workers > 1:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            parts = pool.map(run_case, jobs, chunksize=1)
    else:
        parts = [run_case(j) for j in jobs]
    rows = [r for part in parts for r in part]
    wall = time.perf_counter() - started
    print(f"{len(cases)} configs ({args.pairs} one-NIC pairs, {len(cases) - args.pairs} shared"
          f" hosts), {len(rows)} hosts, search {args.population} × {args.generations} "
          f"generations, prefer {PREFER}, {wall:.0f} s")
    print("| hosts | n | first choice rejected by the DES | guard fell back to the default "
          "| DES throughput / default: first choice (median, min) | shipped (median, min) "
          "| shipped interrupts / default (median) |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for label, sel in (("one-NIC pairs", [r for r in rows if r["case"].startswith("pair")]),
                       ("shared hosts", [r for r in rows if not r["case"].startswith("pair")]),
                       ("all", rows)):
        if not sel:
            continue
        first = np.array([r["first_throughput"] for r in sel])
        plan = np.array([r["plan_throughput"] for r in sel])
        ints = np.array([r["plan_interrupts"] for r in sel])
        rejected = sum(r["rejected"] for r in sel)
        fallback = sum(r["fallback"] for r in sel)
        summary[label] = {"hosts": len(sel), "rejected": rejected, "fallback": fallback,
                          "first_min": float(first.min()), "plan_min": float(plan.min())}
        print(f"| {label} | {len(sel)} | {rejected} ({100 * rejected / len(sel):.0f} %) | "
              f"{fallback} | {np.median(first):.3f}, {first.min():.3f} | "
              f"{np.median(plan):.3f}, {plan.min():.3f} | {np.median(ints):.3f} |")
    worst = sorted(rows, key=lambda r: r["first_throughput"])[:args.worst]
    print("\nfirst choices the DES puts furthest below the default (throughput ratio):")
    for r in worst:
        print(f"- {r['case']}/{r['host']}: first choice {r['first_throughput']:.3f}, "
              f"shipped {r['plan_throughput']:.3f}{' (the default)' if r['fallback'] else ''}"
              + (f"\n  {r['note']}" if r["note"] else ""))
    return {"rows": rows, "summary": summary, "wall_s": wall}


if __name__ == "__main__":
    main()
