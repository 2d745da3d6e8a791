"""Evaluating gene matrices with an engine: the fast one in one vectorised call, the DES
one run per host and distinct setting through a swappable `map`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nictune.model import Config, NicSetting
from nictune.optimizer.encoding import Encoding
from nictune.optimizer.objectives import end_wait, fragile
from nictune.optimizer.parallel import Map, serial_map, simulate_task
from nictune.simulator.batch import SettingBatch
from nictune.simulator.fast import METRIC_KEYS, Workload, evaluate, metrics_rows
from nictune.simulator.metrics import Metrics


def metrics_arrays(rows: list[list[Metrics]]) -> dict[str, np.ndarray]:
    """`Metrics` of P rows × T transmissions as the fast engine's arrays (P, T)."""
    return {k: np.array([[float(getattr(m, k)) for m in row] for row in rows])
            for k in METRIC_KEYS}


class Evaluator:
    """Metrics (P, T) of a gene matrix (P, G) with the chosen engine.

    fast: one `evaluate` call for the whole matrix, on a `Workload` built once (a host's
    figures depend on its own transmissions alone). des: one DES run per host and distinct
    host setting, spread with `map` and cached (many individuals share settings);
    `on_task(done, total, engine)` is told of every finished DES run.
    """

    def __init__(self, config: Config, encoding: Encoding, engine: str, seed: int,
                 window: int, map_fn: Map = serial_map,
                 on_task: Callable[[int, int, str], None] | None = None):
        self.config, self.encoding, self.engine = config, encoding, engine
        self.seed, self.window, self.map, self.on_task = seed, window, map_fn, on_task
        self.cache: dict[tuple[str, int, tuple[NicSetting, ...]], list[Metrics]] = {}
        self._workload: Workload | None = None

    @property
    def workload(self) -> Workload:
        """The fast engine's inputs, built at its first use."""
        if self._workload is None:
            self._workload = Workload.build(self.config, self.encoding.transmissions,
                                            self.seed)
        return self._workload

    def __call__(self, genes: np.ndarray) -> dict[str, np.ndarray]:
        """Metrics (P, T) plus `fragile` and `end_wait` (see `objectives`)."""
        batch = self.encoding.batch(genes)
        if self.engine == "fast":
            out = evaluate(self.workload, batch)
        else:
            p, t = batch.shape
            out = metrics_arrays(self.run([[batch.setting(i, j) for j in range(t)]
                                           for i in range(p)], "des"))
        return {**out, "fragile": fragile(batch), "end_wait": end_wait(batch)}

    def run(self, settings: list[list[NicSetting]], engine: str) -> list[list[Metrics]]:
        """`Metrics` of rows of per-transmission settings: the fast engine's in one call,
        the DES's one run per host and distinct host setting, spread with `map`."""
        if engine == "fast" and settings:
            out = evaluate(self.workload, SettingBatch.from_settings(settings))
            return metrics_rows(self.encoding.transmissions, settings, out)
        ids = [t.id for t in self.encoding.transmissions]
        todo: dict[tuple[str, int, tuple[NicSetting, ...]], dict[str, NicSetting]] = {}
        for row in settings:
            for h, cols in enumerate(self.encoding.host_transmissions):
                key = (engine, h, tuple(row[j] for j in cols))
                if key not in self.cache and key not in todo:
                    todo[key] = {ids[j]: row[j] for j in cols}
        tasks = [(self.config, s, engine, self.seed, self.window) for s in todo.values()]
        for done, (key, result) in enumerate(
                zip(todo, self.map(simulate_task, tasks), strict=True), 1):
            self.cache[key] = result
            if self.on_task:
                self.on_task(done, len(tasks), engine)
        out = []
        for row in settings:
            metrics: list[Metrics | None] = [None] * len(ids)
            for h, cols in enumerate(self.encoding.host_transmissions):
                key = (engine, h, tuple(row[j] for j in cols))
                for j, m in zip(cols, self.cache[key], strict=True):
                    metrics[j] = m
            out.append([m for m in metrics if m is not None])
        return out
