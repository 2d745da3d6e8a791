"""Fast vs DES on the simplest shared core: one batched consumer beside one neighbour.

The grids' shared hosts mix two to four transmissions of every mode, and there the fast
engine's interrupt counts miss the DES's most (fast.md). `archetype_cases` takes them
apart: a passive_wait or watermark consumer ("t0", any arrival process) beside one
neighbour on its core ("t1": busy_poll, active_wait, passive_wait or watermark, Poisson
arrivals), on a host of one core. Each case runs in both engines and in the DES a second
time with another seed (the DES against itself: what no deterministic model can beat).
The table counts, per kind of neighbour and per load on the core, the consumers whose
interrupts the fast engine misses by more than 5 % beside those the DES's second seed
misses by as much. Each consumer also runs alone (its neighbour removed), in both engines
and in the DES's second seed: where the engines agree on it alone and the neighbour moves
the DES's count by 5 % or more, the second table compares how far the neighbour moves
the fast engine's count, and the second seed's, with how far it moves the DES's — the
neighbour's effect, which a model of shared cores has to get right, and how closely the
DES reproduces it itself (added in the
fourteenth session, as the first step of a shared-core model built up from such pairs;
fast.md, "One consumer beside one neighbour").

Run: `python benchmarks/fidelity_archetypes.py [--cases 800] [--seed 0] [--packets 20000]
[--workers 2] [--json PATH] [--reuse-des PATH]` (about 4 minutes; `--reuse-des` takes
the DES runs from the rows an earlier `--json` run wrote and runs the fast engine only).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from fidelity import misses, saved_rows, table, worst

from nictune.argtypes import count, out_file
from nictune.errors import InputError
from nictune.simulator.fidelity import (
    NEIGHBOURS,
    Case,
    archetype_cases,
    compare,
    compare_saved,
    digest,
    packet_load,
)

# the JSON's keys: fast vs DES and the DES against itself, beside the neighbour and alone
RUNS = ("fast", "noise", "alone", "alone_noise")
LOADS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 1.0), (1.0, 1.2), (1.2, np.inf))
_NOISE = functools.partial(compare, noise=True)


def _count(rows: list[dict[str, Any]]) -> int:
    return int(misses(rows).sum())


def counts(rows: list[dict[str, Any]], noise: list[dict[str, Any]],
           groups: list[tuple[str, Callable[[dict[str, Any]], bool]]]) -> str:
    """Markdown: per group of consumer rows, how many the fast engine and the DES's second
    seed miss by more than 5 % in interrupts, and the fast engine's p95."""
    lines = ["| consumers | n | fast > 5 % | DES seed 1 > 5 % | fast p95 |", "|---" * 5 + "|"]
    for name, keep in groups:
        picked = [(r, n) for r, n in zip(rows, noise, strict=True) if keep(r)]
        if not picked:
            continue
        fast = [r for r, _ in picked]
        p95 = float(np.percentile([r["errors"]["interrupts"] for r in fast], 95))
        lines.append(f"| {name} | {len(fast)} | {_count(fast)} | "
                     f"{_count([n for _, n in picked])} | {100 * p95:.1f} % |")
    return "\n".join(lines)


def groups() -> list[tuple[str, Callable[[dict[str, Any]], bool]]]:
    """All consumers, then per neighbour, per load on the core, per mode and arrival."""
    out: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [("all", lambda r: True)]
    for kind in NEIGHBOURS:
        out.append((f"beside {kind}", lambda r, k=kind: r["neighbour"] == k))
    for lo, hi in LOADS:
        out.append((f"load {lo:g}–{hi:g}", lambda r, a=lo, b=hi: a <= r["load"] < b))
    for mode in ("passive_wait", "watermark"):
        for arrival in ("cbr", "poisson", "onoff"):
            out.append((f"{mode}, {arrival}", lambda r, m=mode, a=arrival:
                        r["des"]["setting"]["mode"] == m and r["arrival"] == a))
    return out


