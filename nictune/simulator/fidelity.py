"""Fast vs DES: random cases and the relative errors between the two engines.

`random_cases(count, seed)` draws small configs across modes, parameters, packet sizes,
loads (up to overload and receive livelock) and shared hosts (several NICs, some on one
core, a tight memory bus); `compare(case)` runs both engines on one case and returns one
row of errors per transmission. `benchmarks/fidelity.py` and the fidelity test use these.

Errors: throughput, interrupts, CPU busy time and mean latency are relative to the DES value
(|fast − des| / max(|des|, floor)); drops are compared as a share of the packets offered
(|Δdrops| / offered), because "0 vs 3 drops of 20 000" is agreement, not a 100 % error.
`slower_cores` and `compare(noise=True, slower=f)` run the DES on cores f times slower
(same arrivals), and `band_error` measures a value against the range of the DES's values
over such runs: how much of a disagreement is the reference's own sensitivity to its
costs rather than the fast engine's error. `compare_saved` reruns only the fast engine
against the DES side of rows saved by an earlier `compare` of the same case (`digest`),
for iterating on the fast engine in seconds instead of rerunning the DES.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nictune.errors import InputError
from nictune.model import (
    MODES,
    PLACEMENTS,
    Config,
    NicSetting,
    Transmission,
    parse_config,
    parse_setting,
)
from nictune.simulator import simulate
from nictune.simulator.des import after_arrivals
from nictune.simulator.fast_base import Workload
from nictune.simulator.metrics import Metrics

METRICS = ("throughput", "interrupts", "cpu", "drops", "latency")


@dataclass(frozen=True)
class Case:
    """One config plus a setting for each of its transmissions."""

    name: str
    kind: str  # "single" or "shared"
    raw: dict[str, Any]
    settings: dict[str, dict[str, Any]]  # transmission id -> setting in config form

    def config(self) -> Config:
        return parse_config(self.raw, source=self.name)

    def nic_settings(self, config: Config) -> dict[str, NicSetting]:
        out = {}
        for t in config.transmissions:
            nic = config.nic_of(t)
            out[t.id] = parse_setting(self.settings[t.id], nic, config.hosts[nic.host],
                                      self.name, f"settings.{t.id}")
        return out


def _logu(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _setting(rng: np.random.Generator, mode: str, ring: int, rate: float, cores: int
             ) -> dict[str, Any]:
    s: dict[str, Any] = {"mode": mode, "ring_slots": ring,
                         "irq_core": int(rng.integers(0, cores)),
                         "placement": PLACEMENTS[int(rng.integers(0, len(PLACEMENTS)))]}
    if mode == "passive_wait":
        # between ~0.3 and ~300 packets per tick, not below 2 µs
        s["poll_interval"] = max(2e-6, _logu(rng, 0.3, 300.0) / rate)
    if mode == "watermark":
        s["watermark"] = max(1, min(ring // 2, round(_logu(rng, 1.0, ring / 2))))
        s["watermark_timeout"] = 0.0 if rng.random() < 0.35 else _logu(rng, 0.5, 500) / rate
    return s


def _costs(rng: np.random.Generator) -> dict[str, float]:
    return {"irq": _logu(rng, 1e-6, 10e-6), "per_packet": _logu(rng, 0.2e-6, 1.2e-6),
            "per_byte": _logu(rng, 0.05e-9, 0.5e-9), "poll_check": 0.05e-6}


def _work(costs: dict[str, float], size: int) -> float:
    return costs["per_packet"] + size * costs["per_byte"]


def _transmission(rng: np.random.Generator, tid: str, nic: str, costs: dict[str, float],
                  mode: str, packets: int, load: float) -> dict[str, Any]:
    size = int(rng.choice([64, 128, 256, 512, 1000, 1500, 4000, 9000]))
    per = _work(costs, size) + (costs["irq"] if mode == "active_wait" else 0.0)
    rate = load / per
    arrival = str(rng.choice(["cbr", "poisson", "onoff"], p=[0.4, 0.45, 0.15]))
    t = {"id": tid, "nic": nic, "size": packets * size, "packet_size": size,
         "rate": rate, "arrival": arrival}
    if arrival == "onoff":
        on = _logu(rng, 200.0, 5000.0) / rate
        t["onoff"] = {"on": on, "off": on * float(rng.uniform(0.2, 1.0))}
        t["rate"] = rate * 0.5  # the burst rate is rate·(on+off)/on ≈ 1.2–2× this
    return t


def _load(rng: np.random.Generator) -> float:
    """A transmission's load alone on its core: mostly below 1, some overload."""
    return _logu(rng, 0.05, 0.9) if rng.random() < 0.75 else _logu(rng, 0.9, 2.0)


NIC = {"host": "h", "link": "100Gbit/s", "max_ring_slots": 32768, "min_ring_slots": 16}


