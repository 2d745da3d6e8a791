"""The fast engine: a closed-form / fluid model of docs/model.md, vectorised with NumPy.

`evaluate_batch(config, transmissions, batch)` evaluates P settings-vectors × T
transmissions in one call (a whole GA population); transmissions of one host are coupled
within a row (shared cores, memory bus). `simulate(config, settings)` is the engine
interface shared with the DES and returns `Metrics` with engine "fast".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nictune.model import Config, NicSetting, Transmission
from nictune.simulator.batch import SettingBatch
from nictune.simulator.metrics import Metrics

__all__ = ["METRIC_KEYS", "SettingBatch", "evaluate_batch", "simulate"]

METRIC_KEYS = ("packets_offered", "packets_delivered", "packets_dropped", "packets_stranded",
               "bytes_delivered", "duration_s", "offered_bps", "throughput_bps", "interrupts",
               "empty_wakeups", "cpu_busy_s", "cpu_util", "latency_mean_s", "latency_p99_s",
               "energy_j")


def evaluate_batch(config: Config, transmissions: list[Transmission],
                   batch: SettingBatch) -> dict[str, np.ndarray]:
    """Metrics of every (setting-vector p, transmission t): METRIC_KEYS → arrays (P, T)."""
    raise NotImplementedError


def simulate(config: Config, settings: Mapping[str, NicSetting], *, seed: int = 0,
             exact: bool = False, window: int = 200_000) -> list[Metrics]:
    """One `Metrics` per transmission in `settings` (simulated together); seed, exact and
    window are accepted for interface parity and ignored (the model is deterministic)."""
    raise NotImplementedError
