"""The receive-path simulator: one interface, two engines (DESIGN §3, docs/model.md).

`simulate(config, settings)` returns one `Metrics` per transmission in `settings`;
transmissions of one host are simulated together. `engine="des"` is the SimPy reference
(`nictune.simulator.des`), `engine="fast"` the vectorised model (`nictune.simulator.fast`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from nictune.errors import InputError
from nictune.model import Config, NicSetting
from nictune.simulator.metrics import Metrics

ENGINES = ("des", "fast")

__all__ = ["ENGINES", "Metrics", "simulate"]


def simulate(config: Config, settings: Mapping[str, NicSetting], *, engine: str = "des",
             seed: int = 0, exact: bool = False, window: int = 200_000) -> list[Metrics]:
    """Simulate each transmission in `settings` (id -> setting) under its setting."""
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    try:
        module = importlib.import_module(f"nictune.simulator.{engine}")
    except ModuleNotFoundError as exc:
        if exc.name != f"nictune.simulator.{engine}":
            raise
        raise InputError(f"engine {engine!r} is not available in this installation") from None
    return module.simulate(config, settings, seed=seed, exact=exact, window=window)