def _saved(parser: argparse.ArgumentParser, path: str
           ) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """The rows of an earlier --json run: run (`RUNS`) → case → transmission."""
    data = saved_rows(parser, path)
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    try:
        for run in RUNS:
            for r in data[run]:
                out.setdefault(run, {}).setdefault(str(r["case"]), {})[
                    str(r["transmission"])] = r
    except (KeyError, TypeError):
        parser.error(f"--reuse-des {path}: not the rows of a --json run of this benchmark")
    return out


def _second_runs(saved: dict[str, dict[str, dict[str, Any]]], cases: list[Case]
                 ) -> list[list[dict[str, Any]]] | None:
    """The DES's second runs of `cases` among `saved` (None if one is missing or of
    another case)."""
    out = []
    for c in cases:
        rows = [saved.get(c.name, {}).get(t["id"]) for t in c.raw["transmissions"]]
        if any(r is None or r.get("digest") != digest(c) for r in rows):
            return None
        out.append(rows)
    return out


def alone(case: Case) -> Case:
    """`case` with its consumer alone on the host (the neighbour removed)."""
    raw = copy.deepcopy(case.raw)
    raw["transmissions"] = [t for t in raw["transmissions"] if t["id"] == "t0"]
    return Case(name=f"{case.name}-alone", kind="single", raw=raw,
                settings={"t0": case.settings["t0"]})


def _move(shared: float, by_itself: float) -> float:
    return (shared - by_itself) / max(by_itself, 1.0)


