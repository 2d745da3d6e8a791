"""Fast engine vs DES on configs/rack.yaml, with the settings the optimizer meets there.

The fidelity grids (`fidelity.py`) have one NIC per stream and 30 000-packet
transmissions. rack.yaml has what they lack: several transmissions per NIC (one setting,
one timer), transmissions of millions of packets, and plans chosen because the fast engine
scored them well — where its errors matter most. Settings: the defaults (every NIC's IRQ
on core 0), the NICs spread over their hosts' cores, and the plan `nictune optimize` picks
(search only) for each seed and preference. Each is simulated with both engines (the DES
windowed as `simulate` and `optimize --verify des` run it). Per transmission: the relative
error of throughput and of interrupts (counts below one per 10 000 packets on both sides
are not compared, as in the plan's flags) and the difference in the share of packets
dropped.

Run: `python benchmarks/fidelity_rack.py [--seeds N]` (about 2 minutes for 3 seeds).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from nictune.argtypes import count
from nictune.model import Config, NicSetting, load_config
from nictune.optimizer.checkpoint import Options
from nictune.optimizer.encoding import Encoding
from nictune.optimizer.evaluate import Evaluator
from nictune.optimizer.objectives import INTERRUPT_FLOOR
from nictune.optimizer.rings import first_choice
from nictune.optimizer.search import Search
from nictune.simulator import simulate

RACK = Path(__file__).resolve().parents[1] / "configs" / "rack.yaml"
PREFERENCES = ("throughput", "interrupts")


def setting_sets(config: Config, seeds: int) -> list[tuple[str, dict[str, NicSetting]]]:
    """(label, settings) of the defaults, the spread cores and the optimizer's plans."""
    defaults = {t.id: config.default_setting(t) for t in config.transmissions}
    nics_of: dict[str, list[str]] = {}
    for name, nic in config.nics.items():
        nics_of.setdefault(nic.host, []).append(name)
    spread = {t.id: replace(defaults[t.id], irq_core=nics_of[config.nic_of(t).host].index(
        t.nic) % config.host_of(t).cores) for t in config.transmissions}
    out = [("defaults (all on core 0)", defaults), ("NICs spread over cores", spread)]
    enc = Encoding(config)
    for seed in range(seeds):
        search = Search(config, Options(seed=seed), Evaluator(config, enc, "fast", seed,
                                                               200_000))
        search.run()
        for prefer in PREFERENCES:
            chosen = enc.settings(first_choice(search, prefer))
            out.append((f"plan, seed {seed}, {prefer}",
                        {t.id: s for t, s in zip(config.transmissions, chosen, strict=True)}))
    return out


def errors(config: Config, settings: dict[str, NicSetting]) -> dict[str, Any]:
    """Per-transmission errors of the fast engine against the windowed DES."""
    started = time.perf_counter()
    des = simulate(config, settings, engine="des")
    des_s = time.perf_counter() - started
    fast = simulate(config, settings, engine="fast")
    cores = config.by_core(config.transmissions, settings)
    thr, irq, drops, off = [], [], [], []
    for f, d in zip(fast, des, strict=True):
        thr.append(abs(f.throughput_bps - d.throughput_bps) / max(d.throughput_bps, 1.0))
        floor = max(10.0, d.packets_offered / INTERRUPT_FLOOR)
        if max(f.interrupts, d.interrupts) >= floor:
            irq.append(abs(f.interrupts - d.interrupts) / max(d.interrupts, floor))
            if irq[-1] > 0.05:
                s = settings[d.transmission]
                beside = len(cores[(config.nic_of(config.transmission(d.transmission)).host,
                                    s.irq_core)]) - 1
                off.append(f"{d.transmission} ({s.describe()}, core {s.irq_core} beside "
                           f"{beside}): DES {d.interrupts:,.0f}, fast {f.interrupts:,.0f} "
                           f"({100 * irq[-1]:.0f} %)")
        drops.append(abs(f.packets_dropped - d.packets_dropped) / d.packets_offered)
    return {"throughput": thr, "interrupts": irq, "drops": drops, "des_s": des_s,
            "interrupts_off": off}


def row(label: str, e: dict[str, Any]) -> str:
    thr, irq, drops = (np.asarray(e[k]) for k in ("throughput", "interrupts", "drops"))
    irq_cell = (f"{100 * np.median(irq):.1f} % / {100 * irq.max():.0f} % "
                f"({int((irq > 0.05).sum())} of {irq.size} > 5 %)" if irq.size else "–")
    return (f"| {label} | {100 * np.median(thr):.2f} % / {100 * thr.max():.1f} % "
            f"({int((thr > 0.05).sum())} > 5 %) | {irq_cell} | "
            f"{100 * drops.max():.2f} points | {e['des_s']:.0f} s |")


def main() -> list[tuple[str, dict[str, Any]]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count(1), default=3, help="optimizer seeds (default 3)")
    args = parser.parse_args()
    config = load_config(RACK)
    results = [(label, errors(config, s)) for label, s in setting_sets(config, args.seeds)]
    print("| settings (24 transmissions each) | throughput error median / max | "
          "interrupts error median / max | drops: largest difference | DES |")
    print("|---|---|---|---|---|")
    for label, e in results:
        print(row(label, e))
    plans = [e for label, e in results if label.startswith("plan")]
    if plans:
        every = {k: [x for e in plans for x in e[k]] for k in ("throughput", "interrupts",
                                                               "drops")}
        print(row(f"all {len(plans)} plans", {**every, "des_s": sum(e["des_s"]
                                                                   for e in plans)}))
    print("\ninterrupt rows more than 5 % apart:")
    for label, e in results:
        for line in e["interrupts_off"]:
            print(f"- {label}: {line}")
    return results


if __name__ == "__main__":
    main()
