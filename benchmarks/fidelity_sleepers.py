"""Cores of sleepers on long transmissions: the fast engine against the DES as `simulate`
runs it (windowed).

The fidelity grids' transmissions are short enough for the fast engine to follow a shared
core of sleepers (passive_wait, watermark) over all of it; on long ones it follows a
window, made longer for a core of long sleeps (`fast_wakes`, docs/engines.md, "A core of
long sleeps gets a longer window"). Each case is one core of 2–3 transmissions of 300 000
to 2 000 000 packets (cbr or Poisson, 50–400 k packets/s), each polled every 1–30 ms or
woken at a watermark of 64 to half its ring with a 1, 10 or 50 ms timeout. Per
transmission: the relative error of the fast engine's interrupts, as it runs, and with no
longer window (where the host's window is too short: the closed form), against the DES's
(counts below max(10, packets / 10 000) on every side are not compared).

`--saturated`: the rates scaled so the core's packet work is 0.95–1.6 of its time (the
rings fill, the queues settle late: the window is made as long as the DES's), and the
comparison is with the host's window instead (`fast_wakes.SATURATED` off).

`--poller`: a busy-poller beside each core's sleepers, its packets 0.1–0.5 of the core's
time (the sleepers drawn as without it; its own interrupts, none, are not compared). The
fast engine follows such a core with its poller (since the thirty-sixth session; before,
both rows were the closed form's, p95 27 %); the second row keeps the host's window, so
mostly the closed form (benchmarks/RESULTS.md).

Run: `python benchmarks/fidelity_sleepers.py [--cases 150] [--seed 1] [--saturated]
[--poller]` (about a minute; two with `--saturated`).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from nictune.argtypes import count
from nictune.model import Config, NicSetting, parse_config
from nictune.simulator import fast_wakes, simulate

FLOOR = 10_000  # a count below one wake-up per this many packets is not compared
WORK = 0.6e-6 + 1000 * 0.2e-9  # s of packet work per packet on the cores drawn


def random_core(rng: np.random.Generator, saturated: bool = False,
                poller: np.random.Generator | None = None
                ) -> tuple[Config, dict[str, NicSetting]]:
    """One host of one core, its 2–3 transmissions all sleepers (`saturated`: their
    packet work 0.95–1.6 of the core's time), and with `poller` (the generator of its
    draws: the sleepers stay those drawn without it) a busy-poller beside them taking
    0.1–0.5 of its time."""
    k = int(rng.integers(2, 4))
    packets = int(rng.choice([300_000, 1_000_000, 2_000_000]))
    drawn = [(rng.uniform(50_000, 400_000), str(rng.choice(["poisson", "cbr"])))
             for _ in range(k)]
    scale = rng.uniform(0.95, 1.6) / (WORK * sum(r for r, _ in drawn)) if saturated else 1.0
    raw = {"hosts": {"h": {"cores": 1, "costs": {"irq": 3e-6, "per_packet": 0.6e-6,
                                                 "per_byte": 0.2e-9}}},
           "nics": {f"n{i}": {"host": "h", "link": "100Gbit/s"} for i in range(k)},
           "transmissions": [{"id": f"t{i}", "nic": f"n{i}", "size": packets * 1000,
                              "packet_size": 1000, "rate": float(rate * scale),
                              "arrival": arrival} for i, (rate, arrival) in enumerate(drawn)]}
    settings = {}
    for i in range(k):
        ring = int(rng.choice([1024, 4096, 8192]))
        if rng.random() < 0.6:
            tick = float(np.exp(rng.uniform(np.log(1e-3), np.log(30e-3))))
            settings[f"t{i}"] = NicSetting("passive_wait", poll_interval=tick, ring_slots=ring)
        else:
            settings[f"t{i}"] = NicSetting(
                "watermark", watermark=int(rng.integers(64, ring // 2)),
                watermark_timeout=float(rng.choice([1e-3, 10e-3, 50e-3])), ring_slots=ring)
    if poller is not None:
        raw["nics"]["poller"] = {"host": "h", "link": "100Gbit/s"}
        raw["transmissions"].append({"id": "poller", "nic": "poller",
                                     "size": packets * 1000, "packet_size": 1000,
                                     "rate": float(poller.uniform(0.1, 0.5) / WORK)})
        settings["poller"] = NicSetting("busy_poll", ring_slots=4096)
    return parse_config(raw, source="fidelity_sleepers"), settings


@contextlib.contextmanager
def no_longer_window(saturated: bool) -> Iterator[None]:
    """The fast engine without the longer windows of saturated cores (and, unless
    `saturated`, of long sleeps)."""
    changed = {"SATURATED": float("inf"), **({} if saturated else {"LONG_WAKES": 0})}
    kept = {name: getattr(fast_wakes, name) for name in changed}
    for name, value in changed.items():
        setattr(fast_wakes, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(fast_wakes, name, value)


def errors(cases: int, seed: int, saturated: bool = False, poller: bool = False
           ) -> dict[str, Any]:
    """Interrupt errors (fast with longer windows, fast without) against the DES."""
    rng = np.random.default_rng(seed)
    pollers = np.random.default_rng([seed, 1]) if poller else None
    longer, closed = [], []
    started = time.perf_counter()
    for _ in range(cases):
        config, settings = random_core(rng, saturated, pollers)
        des = simulate(config, settings, engine="des")
        fast = simulate(config, settings, engine="fast")
        with no_longer_window(saturated):
            without = simulate(config, settings, engine="fast")
        for d, f, c in zip(des, fast, without, strict=True):
            floor = max(10.0, d.packets_offered / FLOOR)
            if max(d.interrupts, f.interrupts, c.interrupts) >= floor:
                longer.append(abs(f.interrupts - d.interrupts) / max(d.interrupts, floor))
                closed.append(abs(c.interrupts - d.interrupts) / max(d.interrupts, floor))
    return {"longer": np.array(longer), "closed": np.array(closed),
            "seconds": time.perf_counter() - started}


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=count(1), default=150, help="cores (default 150)")
    parser.add_argument("--seed", type=int, default=1, help="draw of the cores (default 1)")
    parser.add_argument("--saturated", action="store_true",
                        help="cores with more packet work than time (0.95-1.6)")
    parser.add_argument("--poller", action="store_true",
                        help="a busy-poller beside each core's sleepers (0.1-0.5 of its time)")
    args = parser.parse_args()
    out = errors(args.cases, args.seed, args.saturated, args.poller)
    kind = ("saturated cores" if args.saturated else "cores") + (
        " with a busy-poller" if args.poller else "")
    print(f"{args.cases} {kind} (seed {args.seed}), {out['longer'].size} transmissions "
          f"compared, {out['seconds']:.0f} s")
    print("| fast engine | interrupts median / p95 / max | rows above 5 % |")
    print("|---|---|---|")
    without = ("the host's window (where the core is saturated)" if args.saturated else
               "no longer window (the closed form where the host's is short)")
    for label, key in (("as it runs (longer windows)", "longer"), (without, "closed")):
        e = out[key]
        print(f"| {label} | {100 * np.median(e):.2f} % / {100 * np.quantile(e, 0.95):.2f} % "
              f"/ {100 * e.max():.1f} % | {int((e > 0.05).sum())} |")
    return out


if __name__ == "__main__":
    main()
