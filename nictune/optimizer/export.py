"""What a run leaves in its directory: plan.yaml, pareto.csv, logbook.csv, the two plots
and summary.md, plus the `--json` document and the printed table.

Every number here is a model prediction (the fast engine, re-simulated with the DES when
`--verify des`); the summary says so in its title.
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata as md
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nictune import __version__
from nictune.errors import RunError
from nictune.model import Config, NicSetting
from nictune.optimizer.guard import guard
from nictune.optimizer.objectives import INTERRUPT_FLOOR, OBJECTIVES, PREFERENCES, dominated
from nictune.optimizer.rings import first_choice
from nictune.optimizer.search import Search
from nictune.plan import Plan, PlanEntry, save_plan
from nictune.simulator.des import after_arrivals
from nictune.simulator.metrics import Metrics, core_load, ends_on_timeout
from nictune.units import format_bitrate, format_duration, format_size

DISAGREE = 0.05  # relative difference between engines that flags a transmission
FLAGS = {  # what each kind of flag means, said once above the list
    "engines_disagree": f"the search's fast engine and the DES, whose figures the table "
                        f"shows, differ by more than {100 * DISAGREE:g} % on that figure of "
                        f"the default or the plan",
    "des_guard": "the DES predicts the search's first choice for the host worse than the "
                 "default; the table shows the setting taken instead",
    "latency_bound": "the DES puts the 99th-percentile latency past the config's "
                     "max_latency_p99",
    "timeout_tail": f"the last packets wait for the watermark timeout for more than "
                    f"{100 * DISAGREE:g} % of the transfer's duration, which its throughput "
                    f"counts"}
# Metric, and the magnitude below which differences do not count (noise floor); for
# interrupts also one per INTERRUPT_FLOOR packets, as in the objectives (29 wake-ups vs 1
# in 4 million packets is the same prediction: the consumer hardly wakes).
COMPARED = (("throughput_bps", 1.0), ("interrupts", 10.0), ("cpu_busy_s", 1e-6))


@dataclass
class Outcome:
    """The chosen settings with the metrics of both the default and the plan."""

    settings: list[NicSetting]
    defaults: list[NicSetting]
    default: list[Metrics]  # verified engine (des) or fast
    optimized: list[Metrics]
    flags: list[list[str]]
    fast_default: list[Metrics]
    fast_optimized: list[Metrics]


def outcome(search: Search, prefer: str, verify: str) -> Outcome:
    """Pick the plan and re-simulate it (and the defaults) with fast and, if asked, the
    DES, which also guards it: a host whose plan the DES predicts worse than its default
    takes the next candidate the DES accepts, or the default (`guard.py`)."""
    enc, ev = search.encoding, search.evaluate
    defaults = enc.settings(enc.default_genes())
    first = enc.settings(first_choice(search, prefer))
    if verify == "none":
        fast_d, fast_o = ev.run([defaults, first], "fast")
        return Outcome(first, defaults, fast_d, fast_o, [[] for _ in first], fast_d, fast_o)
    # (both in one map; the guard's first round finds the first choice's runs cached)
    des_d, _ = ev.run([defaults, first], verify)
    genes, notes = guard(search, prefer, verify, des_d)
    chosen = enc.settings(genes)
    (des_o,) = ev.run([chosen], verify)
    fast_d, fast_o = ev.run([defaults, chosen], "fast")
    tails = [_timeout_tail(which, enc.config, ev.seed, settings, runs)
             for which, settings, runs in (("default", defaults, des_d),
                                           ("optimized", chosen, des_o))]
    flags = [[*_disagreements("default", fd, dd), *_disagreements("optimized", fo, do),
              *_latency_bound(t.max_latency_p99, do), *td, *to, *note]
             for t, fd, fo, dd, do, td, to, note in zip(
                 enc.transmissions, fast_d, fast_o, des_d, des_o, *tails, notes, strict=True)]
    return Outcome(chosen, defaults, des_d, des_o, flags, fast_d, fast_o)


def _disagreements(which: str, fast: Metrics, des: Metrics) -> list[str]:
    out = []
    for key, floor in COMPARED:
        if key == "interrupts":
            floor = max(floor, des.packets_offered / INTERRUPT_FLOOR)
        f, d = float(getattr(fast, key)), float(getattr(des, key))
        if max(abs(f), abs(d)) < floor:
            continue
        rel = abs(f - d) / max(abs(d), floor)
        if rel > DISAGREE:
            out.append(f"engines_disagree: {which} {key} fast {f:.4g} vs des {d:.4g} "
                       f"({100 * rel:.1f} %)")
    return out


def _latency_bound(bound: float | None, des: Metrics) -> list[str]:
    """The plan breaks the transmission's `max_latency_p99` in the DES (the search held it
    to the bound with the fast engine's latency)."""
    if bound is None or des.latency_p99_s <= bound:
        return []
    return [f"latency_bound: the DES predicts a 99th-percentile latency of "
            f"{format_duration(des.latency_p99_s, 4)} > max_latency_p99 {format_duration(bound)}"]