def random_cases(count: int, seed: int = 0, packets: int = 20_000,
                 shared_share: float = 0.2) -> list[Case]:
    """`count` cases; about `shared_share` of them put 2–4 NICs on one host."""
    rng = np.random.default_rng([seed, 31337])
    cases = []
    for i in range(count):
        costs = _costs(rng)
        shared = rng.random() < shared_share
        n_nics = int(rng.integers(2, 5)) if shared else 1
        cores = int(rng.integers(1, 3)) if shared else 2
        host: dict[str, Any] = {"cores": cores, "costs": costs}
        if shared and rng.random() < 0.4:
            host["memory"] = {"bandwidth": _logu(rng, 0.5e9, 5e9), "traffic_per_byte": 3}
        raw: dict[str, Any] = {"hosts": {"h": host}, "nics": {}, "transmissions": []}
        settings = {}
        for j in range(n_nics):
            mode = MODES[int(rng.integers(0, len(MODES)))]
            load = _load(rng)
            if shared:
                load /= n_nics / 1.5
            n = packets if not shared else int(packets / n_nics * rng.uniform(0.6, 1.4))
            t = _transmission(rng, f"t{j}", f"n{j}", costs, mode, n, load)
            raw["nics"][f"n{j}"] = dict(NIC)
            raw["transmissions"].append(t)
            ring = int(rng.choice([64, 256, 1024, 4096, 16384]))
            settings[t["id"]] = _setting(rng, mode, ring, t["rate"], cores)
        cases.append(Case(name=f"case-{i}", kind="shared" if shared else "single", raw=raw,
                          settings=settings))
    return cases


def nic_pair_cases(count: int, seed: int = 0, packets: int = 20_000) -> list[Case]:
    """`count` cases where one NIC carries two transmissions (one setting, so one timer and
    one IRQ core for both), half of them beside a second NIC of one transmission, on a
    host of 1–2 cores: what rack.yaml's NICs are and `random_cases` never draws."""
    rng = np.random.default_rng([seed, 4242])
    cases = []
    for i in range(count):
        costs = _costs(rng)
        cores = int(rng.integers(1, 3))
        host: dict[str, Any] = {"cores": cores, "costs": costs}
        raw: dict[str, Any] = {"hosts": {"h": host}, "nics": {}, "transmissions": []}
        settings = {}
        streams = [("n0", 2)] + ([("n1", 1)] if rng.random() < 0.5 else [])
        total = sum(k for _, k in streams)
        for nic, k in streams:
            mode = MODES[int(rng.integers(0, len(MODES)))]
            raw["nics"][nic] = dict(NIC)
            ring = int(rng.choice([64, 256, 1024, 4096, 16384]))
            for j in range(k):
                load = _load(rng)
                n = int(packets / total * rng.uniform(0.6, 1.4))
                t = _transmission(rng, f"t{len(settings)}", nic, costs, mode, n,
                                  load / (total / 1.5))
                raw["transmissions"].append(t)
                if j == 0:
                    first = _setting(rng, mode, ring, t["rate"], cores)
                settings[t["id"]] = first
        cases.append(Case(name=f"pair-{i}", kind="shared", raw=raw, settings=settings))
    return cases


def burst_watermark_cases(count: int, seed: int = 0) -> list[Case]:
    """`count` cases of one onoff transmission alone on a core, woken by a watermark above
    a burst (1.05 to 6 bursts' packets) with no timeout, one shorter than the gap, a few
    cycles or 0.5 s (the default's): what the search picks for bursty traffic and the
    grids seldom draw. Mean loads 0.1–0.95, so bursts run up to about 2× past the core."""
    rng = np.random.default_rng([seed, 2929])
    cases = []
    for i in range(count):
        costs = _costs(rng)
        size = int(rng.choice([64, 256, 1000, 1500, 9000]))
        rate = float(rng.uniform(0.1, 0.95)) / _work(costs, size)
        on = _logu(rng, 100.0, 3000.0) / rate
        off = on * float(rng.uniform(0.2, 1.5))
        n = int(rng.integers(5000, 20000))
        raw = {"hosts": {"h": {"cores": 1, "costs": costs}},
               "nics": {"n0": {**NIC, "link": "400Gbit/s"}},
               "transmissions": [{"id": "t0", "nic": "n0", "size": n * size, "packet_size": size,
                                  "rate": rate, "arrival": "onoff",
                                  "onoff": {"on": on, "off": off}}]}
        per_burst = rate * (on + off)
        setting = {"mode": "watermark", "ring_slots": 32768, "irq_core": 0,
                   "placement": "same_core",
                   "watermark": int(min(16384, max(2, per_burst * rng.uniform(1.05, 6.0)))),
                   "watermark_timeout": float(rng.choice(
                       [0.0, off / 2.0, (on + off) * rng.uniform(1.0, 10.0), 0.5]))}
        cases.append(Case(name=f"bursts-{i}", kind="single", raw=raw, settings={"t0": setting}))
    return cases