def effect(consumers: list[dict[str, Any]], by_itself: list[dict[str, Any]],
           agree: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per kind of neighbour ("all" first), over the consumers the engines agree on alone
    (`agree`: the fast engine's rows alone, within 5 %) and whose DES count the neighbour
    moves by 5 % or more (`n`): how many the second run ("fast" of `consumers` and
    `by_itself`: the fast engine, or the DES with another seed) moves the same way
    (`same`) and the quartiles of its move over the DES's there (`q25`, `median`, `q75`;
    None if none)."""
    out: dict[str, dict[str, float | None]] = {}
    for kind in ("all", *NEIGHBOURS):
        ratios, n = [], 0
        for r, a, g in zip(consumers, by_itself, agree, strict=True):
            if (kind != "all" and r["neighbour"] != kind) or g["errors"]["interrupts"] > 0.05:
                continue
            des = _move(r["des"]["interrupts"], a["des"]["interrupts"])
            second = _move(r["fast"]["interrupts"], a["fast"]["interrupts"])
            if abs(des) >= 0.05:
                n += 1
                if second * des > 0:
                    ratios.append(second / des)
        q = [float(v) for v in np.percentile(ratios, [25, 50, 75])] if ratios else [None] * 3
        out[kind] = {"n": n, "same": len(ratios), "q25": q[0], "median": q[1], "q75": q[2]}
    return out


def response(fast: dict[str, dict[str, float | None]],
             des: dict[str, dict[str, float | None]]) -> str:
    """`effect` of the fast engine and of the DES's second seed, as Markdown."""
    def quartiles(e: dict[str, float | None]) -> str:
        return " / ".join("–" if e[k] is None else f"{e[k]:.2f}"
                          for k in ("q25", "median", "q75"))

    lines = ["| neighbour | moved ≥ 5 % in the DES | fast moves the same way | fast move / "
             "DES move: 25 % / median / 75 % | DES seed 1: the same way | its move / DES "
             "move |", "|---" * 6 + "|"]
    for kind, e in fast.items():
        lines.append(f"| {kind} | {e['n']} | {e['same']} | {quartiles(e)} | "
                     f"{des[kind]['same']} | {quartiles(des[kind])} |")
    return "\n".join(lines)


def _label(case: Case, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    load = packet_load(case)
    neighbour = case.settings["t1"]["mode"]
    return [{**r, "load": load, "neighbour": neighbour} for r in rows]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=count(1), default=800,
                        help="cases, an equal share beside each kind of neighbour (800)")
    parser.add_argument("--seed", type=count(0), default=0,
                        help="seed of the cases (default 0)")
    parser.add_argument("--packets", type=count(10), default=20_000,
                        help="packets per transmission (default 20000)")
    parser.add_argument("--workers", type=count(1), default=2,
                        help="processes for the DES runs (default 2)")
    parser.add_argument("--json", type=out_file,
                        help="write the rows of the four comparisons here")
    parser.add_argument("--reuse-des", metavar="PATH",
                        help="take the DES runs from the rows an earlier --json run wrote "
                             "(same --cases, --seed and --packets) and run the fast engine "
                             "only")
    args = parser.parse_args(argv)
    saved = _saved(parser, args.reuse_des) if args.reuse_des else None
    cases = archetype_cases(args.cases, seed=args.seed, packets=args.packets)
    start = time.perf_counter()
    lonely = [alone(c) for c in cases]
    with multiprocessing.Pool(args.workers) as pool:
        if saved is None:
            fast = pool.map(compare, cases, chunksize=4)
            noise = pool.map(_NOISE, cases, chunksize=4)
            by_itself = pool.map(compare, lonely, chunksize=8)
            lone_noise = pool.map(_NOISE, lonely, chunksize=8)
        else:
            try:
                fast, by_itself = ([pool.starmap(compare_saved, [
                    (c, saved[run].get(c.name, {})) for c in group], chunksize=4)
                    for run, group in (("fast", cases), ("alone", lonely))])
            except InputError as e:
                parser.error(f"--reuse-des {args.reuse_des}: {e} (run without it)")
            noise = _second_runs(saved["noise"], cases)
            lone_noise = _second_runs(saved["alone_noise"], lonely)
            if noise is None or lone_noise is None:
                parser.error(f"--reuse-des {args.reuse_des}: a case without the DES's "
                             "second run (run without it)")
    wall = time.perf_counter() - start
    rows = [r for c, part in zip(cases, fast, strict=True) for r in _label(c, part)]
    again = [r for c, part in zip(cases, noise, strict=True) for r in _label(c, part)]
    solo = [part[0] for part in by_itself]
    solo_noise = [part[0] for part in lone_noise]
    mine = [i for i, r in enumerate(rows) if r["transmission"] == "t0"]
    consumers, consumers_noise = [rows[i] for i in mine], [again[i] for i in mine]
    print(f"{len(cases)} cases of archetype_cases (seed {args.seed}), {args.packets} "
          f"packets per consumer, DES exact, {wall:.0f} s with {args.workers} workers")
    if saved is not None:
        print(f"(the fast engine only: the DES runs from {args.reuse_des}, --reuse-des)")
    print("\nthe consumers' interrupts (load: the packet work both bring to the core):")
    print(counts(consumers, consumers_noise, groups()))
    print("\nthe neighbour's effect on the consumers' wake-ups (the count beside it against "
          "the count alone, in each engine):")
    moves, des_moves = effect(consumers, solo, solo), effect(consumers_noise, solo_noise, solo)
    print(response(moves, des_moves))
    print("\nall rows, consumers and neighbours, fast vs DES:")
    print(table(rows, [("consumers", lambda r: r["transmission"] == "t0"),
                       ("neighbours", lambda r: r["transmission"] == "t1")]))
    print("\nthe DES against itself (seed 0 vs seed 1):")
    print(table(again, [("consumers", lambda r: r["transmission"] == "t0"),
                        ("neighbours", lambda r: r["transmission"] == "t1")]))
    print("\nworst interrupts of the consumers:")
    print(worst(consumers, "interrupts", k=10))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"fast": rows, "noise": again, "alone": solo,
                       "alone_noise": solo_noise}, fh)
    return {"cases": len(cases), "misses": _count(consumers),
            "des_misses": _count(consumers_noise),
            "per_neighbour": {k: _count([r for r in consumers if r["neighbour"] == k])
                              for k in NEIGHBOURS},
            "effect": moves, "des_effect": des_moves, "wall_s": wall}


if __name__ == "__main__":
    main()