def _timeout_tail(which: str, config: Config, seed: int, settings: list[NicSetting],
                  runs: list[Metrics]) -> list[list[str]]:
    """Per transmission, a flag where its DES run (`runs`, of seed `seed`) ends on its
    watermark timeout — its last packets, below the watermark, waited for it
    (`metrics.ends_on_timeout`) — and that wait is more than 5 % of the duration, so of
    the throughput. On a core shared with other transmissions whether a transfer waits
    is close to a coin flip between runs (benchmarks/results/fast.md, "The default
    setting"), so a gain over such a default can be one run's."""
    out = []
    for t, s, m in zip(config.transmissions, settings, runs, strict=True):
        after = after_arrivals(config, t, m, seed)
        if not ends_on_timeout(after, s.watermark_timeout) or after < DISAGREE * m.duration_s:
            out.append([])
            continue
        host = config.nics[t.nic].host
        shared = any(config.nics[u.nic].host == host and o.irq_core == s.irq_core
                     for u, o in zip(config.transmissions, settings, strict=True) if u is not t)
        out.append([f"timeout_tail: the {which} setting ends {format_duration(after)} after "
                    f"the last arrival, its last packets waiting for the "
                    f"{format_duration(s.watermark_timeout or 0.0)} watermark timeout: "
                    f"{100 * after / m.duration_s:.0f} % of its duration, which its throughput "
                    f"counts" + ("; on this shared core whether they wait can change from run "
                                 "to run" if shared else "")])
    return out