NEIGHBOURS = ("busy_poll", "active_wait", "passive_wait", "watermark")


def archetype_cases(count: int, seed: int = 0, packets: int = 20_000) -> list[Case]:
    """`count` two-transmission cases, the simplest shared core: one batched consumer
    ("t0": passive_wait or watermark, any arrival process, load 0.05–0.9) beside one
    neighbour on the same core ("t1": each of `NEIGHBOURS` in turn, Poisson arrivals,
    load 0–0.8, arriving for all of t0's span), on a host of one core. A model of shared
    cores has to be right here before it can be right on the grids' mixtures."""
    rng = np.random.default_rng([seed, 5151])
    cases = []
    for i in range(count):
        costs = _costs(rng)
        mode = ("passive_wait", "watermark")[int(rng.integers(0, 2))]
        t0 = _transmission(rng, "t0", "n0", costs, mode, packets, _logu(rng, 0.05, 0.9))
        kind = NEIGHBOURS[i % len(NEIGHBOURS)]
        size = int(rng.choice([64, 256, 1500]))
        load = float(rng.uniform(0.0, 0.8))
        rate = load / (_work(costs, size) + (costs["irq"] if kind == "active_wait" else 0.0))
        span = packets / t0["rate"]
        t1 = {"id": "t1", "nic": "n1", "size": max(10, int(rate * span * 1.05)) * size,
              "packet_size": size, "rate": rate, "arrival": "poisson"}
        raw = {"hosts": {"h": {"cores": 1, "costs": costs}},
               "nics": {"n0": dict(NIC), "n1": dict(NIC)}, "transmissions": [t0, t1]}
        ring = int(rng.choice([256, 1024, 4096]))
        settings = {"t0": _setting(rng, mode, ring, t0["rate"], 1),
                    "t1": _setting(rng, kind, 4096, rate, 1)}
        cases.append(Case(name=f"arch-{i}-{kind}", kind="shared", raw=raw,
                          settings=settings))
    return cases


def packet_load(case: Case) -> float:
    """The packet work a case's transmissions bring to a core per second, at the same-core
    cost (active_wait's interrupts included, the batched modes' wake-ups not), as a share
    of the core: the load `archetype_cases` puts on its one core."""
    costs = case.raw["hosts"]["h"]["costs"]
    return sum(t["rate"] * (_work(costs, t["packet_size"])
                            + (costs["irq"] if case.settings[t["id"]]["mode"] == "active_wait"
                               else 0.0))
               for t in case.raw["transmissions"])


def on_defaults(cases: list[Case]) -> list[Case]:
    """The same configs with every transmission on its default setting (PF_RING's:
    watermark 128, a 0.5 s timeout, 4 096 slots, the NIC's IRQ core): what every plan is
    compared against. The grids never draw it: their timeouts are 0.5–500 packet gaps,
    the default's outlasts most 30 000-packet transfers, so whether the last packets
    wait for it decides the throughput."""
    out = []
    for case in cases:
        config = case.config()
        # (NicSetting's fields are the config keys; the ones a mode does not use are None)
        settings = {t.id: {k: v for k, v in vars(config.default_setting(t)).items()
                           if v is not None} for t in config.transmissions}
        out.append(Case(name=f"{case.name}@default", kind=case.kind, raw=case.raw,
                        settings=settings))
    return out


# metric -> (Metrics key, the key it is relative to, floor of that)
MEASURES: dict[str, tuple[str, str, float]] = {
    "throughput": ("throughput_bps", "throughput_bps", 1.0),
    "interrupts": ("interrupts", "interrupts", 1.0),
    "cpu": ("cpu_busy_s", "cpu_busy_s", 1e-9),
    "drops": ("packets_dropped", "packets_offered", 1.0),
    "latency": ("latency_mean_s", "latency_mean_s", 1e-9)}


def band_error(value: float, scale: float, band: Sequence[float], floor: float = 1.0
               ) -> float:
    """How far `value` lies outside the range of `band`, relative to `scale` (at least
    `floor`); 0 inside it. With `band` one value, the plain relative error."""
    low, high = min(band), max(band)
    outside = low - value if value < low else value - high if value > high else 0.0
    return outside / max(abs(scale), floor)


def range_errors(fast: dict[str, Any], des: dict[str, Any], *others: dict[str, Any]
                 ) -> dict[str, float]:
    """The errors of one transmission (Metrics as JSON): `fast` against `des`, or against
    the range of `des` and `others` (the DES on slightly slower and faster cores; 0
    inside it). Throughput, interrupts, CPU and mean latency relative to the DES's value,
    drops as a share of the packets offered (`MEASURES`)."""
    return {metric: band_error(fast[key], des[scale], [des[key], *(o[key] for o in others)],
                               floor)
            for metric, (key, scale, floor) in MEASURES.items()}


