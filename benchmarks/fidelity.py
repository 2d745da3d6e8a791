"""Fast vs DES on random cases: relative errors of throughput, interrupts, CPU and drops.

Run: `python benchmarks/fidelity.py [--cases 500] [--packets 30000] [--seeds ...]
[--workers 2] [--noise] [--condition PCT] [--pairs 300] [--bursts 300] [--json PATH]
[--reuse-des PATH] [--plot PNG] [--strict]`. Cases come from
`nictune.simulator.fidelity.random_cases` (modes, parameters, packet sizes, loads up to
overload and livelock, ~20 % shared hosts), `--cases` per grid and one grid per seed. The
model was developed against grids 0 to 5 and 20 to 29 (their worst rows were studied and
fixed, or chose between variants: 0-3 since the first sessions, 4 and 5 seen since the
fifth, 20-29 drawn and studied in the eleventh); grids 60 to 69, drawn in the eleventh
session, are held out: their rows have not been studied, and they decided only whether
to keep two engine changes of that session (both went: as many of their rows got worse
as better). They are the check that the model was not tuned to the grids it is
measured on (grids 0-5 alone gave interrupts p95 4.5 %, fresh grids 9 %). The table
gives both sets apart. Every DES
run is exact (no window). Prints the error table (all, per grid, single host, shared
host, per mode, per arrival process) and the worst rows; `--noise` also runs the DES a
second time with another seed and reports how far the DES is from itself (the floor
below which fast-vs-DES errors are noise). Goal (issue 3): median ≤ 2 % and 95th
percentile ≤ 5 % for throughput and interrupts, stated for all rows, the
developed-against grids and the held-out ones.

`--pairs N` (default 300) adds N cases of `nic_pair_cases`, reported apart: one NIC
carrying two transmissions (one setting, one timer), which the grids never draw and
rack.yaml is made of (added in the sixth session; `--pairs 0` leaves them out).
`--bursts N` (default 300) adds N cases of `burst_watermark_cases`, also apart: onoff
alone on a core woken by a watermark above a burst, with timeouts up to the default's
0.5 s — what the search picks for bursty traffic (added in the ninth session).
`--defaults N` (default 300) adds N configs on their default setting (`on_defaults`: half
`nic_pair_cases`, half the shared cases of `random_cases`, both of seed 7), apart as well,
with the DES against itself beside it: PF_RING's 0.5 s watermark timeout outlasts most of
these transfers, so whether the last packets wait for it decides their throughput, and on a
shared core that is close to a coin flip in the DES itself; the table counts the rows
where the two runs disagree on it (added in the tenth session).
`--condition PCT` (off by default) also runs the DES on cores PCT % slower and PCT %
faster — every CPU cost scaled, the same seed, so the same arrivals — and reports how far
that moves the DES itself, on how many of the rows above 5 % in interrupts it moves the
DES's own count by more than 5 %, and the fast engine against the range of the DES over
the three speeds (0 inside it): a wake-up count that a 1 % slower core changes by more
than the bound is one no model of the costs can be held to (added in the twelfth
session; the headline stays the issue's metric against the DES as given).
`--reuse-des PATH` takes the grids' DES results from the rows an earlier run wrote with
`--json PATH` (each row keeps a digest of its case; same `--cases`, `--packets` and
seeds) and runs the fast engine alone: seconds instead of minutes while changing the
fast engine; the sets apart are left out, `--noise` and `--condition` refused (added in
the thirteenth session).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nictune.argtypes import count, number, out_file
from nictune.errors import InputError
from nictune.simulator.fidelity import (
    MEASURES,
    METRICS,
    Case,
    burst_watermark_cases,
    compare,
    compare_saved,
    nic_pair_cases,
    on_defaults,
    random_cases,
    range_errors,
    summary,
)
from nictune.simulator.metrics import ends_on_timeout

GOAL = {"median": 0.02, "p95": 0.05}
DEVELOPED = (*range(6), *range(20, 30))  # the grids the model was developed against
HELD_OUT = tuple(range(60, 70))  # drawn in the eleventh session, rows not studied
# the DES against itself: seed 0 as "des", seed 1 in the place of the fast engine
_NOISE = functools.partial(compare, noise=True)


Group = tuple[str, Callable[[dict[str, Any]], bool]]
HOSTS: list[Group] = [("all", lambda r: True),
                      ("single host", lambda r: r["kind"] == "single"),
                      ("shared host", lambda r: r["kind"] == "shared")]
SETS: list[Group] = [("grids developed against", lambda r: r["grid"] in DEVELOPED),
                     ("held-out grids", lambda r: r["grid"] in HELD_OUT)]


def detail(rows: list[dict[str, Any]]) -> list[Group]:
    """`HOSTS`, then one group per grid, mode and arrival process."""
    held = SETS[1][1]
    groups = [*HOSTS, *SETS,
              ("held out, single host", lambda r: held(r) and r["kind"] == "single"),
              ("held out, shared host", lambda r: held(r) and r["kind"] == "shared")]
    for grid in sorted({r["grid"] for r in rows}):
        groups.append((f"grid {grid}", lambda r, g=grid: r["grid"] == g))
    for mode in ("active_wait", "passive_wait", "watermark", "busy_poll"):
        groups.append((mode, lambda r, m=mode: r["des"]["setting"]["mode"] == m))
    for arrival in ("cbr", "poisson", "onoff"):
        groups.append((arrival, lambda r, a=arrival: r["arrival"] == a))
    return groups


def table(rows: list[dict[str, Any]], groups: list[Group]) -> str:
    """Markdown: median / p95 / max per metric for each group of rows."""
    head = "| rows | n | " + " | ".join(f"{m} median / p95 / max" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (2 + len(METRICS))]
    for name, keep in groups:
        sub = [r for r in rows if keep(r)]
        if not sub:
            continue
        s = summary(sub)
        cells = [f"{_pct(s[m]['median'])} / {_pct(s[m]['p95'])} / {_pct(s[m]['max'])}"
                 for m in METRICS]
        lines.append(f"| {name} | {len(sub)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %" if x < 10 else f"{100 * x:.0f} %"


def worst(rows: list[dict[str, Any]], metric: str, k: int = 8) -> str:
    """The k rows where `metric` disagrees most, with both engines' values."""
    key = MEASURES[metric][0]
    lines = ["| case | kind | arrival | setting | error | des | fast |", "|---" * 7 + "|"]
    for r in sorted(rows, key=lambda r: -r["errors"][metric])[:k]:
        lines.append(f"| {r['case']}/{r['transmission']} | {r['kind']} | {r['arrival']} | "
                     f"{r['setting']} | {_pct(r['errors'][metric])} | {r['des'][key]:.4g} | "
                     f"{r['fast'][key]:.4g} |")
    return "\n".join(lines)