def versions() -> dict[str, str]:
    out = {"nictune": __version__}
    for name in ("deap", "numpy", "simpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "missing"
    return out


def plain(value: Any) -> Any:
    """Data YAML/JSON can hold: NumPy scalars to Python numbers, recursively."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def build_plan(config: Config, out: Outcome, meta: dict[str, Any], seed: int) -> Plan:
    entries = []
    for i, t in enumerate(config.transmissions):
        predicted = {"default": plain(out.default[i].to_json()),
                     "optimized": plain(out.optimized[i].to_json())}
        if out.default is not out.fast_default:
            predicted["fast_default"] = plain(out.fast_default[i].to_json())
            predicted["fast_optimized"] = plain(out.fast_optimized[i].to_json())
        entries.append(PlanEntry(
            id=t.id, host=config.nics[t.nic].host, nic=t.nic, setting=out.settings[i],
            default_setting=out.defaults[i], packet_size=t.packet_size,
            rate_pps=float(t.rate), size_bytes=float(t.size), predicted=predicted,
            flags=tuple(out.flags[i])))
    return Plan(entries=entries, config=config.source, config_hash=config.digest, seed=seed,
                meta=plain(meta))


def run_meta(search: Search, prefer: str, verify: str, wall_s: float) -> dict[str, Any]:
    o, s = search.options, search.state
    assert s is not None
    return {"created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "engine": o.engine, "verify": verify, "prefer": prefer,
            "population": o.population, "generations": s.generation,
            "objectives": list(OBJECTIVES[:4 if o.energy else 3]),
            "evaluations": s.evaluations, "wall_s": round(wall_s, 3), "versions": versions()}


# ----------------------------------------------------------------------------- files


def write_csvs(search: Search, directory: Path) -> None:
    """pareto.csv (the population's first front and the plans) and logbook.csv."""
    s = search.state
    assert s is not None
    names = [f"{n}_ratio" for n in OBJECTIVES[:len(s.fitness[0])]]
    values = np.array(s.fitness)
    feasible = np.flatnonzero(values[:, 0] > -1.0)
    front = feasible[~dominated(values[feasible])] if len(feasible) else feasible
    with (directory / "pareto.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", *names, "settings"])
        for prefer in PREFERENCES:
            w.writerow([f"plan:{prefer}", *search.plan_values(prefer).tolist(),
                        _describe(search, first_choice(search, prefer))])
        for i in sorted(front.tolist(), key=lambda i: -values[i, 0]):
            w.writerow(["front", *values[i].tolist(), _describe(search, s.population[i])])
    with (directory / "logbook.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(s.logbook[0]))
        w.writeheader()
        w.writerows(s.logbook)


def _describe(search: Search, genes: Sequence[float]) -> str:
    """Each NIC's setting as the summary gives it: with its IRQ core and placement where
    the host has several NICs (the core spread is the plan there; without it, front rows
    that differ only in cores read the same and cannot be rebuilt)."""
    enc = search.encoding
    return "; ".join(f"{sp.nic}: {_setting(search.config, sp.nic, st)}" for sp, st in zip(
        enc.spaces, enc.nic_settings(list(genes)), strict=True))


def _same(series: dict[str, Any]) -> list[tuple[str, Any]]:
    """The series of `series` with equal ones merged: [("throughput = interrupts", v), ...]
    (a plan drawn under another is otherwise missing from its plot)."""
    out: list[tuple[list[str], Any]] = []
    for name, value in series.items():
        for names, seen in out:
            if np.array_equal(seen, value):
                names.append(name)
                break
        else:
            out.append(([name], value))
    return [(" = ".join(names), value) for names, value in out]


def write_plots(search: Search, prefer: str, directory: Path) -> None:
    """convergence.png (each plan's gain, and the chosen plan's interrupts ratio, per
    generation) and pareto.png (the final population and the plans). The ratios are the
    search's: geometric means over the transmissions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    s = search.state
    assert s is not None
    gen = [r["generation"] for r in s.logbook]
    fig, ax = plt.subplots(figsize=(7, 4))
    gains = {p: np.array([r[f"{p}_throughput_gain_pct"] for r in s.logbook])
             for p in PREFERENCES}
    for names, series in _same(gains):
        ax.plot(gen, series, label=f"plan ({names})")
    ax.set_xlabel("generation")
    ax.set_ylabel("throughput gain vs default (%)")
    twin = ax.twinx()
    twin.plot(gen, [r[f"{prefer}_interrupts_ratio"] for r in s.logbook], "k--",
              label=f"interrupts ratio ({prefer})")
    twin.set_ylabel("interrupts / default")
    # one legend for both axes, below the plot: inside it covered the curves
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8,
               frameon=False)
    ax.set_title("Convergence (predicted; geometric means over the transmissions)",
                 fontsize=10)
    fig.tight_layout(rect=(0.0, 0.1, 1.0, 1.0))
    fig.savefig(directory / "convergence.png", dpi=110)
    plt.close(fig)

    values = np.array(s.fitness)
    ok = values[values[:, 0] > -1.0]
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    if len(ok):
        # (a linear scale put everything below a few tens times the CPU in one colour)
        sc = ax.scatter(ok[:, 1], 100 * (ok[:, 0] - 1), c=ok[:, 2], cmap="viridis", s=18,
                        norm=LogNorm(vmin=max(float(ok[:, 2].min()), 1e-3),
                                     vmax=max(float(ok[:, 2].max()), 1.001)))
        fig.colorbar(sc, label="CPU / default (log scale)")
    ax.scatter([1.0], [0.0], marker="s", color="red", label="default")
    plans = {p: search.plan_values(p) for p in PREFERENCES}
    for (names, v), mark in zip(_same(plans), ("^", "v", "D"), strict=False):
        ax.scatter([v[1]], [100 * (v[0] - 1)], marker=mark, s=70, edgecolor="k",
                   label=f"plan ({names}): CPU ×{v[2]:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("interrupts / default (geometric mean over transmissions)")
    ax.set_ylabel("throughput gain vs default (%, geometric mean)")
    ax.set_title("Final population and plans (predicted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "pareto.png", dpi=110)
    plt.close(fig)


COSTLY = 2.0  # a latency or CPU this many times the default's is listed under the table
NAMED = 8  # ... the worst this many by name, then how many more


def _setting(config: Config, nic: str, s: NicSetting) -> str:
    """`describe()`, plus IRQ core and placement where the host has several NICs."""
    shared = config.nics[nic].host in config.several_nics
    return s.describe() + (f" core={s.irq_core} {s.placement}" if shared else "")


def table(config: Config, out: Outcome, engine_label: str) -> str:
    """The seed paper's Table 1, predicted: one row per transmission, then the mean."""
    head = ("| transmission | size | packet size | default throughput | optimized throughput "
            "| improvement % | interrupts default | interrupts optimized | CPU default "
            "| CPU optimized | setting |")
    lines = [f"PREDICTED by the model ({engine_label}), not measured. Interrupts: the "
             "consumer's wake-ups over the whole transmission; CPU: its share of its IRQ "
             "core's time.", "", head,
             "|" + "---|" * 11]
    gains, one_packet = [], []
    for i, t in enumerate(config.transmissions):
        d, o = out.default[i], out.optimized[i]
        gain = 100 * (o.throughput_bps / d.throughput_bps - 1) if d.throughput_bps else 0.0
        gain = gain if abs(gain) >= 5e-7 else 0.0  # float noise, not a change
        # (one packet's throughput is its size over its latency: +78 000 000 % for a
        # 64-byte transfer once, which made the mean that too)
        (one_packet if t.packets < 2 else gains).append(gain)
        flag = " ⚠" if out.flags[i] else ""
        lines.append(
            f"| {t.id}{flag} | {format_size(t.size)} | {t.packet_size} B "
            f"| {format_bitrate(d.throughput_bps)} | {format_bitrate(o.throughput_bps)} "
            f"| {gain:+.3f} | {d.interrupts:.4g} | {o.interrupts:.4g} "
            f"| {100 * d.cpu_util:.3g} % | {100 * o.cpu_util:.3g} % "
            f"| {_setting(config, t.nic, out.settings[i])}"
            f"{' (the default)' if out.settings[i] == config.default_setting(t) else ''} |")
    ints_d = sum(m.interrupts for m in out.default)
    ints_o = sum(m.interrupts for m in out.optimized)
    mean = (f"{np.mean(gains):+.3f} % (min {min(gains):+.3f} %, max {max(gains):+.3f} %"
            + (f"; {len(one_packet)} one-packet transfers left out" if one_packet else "")
            + ")") if gains else "n/a (one-packet transfers only)"
    lines += ["", f"Mean throughput improvement: {mean}; interrupts "
              f"{ints_o:.4g} vs {ints_d:.4g} by default ({100 * (ints_o / max(ints_d, 1) - 1):+.1f}"
              " %)."]
    flagged: dict[str, list[str]] = {}  # (a host's des_guard note: once, for all of them)
    for t, fl in zip(config.transmissions, out.flags, strict=True):
        for f in fl:
            flagged.setdefault(f, []).append(t.id)
    if flagged:
        kinds = dict.fromkeys(f.partition(":")[0] for f in flagged)
        lines += ["", "Flagged (⚠):", *(f"({k}: {FLAGS[k]})" for k in kinds if k in FLAGS)]
        lines += [f"- {', '.join(ids)}: {f}" for f, ids in flagged.items()]
    return "\n".join([*lines, "", *costs(config, out), *core_loads(config, out)])


def costs(config: Config, out: Outcome) -> list[str]:
    """What the plan changes beside the table, per transmission, default → optimized: the
    packets lost and the 99th-percentile latency (the search holds it only where the
    config bounds it); then the transmissions whose latency or CPU grows COSTLY times or
    more, each with its factor."""
    lines = ["Losses and latency (default → optimized):", "",
             "| transmission | packets lost (dropped or stranded) | p99 latency |",
             "|---|---|---|"]
    grown: dict[str, list[tuple[float, str]]] = {"p99 latency": [], "CPU": []}
    for i, t in enumerate(config.transmissions):
        d, o = out.default[i], out.optimized[i]
        lost = [100 * (m.packets_dropped + m.packets_stranded) / max(m.packets_offered, 1)
                for m in (d, o)]
        lines.append(f"| {t.id} | {lost[0]:.3g} % → {lost[1]:.3g} % "
                     f"| {format_duration(d.latency_p99_s)} → {format_duration(o.latency_p99_s)} |")
        for key, before, after, unit in (
                ("p99 latency", d.latency_p99_s, o.latency_p99_s, format_duration),
                ("CPU", d.cpu_util, o.cpu_util, lambda x: f"{100 * x:.3g} %")):
            if before > 0 and after >= COSTLY * before:
                mode = ", busy polling" if out.settings[i].mode == "busy_poll" else ""
                grown[key].append((after / before, f"{t.id} {unit(before)} → {unit(after)}"
                                                   f" (×{after / before:.3g}{mode})"))
    for key, rows in grown.items():
        if rows:
            rows.sort(reverse=True)
            shown = "; ".join(text for _, text in rows[:NAMED])
            more = f"; and {len(rows) - NAMED} more" if len(rows) > NAMED else ""
            lines += ["", f"{key} {COSTLY:g}× the default's or more: {len(rows)} of "
                          f"{len(config.transmissions)} transmissions — {shown}{more}."]
    return lines


def core_loads(config: Config, out: Outcome) -> list[str]:
    """Where a host has several NICs: per IRQ core, default → optimized, the
    transmissions it serves and their `core_load` (grouped by the simulated settings)."""
    several = config.several_nics
    ts = [t for t in config.transmissions if config.nic_of(t).host in several]
    if not ts:
        return []
    arms = []
    for ms in (out.default, out.optimized):
        by_id = {m.transmission: m for m in ms}
        arms.append((config.by_core(ts, {t.id: by_id[t.id].setting for t in ts}), by_id))
    order = list(config.hosts)
    lines = ["", "CPU per IRQ core, default → optimized (hosts with several NICs): the "
                 "transmissions it serves, the most the CPU shares of those that do not "
                 "busy-poll add up to at one moment, how many busy-poll (the model "
                 "charges a core per NIC, though it yields to the others' work), and "
                 "the share of their packets dropped.", "",
             "| host | core | default | optimized |", "|---|---|---|---|"]
    for host, core in sorted({key for cores, _ in arms for key in cores},
                             key=lambda key: (order.index(key[0]), key[1])):
        cells = [core_cell(cores.get((host, core), []), config, by_id)
                 for cores, by_id in arms]
        lines.append(f"| {host} | {core} | {cells[0]} | {cells[1]} |")
    return lines


def core_cell(ids: list[str], config: Config, by_id: Mapping[str, Metrics]) -> str:
    """Transmissions `ids` of one core: the ids, then `core_load` ("—" if none)."""
    if not ids:
        return "—"
    load = core_load([by_id[i] for i in ids], [config.transmission(i) for i in ids])
    return f"{', '.join(ids)}: {load.describe()}"


def write_summary(config: Config, out: Outcome, meta: dict[str, Any], directory: Path,
                  searched: Sequence[float],
                  others: Mapping[str, tuple[Sequence[float], int]]) -> str:
    """summary.md (also printed): the run, the search's own figures for the plan and for
    the other preferences' picks, the table. `searched`: the plan's ratios as the search
    judged them (`plan_values`); `others`: per other preference, its pick's ratios and
    how many transmissions it busy-polls (`alternatives`)."""
    label = "DES-verified" if meta["verify"] != "none" else "fast engine only"
    replaced = sum(any(f.startswith("des_guard:") for f in fl) for fl in out.flags)
    text = "\n".join([
        f"# nictune optimize: {config.source} (predicted)", "",
        f"- prefer: {meta['prefer']}; search engine: {meta['engine']}; verification: "
        f"{meta['verify']}", f"- population {meta['population']}, generations "
        f"{meta['generations']}, {meta['evaluations']} evaluations, {meta['wall_s']:.1f} s",
        f"- config hash {config.digest}",
        f"- the search's pick as it judged it, before any DES check (the progress line, "
        f"plots and pareto.csv show these): "
        f"throughput {100 * (searched[0] - 1):+.3f} %, interrupts ×{searched[1]:.3g}, CPU "
        f"×{searched[2]:.3g} — geometric means over the transmissions, the {meta['engine']} "
        f"engine; the table below has each transmission's own figures ({label}) and their "
        f"arithmetic mean" + (f"; the DES check replaced the pick for {replaced} of them "
                              f"(des_guard, below), so the table's plan differs there"
                              if replaced else ""),
        "- the other preferences' picks as the search judged them (`--resume DIR --prefer "
        "P` re-picks without searching again): " + "; ".join(
            f"{p}: throughput {100 * (v[0] - 1):+.3f} %, interrupts ×{v[1]:.3g}, CPU "
            f"×{v[2]:.3g}, {spins or 'none'} busy-polled" for p, (v, spins) in others.items()),
        "", table(config, out, label), ""])
    (directory / "summary.md").write_text(text)
    return text


def alternatives(search: Search, prefer: str) -> dict[str, tuple[list[float], int]]:
    """Per preference other than `prefer`: its pick's ratios as the search judged them
    and how many transmissions it busy-polls."""
    enc = search.encoding
    return {p: (search.plan_values(p).tolist(),
                sum(s.mode == "busy_poll" for s in enc.settings(search.composite(p))))
            for p in PREFERENCES if p != prefer}


def json_document(plan_path: Path, out: Outcome, config: Config,
                  meta: dict[str, Any]) -> dict[str, Any]:
    return plain({
        "plan": str(plan_path), "wall_s": meta["wall_s"], "evaluations": meta["evaluations"],
        "transmissions": [{"id": t.id, "setting": out.settings[i].to_json(),
                           "default": out.default[i].to_json(),
                           "optimized": out.optimized[i].to_json(),
                           "flags": out.flags[i]}
                          for i, t in enumerate(config.transmissions)]})


# what a run writes into its directory (the checkpoint, "checkpoint.json", as it goes)
OUTPUTS = ("plan.yaml", "pareto.csv", "logbook.csv", "convergence.png", "pareto.png",
           "summary.md")


def write_all(search: Search, out: Outcome, prefer: str, verify: str, started: float,
              directory: Path) -> tuple[Path, dict[str, Any], str]:
    """Write every output file of the plan `out` (`outcome`); returns the plan path, meta
    and summary text. `started` is the run's `time.perf_counter()` at its start (wall_s
    includes verifying)."""
    meta = run_meta(search, prefer, verify, time.perf_counter() - started)
    path = directory / "plan.yaml"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_csvs(search, directory)
        write_plots(search, prefer, directory)
        summary = write_summary(search.config, out, meta, directory,
                                search.plan_values(prefer).tolist(),
                                alternatives(search, prefer))
        # the plan last and whole: a plan.yaml is there only once its reports are
        save_plan(build_plan(search.config, out, meta, search.options.seed), path)
    except OSError as exc:
        where = f" ({Path(exc.filename).name})" if exc.filename else ""
        raise RunError(f"cannot write the results to {directory}{where}: "
                       f"{exc.strerror or exc}") from None
    return path, meta, summary