def slower_cores(config: Config, factor: float) -> Config:
    """`config` with every host's cores `factor` times slower: each CPU cost (interrupt,
    per packet, per byte, poll check) times `factor`."""
    if factor <= 0:
        raise ValueError(f"a core speed factor must be positive, got {factor}")
    hosts = {name: replace(h, costs=replace(
        h.costs, irq=h.costs.irq * factor, per_packet=h.costs.per_packet * factor,
        per_byte=h.costs.per_byte * factor, poll_check=h.costs.poll_check * factor))
        for name, h in config.hosts.items()}
    return replace(config, hosts=hosts)


def compare(case: Case, seed: int = 0, noise: bool = False, slower: float = 1.0
            ) -> list[dict[str, Any]]:
    """Run both engines on `case`; one row per transmission with both results and errors.
    `noise`: the DES against itself instead — seed + 1 in the fast engine's place (row
    key "fast"), the floor below which fast-vs-DES errors are noise. With `slower` ≠ 1
    the second DES run keeps the seed and runs on cores `slower` times slower
    (`slower_cores`): how far a slightly slower or faster core moves the DES."""
    if slower != 1.0 and not noise:
        raise ValueError("slower cores are for the DES's second run: pass noise=True")
    config = case.config()
    settings = case.nic_settings(config)
    des = simulate(config, settings, engine="des", seed=seed, exact=True)
    second = seed + 1 if slower == 1.0 else seed  # the second DES run's seed
    other = slower_cores(config, slower) if slower != 1.0 else config
    fast = (simulate(other, settings, engine="des", seed=second, exact=True) if noise
            else simulate(config, settings, engine="fast", seed=seed))
    spans = _spans(config)
    key = digest(case)
    rows = []
    for d, f in zip(des, fast, strict=True):
        t = config.transmission(d.transmission)
        rows.append(_row(case, key, t, f, d.to_json(),
                         {"des": after_arrivals(config, t, d, seed),
                          "fast": after_arrivals(config, t, f, second) if noise
                          else f.duration_s - spans[t.id]}))
    return rows


def compare_saved(case: Case, saved: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`compare(case)` with the DES side taken from `saved` (transmission id → a row an
    earlier `compare` of this case returned) instead of simulated again: only the fast
    engine runs. Raises InputError when a transmission has no row, the rows are of
    another case (their `digest` differs) or lack a metric; valid while the DES is
    unchanged."""
    config = case.config()
    key = digest(case)
    fast = simulate(config, case.nic_settings(config), engine="fast")
    spans = _spans(config)
    rows = []
    for f in fast:
        old = saved.get(f.transmission)
        if old is None or old.get("digest") != key:
            why = ("no row" if old is None else "a row with no case digest (written before "
                   "they were kept)" if "digest" not in old else "a row of another case")
            raise InputError(f"{case.name}/{f.transmission}: {why} among the saved rows")
        try:
            rows.append(_row(case, key, config.transmission(f.transmission), f, old["des"],
                             {"des": float(old["after_arrivals_s"]["des"]),
                              "fast": f.duration_s - spans[f.transmission]}))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{case.name}/{f.transmission}: a saved row without the "
                             f"DES's {e}") from None
    return rows


def _spans(config: Config) -> dict[str, float]:
    """Each transmission's arrival span in the fast engine (evenly spaced at the mean rate,
    onoff by bursts): a row's "after_arrivals_s" of the fast engine is its duration less
    this, the DES's its own (`after_arrivals`)."""
    return dict(zip([t.id for t in config.transmissions],
                    Workload.build(config, list(config.transmissions)).span.tolist(),
                    strict=True))


def digest(case: Case) -> str:
    """A fingerprint of `case`'s config and settings, kept in each row of it."""
    text = json.dumps([case.raw, case.settings], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _row(case: Case, key: str, t: Transmission, fast: Metrics, des: dict[str, Any],
         after: dict[str, float]) -> dict[str, Any]:
    """One row of `compare`: both engines' metrics (as JSON) and the errors."""
    fast_json = fast.to_json()
    return {"case": case.name, "kind": case.kind, "digest": key, "transmission": t.id,
            "setting": fast.setting.describe(), "arrival": t.arrival,
            "after_arrivals_s": after, "des": des, "fast": fast_json,
            "errors": range_errors(fast_json, des)}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median, p95 and max of each error over all rows."""
    out = {}
    for key in METRICS:
        v = np.array([r["errors"][key] for r in rows])
        out[key] = {"median": float(np.median(v)), "p95": float(np.percentile(v, 95)),
                    "max": float(v.max())}
    return out