PLOTTED = ("throughput", "interrupts")
FLOOR = 1e-5  # errors below it sit at it on the plot's log axis


def png_file(text: str) -> Path:
    """`--plot`: a .png file that can be written (checked before the run, not after it)."""
    path = out_file(text)
    if path.suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"expected a .png file, got {text}")
    return path


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """A PNG of the rows for the goal's two metrics: the fast engine against the DES, one
    point per transmission (single and shared hosts apart, the ±5 % band drawn), and the
    share of rows within each error (one curve per group of `HOSTS` and `SETS`, the
    goal's 2 % median and 5 % p95 marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 9))
    for col, metric in enumerate(PLOTTED):
        key, scale = MEASURES[metric][0], 1e-9 if metric == "throughput" else 1.0
        ax = axes[0, col]
        drawn = [r for r in rows if r["des"][key] > 0 and r["fast"][key] > 0]
        for kind, colour in (("single", "tab:blue"), ("shared", "tab:orange")):
            sub = [r for r in drawn if r["kind"] == kind]
            ax.scatter([r["des"][key] * scale for r in sub],
                       [r["fast"][key] * scale for r in sub], s=3, alpha=0.3, color=colour,
                       label=f"{kind} host ({len(sub)})", rasterized=True)
        if drawn:
            values = [r[engine][key] * scale for r in drawn for engine in ("des", "fast")]
            line = np.geomspace(min(values), max(values), 50)
            ax.plot(line, line, "k-", lw=0.8)
            for f in (0.95, 1.05):
                ax.plot(line, f * line, "k:", lw=0.8)
            ax.set(xscale="log", yscale="log")
            ax.legend(fontsize=8, markerscale=4)
        else:  # (a log axis of nothing is an error)
            ax.text(0.5, 0.5, "no row above zero in both engines", ha="center",
                    transform=ax.transAxes)
        ax.set(title=f"{metric}: {len(drawn)} of {len(rows)} rows (zeros left out)",
               xlabel=f"DES ({'Gbit/s' if metric == 'throughput' else 'count'}; dotted: ±5 %)",
               ylabel="fast engine")
        ax = axes[1, col]
        for name, keep in (*HOSTS, *SETS):
            errors = np.sort([max(r["errors"][metric], FLOOR) for r in rows if keep(r)])
            if len(errors):
                p95 = float(np.percentile(errors, 95))
                ax.step(100 * errors, np.arange(1, len(errors) + 1) / len(errors),
                        where="post", label=f"{name} ({len(errors)}; p95 {_pct(p95)})")
        for x in (2, 5):
            ax.axvline(x, color="grey", ls="--", lw=0.8)
        for y in (0.5, 0.95):
            ax.axhline(y, color="grey", ls=":", lw=0.8)
        ax.set(xscale="log", xlim=(100 * FLOOR, 1e3), ylim=(0, 1.01),
               title=f"{metric}: error (goal: median ≤ 2 %, p95 ≤ 5 %, dashed)",
               xlabel=f"|fast − DES| / DES (%; below {100 * FLOOR:g} % drawn at it)",
               ylabel="share of rows within")
        if rows:
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def _default_cases(count: int, packets: int) -> list[Case]:
    """`count` configs on their default setting: half one-NIC pairs, half shared hosts
    (the shared cases of `random_cases`, about a fifth of them: drawn until enough)."""
    pairs = nic_pair_cases(count // 2, seed=7, packets=packets)
    draw, shared = 4 * count, []
    while len(shared) < count - len(pairs):
        shared = [c for c in random_cases(draw, seed=7, packets=packets) if c.kind == "shared"]
        draw *= 2
    return on_defaults(pairs + shared[:count - len(pairs)])


def _flips(rows: list[dict[str, Any]]) -> int:
    """Rows where the two runs disagree on whether the transfer ended on its timeout."""
    def ended(r: dict[str, Any], run: str) -> bool:
        timeout = r[run]["setting"]["watermark_timeout_s"]
        return ends_on_timeout(r["after_arrivals_s"][run], timeout)

    return sum(ended(r, "des") != ended(r, "fast") for r in rows)


def _within_noise(rows: list[dict[str, Any]], noise: list[dict[str, Any]]) -> int:
    """Rows above 5 % in interrupts whose fast-vs-DES difference is no more than the DES's
    seed-0-vs-seed-1 difference on the same row (`noise`, the rows in the same order)."""
    return sum(r["errors"]["interrupts"] > 0.05
               and abs(r["fast"]["interrupts"] - r["des"]["interrupts"])
               <= abs(n["fast"]["interrupts"] - n["des"]["interrupts"])
               for r, n in zip(rows, noise, strict=True))


def misses(rows: list[dict[str, Any]]) -> np.ndarray:
    """Per row, whether its interrupts are off by more than 5 %."""
    return np.array([r["errors"]["interrupts"] > 0.05 for r in rows], dtype=bool)


def _either_way(runs: list[list[dict[str, Any]]]) -> np.ndarray:
    """Per row, the larger of the DES's interrupt moves over `runs` (the DES on slower or
    faster cores, the rows in the same order)."""
    return np.max([[r["errors"]["interrupts"] for r in run] for run in runs], axis=0)


def _moved(rows: list[dict[str, Any]], runs: list[list[dict[str, Any]]]) -> int:
    """Rows above 5 % in interrupts where one of `runs` moves the DES's own count by more
    than 5 %."""
    return int((misses(rows) & (_either_way(runs) > 0.05)).sum())


def against_range(rows: list[dict[str, Any]], runs: list[list[dict[str, Any]]]
                  ) -> list[dict[str, Any]]:
    """`rows` with each error measured from the fast engine's value to the range of the
    DES's values over the cores of `runs` and the row's own (`range_errors`)."""
    return [{**r, "errors": range_errors(r["fast"], r["des"], *(o["fast"] for o in others))}
            for r, *others in zip(rows, *runs, strict=True)]


def _at_speeds(pool: Any, cases: list[Case], pct: float) -> list[list[dict[str, Any]]]:
    """The DES against itself on cores `pct` % slower and `pct` % faster (none if 0)."""
    if not pct or not cases:
        return []
    return [[r for part in pool.map(functools.partial(
        compare, noise=True, slower=1.0 + sign * pct / 100), cases, chunksize=4)
        for r in part] for sign in (1, -1)]


def _print_range(rows: list[dict[str, Any]], runs: list[list[dict[str, Any]]], pct: str,
                 groups: list[Group]) -> None:
    either = _either_way(runs)
    print(f"interrupts: the larger of the two moves of the DES per row, median "
          f"{_pct(float(np.median(either)))}, p95 {_pct(float(np.percentile(either, 95)))}; "
          f"on {_moved(rows, runs)} of the {misses(rows).sum()} rows above 5 % a core {pct} "
          "slower or faster moves the DES itself by more than 5 %")
    print(f"\nthe fast engine against the range of the DES over cores {pct} slower, "
          "as given and faster (0 inside it):")
    print(table(against_range(rows, runs), groups))


def _met(rows: list[dict[str, Any]]) -> bool:
    s = summary(rows)
    return all(s[m]["median"] <= GOAL["median"] and s[m]["p95"] <= GOAL["p95"]
               for m in ("throughput", "interrupts"))


def _saved_des(parser: argparse.ArgumentParser, args: argparse.Namespace
               ) -> dict[tuple[int, str], dict[str, dict[str, Any]]]:
    """The rows of `--reuse-des` by (grid, case) and transmission; refuses the options
    that rerun the DES."""
    if args.noise or args.condition:
        parser.error("--reuse-des runs the fast engine only: --noise and --condition "
                     "need the DES")
    rows = saved_rows(parser, args.reuse_des)
    out: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    try:
        for r in rows:
            out.setdefault((int(r["grid"]), str(r["case"])), {})[str(r["transmission"])] = r
    except (KeyError, TypeError, ValueError):
        parser.error(f"--reuse-des {args.reuse_des}: not the rows of a --json run of "
                     "this benchmark")
    return out


def saved_rows(parser: argparse.ArgumentParser, path: str) -> Any:
    """The JSON an earlier `--json` run wrote at `path` (exit 2 with one line if it cannot
    be read)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        parser.error(f"--reuse-des {path}: {e}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=count(1), default=500,
                        help="random cases per grid (default 500)")
    parser.add_argument("--packets", type=count(10), default=30_000,
                        help="packets per transmission of a case (default 30000)")
    parser.add_argument("--seeds", type=count(0), nargs="+", default=[*DEVELOPED, *HELD_OUT],
                        help="one grid of --cases per seed (default: 0-5 and 20-29, the "
                             "grids the model was developed against, and 60-69, held out)")
    parser.add_argument("--workers", type=count(1), default=2,
                        help="processes for the DES runs (default 2)")
    parser.add_argument("--noise", action="store_true",
                        help="also measure the DES against itself (a second seed)")
    parser.add_argument("--pairs", type=count(0), default=300,
                        help="cases of one NIC with two transmissions, reported apart "
                             "(default 300)")
    parser.add_argument("--bursts", type=count(0), default=300,
                        help="cases of onoff woken by a watermark above a burst, reported "
                             "apart (default 300)")
    parser.add_argument("--defaults", type=count(0), default=300,
                        help="configs on their default setting, reported apart with the "
                             "DES against itself (default 300)")
    parser.add_argument("--condition", type=number(0.0, 99.0, " %"), default=0.0,
                        metavar="PCT",
                        help="also run the DES on cores PCT %% slower and PCT %% faster (same "
                             "seed): how far that moves the DES, and the fast engine against "
                             "the DES's range over the three (default: off)")
    parser.add_argument("--json", type=out_file,
                        help="write every row (both engines' metrics; with --condition, the "
                             "DES's on the slower and faster cores too) here")
    parser.add_argument("--plot", type=png_file, metavar="PNG",
                        help="draw the grids' rows here: fast vs DES per transmission and "
                             "the share of rows within each error, for throughput and "
                             "interrupts")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when the goal is not met (default: report it only)")
    parser.add_argument("--reuse-des", metavar="PATH",
                        help="take the grids' DES results from the rows an earlier run wrote "
                             "with --json (same --cases, --packets and seeds, the DES "
                             "unchanged since) and run the fast engine only: seconds instead "
                             "of minutes, for iterating on it (the sets apart are left out)")
    args = parser.parse_args(argv)
    saved = _saved_des(parser, args) if args.reuse_des else None
    if saved is not None:  # (the sets apart: their DES is not among the rows)
        args.pairs = args.bursts = args.defaults = 0
    grids = [(seed, random_cases(args.cases, seed=seed, packets=args.packets))
             for seed in args.seeds]
    cases = [c for _, c_list in grids for c in c_list]
    # the sets reported apart: key, label, generator, cases
    apart_sets = [("pairs", "one NIC with two transmissions", "nic_pair_cases",
                   nic_pair_cases(args.pairs, seed=0, packets=args.packets)),
                  ("bursts", "watermarks above a burst", "burst_watermark_cases",
                   burst_watermark_cases(args.bursts, seed=0)),
                  ("defaults", "default settings", "on_defaults", _default_cases(
                      args.defaults, args.packets))]
    start = time.perf_counter()
    with multiprocessing.Pool(args.workers) as pool:
        if saved is None:
            parts = pool.map(compare, cases, chunksize=4)
        else:
            try:
                parts = pool.starmap(compare_saved, [(c, saved.get((seed, c.name), {}))
                                                     for seed, c_list in grids
                                                     for c in c_list], chunksize=4)
            except InputError as e:
                parser.error(f"--reuse-des {args.reuse_des}: {e} (run without it)")
        apart = {key: [r for part in pool.map(compare, set_cases, chunksize=4) for r in part]
                 for key, _, _, set_cases in apart_sets}
        noise = ([r for part in pool.map(_NOISE, cases, chunksize=4) for r in part]
                 if args.noise else [])
        default_noise = [r for part in pool.map(_NOISE, apart_sets[-1][3], chunksize=4)
                         for r in part]
        speeds = _at_speeds(pool, cases, args.condition)
        apart_speeds = {key: _at_speeds(pool, set_cases, args.condition)
                        for key, _, _, set_cases in apart_sets}
    wall = time.perf_counter() - start
    grid_of = [seed for seed, c_list in grids for _ in c_list]
    rows = [{**r, "grid": g} for g, part in zip(grid_of, parts, strict=True) for r in part]
    s = summary(rows)
    ok = _met(rows)
    print(f"{len(cases)} cases ({len(grids)} grids of {args.cases}), {len(rows)} "
          f"transmissions, {args.packets} packets per case (shared: split), DES exact, "
          f"{wall:.0f} s with {args.workers} workers")
    if saved is not None:
        print(f"(the fast engine only: the DES's rows from {args.reuse_des}, --reuse-des)")
    print(table(rows, detail(rows)))
    if noise:
        print("\nthe DES against itself (seed 0 vs seed 1), the noise floor:")
        print(table(noise, HOSTS))
        print(f"interrupts: {_within_noise(rows, noise)} of the {misses(rows).sum()} rows "
              "above 5 % are within the DES's own seed-to-seed difference")
    pct = f"{args.condition:g} %"
    if speeds:
        for run, label in zip(speeds, ("slower", "faster"), strict=True):
            print(f"\nthe DES against itself on cores {pct} {label} (same seed):")
            print(table(run, HOSTS))
        _print_range(rows, speeds, pct, detail(rows)[:5])
    for metric in METRICS:
        print(f"\nworst {metric}:")
        print(worst(rows, metric))
    for key, label, generator, set_cases in apart_sets:
        if apart[key]:
            print(f"\n{label} ({len(set_cases)} cases of {generator}, not in the grids):")
            print(table(apart[key], HOSTS[:1]))
            if apart_speeds[key]:
                _print_range(apart[key], apart_speeds[key], pct, HOSTS[:1])
            print("\nworst throughput of those:")
            print(worst(apart[key], "throughput"))
    if apart["defaults"]:
        print("\nthe DES against itself (seed 0 vs seed 1) on the default settings:")
        print(table(default_noise, HOSTS[:1]))
        rows_d = apart["defaults"]
        short = sum(r["des"]["duration_s"] - r["after_arrivals_s"]["des"]
                    < r["des"]["setting"]["watermark_timeout_s"] for r in rows_d)
        print(f"ends on the timeout: fast and DES disagree on {_flips(rows_d)} of "
              f"{len(rows_d)} transmissions, the DES against itself on "
              f"{_flips(default_noise)} ({short} of them arrive in less than the timeout)")
    print("\ngoal (median ≤ 2 %, p95 ≤ 5 % for throughput and interrupts):")
    for name, keep in (HOSTS[0], *SETS):
        sub = [r for r in rows if keep(r)]
        if sub:
            print(f"  {name}: {'met' if _met(sub) else 'NOT met'}")
    for key, label, _, _ in apart_sets:
        if apart[key]:
            print(f"  {label}: {'met' if _met(apart[key]) else 'NOT met'}")
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        if speeds:  # the DES on the slower and the faster cores, beside each row
            rows = [{**r, "des_slower": slow["fast"], "des_faster": fast["fast"]}
                    for r, slow, fast in zip(rows, *speeds, strict=True)]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(rows, fh)
    return {"summary": s, "ok": ok, "strict": args.strict, "cases": len(cases),
            "grids": list(args.seeds),
            "noise": summary(noise) if noise else None,
            "within_noise": _within_noise(rows, noise) if noise else None,
            "defaults_noise": summary(default_noise) if default_noise else None,
            "condition": {"slower": summary(speeds[0]), "faster": summary(speeds[1]),
                          "moved": _moved(rows, speeds),
                          "either_way_p95": float(np.percentile(_either_way(speeds), 95)),
                          "against_range": summary(against_range(rows, speeds)),
                          **{f"{key}_against_range": summary(against_range(apart[key], run))
                             for key, run in apart_speeds.items() if run}}
            if speeds else None,
            "default_flips": {"fast": _flips(apart["defaults"]), "des": _flips(default_noise)},
            **{key: summary(apart[key]) if apart[key] else None for key in apart},
            "rows": len(rows), "wall_s": wall,
            "p95": {m: float(np.round(s[m]["p95"], 4)) for m in METRICS}}


if __name__ == "__main__":
    result = main()
    sys.exit(1 if result["strict"] and not result["ok"] else 0)
