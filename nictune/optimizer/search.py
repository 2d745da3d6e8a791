"""The NSGA-II loop (DEAP).

Generation 0: the default setting, the corners of the box and uniform random individuals.
Each generation: a quarter NSGA-II offspring (binary tournament on domination and
crowding, simulated binary crossover, polynomial mutation), the rest mutants of the
per-host archives (`archive.py`: hosts are independent sub-problems, so every row tests
one block per host), one composite per preference and a coordinate probe. The offspring
are evaluated in ONE engine call and `tools.selNSGA2` keeps the best of parents and
offspring. Everything random comes from one seeded NumPy generator whose state the
checkpoint saves, so a resumed run continues exactly as an uninterrupted one
(`variation.py` says why not the global `random`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from deap import base, creator, tools

from nictune.errors import InputError, RunError
from nictune.model import Config
from nictune.optimizer.archive import HostArchive
from nictune.optimizer.checkpoint import Options, State, check_same_search, save_checkpoint
from nictune.optimizer.encoding import GENES_PER_NIC
from nictune.optimizer.evaluate import Evaluator
from nictune.optimizer.objectives import (
    PREFERENCES,
    TIE,
    WEIGHTS,
    dominated,
    end_robust,
    fitness,
    gmean,
    group_mean,
    group_min,
    group_sum,
    ratios,
    violations,
)
from nictune.optimizer.variation import bounds, crossover, mutate, tournament

CXPB, ETA_CX, ETA_MUT = 0.9, 15.0, 20.0
ARCHIVE_MUTATION = 2.0 / GENES_PER_NIC  # per-gene mutation rate of archive mutants
BOUNDARY = 0.2  # chance per NIC block of an archive mutant to get one gene set to a bound

# DEAP classes live at module level so individuals pickle (process pools, Dask).
creator.create("NicFitness3", base.Fitness, weights=WEIGHTS[:3])
creator.create("NicFitness4", base.Fitness, weights=WEIGHTS)
creator.create("NicIndividual3", list, fitness=creator.NicFitness3)
creator.create("NicIndividual4", list, fitness=creator.NicFitness4)


Progress = Callable[[int, int, float, int, float], None]


class Search:
    """One optimisation run; `run()` advances it to `options.generations`."""

    def __init__(self, config: Config, options: Options, evaluate: Evaluator,
                 out: Path | None = None, progress: Progress | None = None):
        self.config, self.options, self.evaluate = config, options, evaluate
        self.encoding = evaluate.encoding
        self.out, self.progress = out, progress
        self.individual = creator.NicIndividual4 if options.energy else creator.NicIndividual3
        self.baseline = evaluate(np.array([self.encoding.default_genes()]))
        self.state: State | None = None
        self.stop_requested = False  # set (e.g. on Ctrl-C): stop after this generation
        self.checkpointed = False  # out/checkpoint.json is this run's (saved or resumed)

    # ------------------------------------------------------------------ scoring
    def score(self, genes: np.ndarray) -> tuple[np.ndarray, ...]:
        """Evaluate genes: individual values (P, K) and violations (P,); per host values
        (P, H, K), violations (P, H) and lowest per-transmission throughput ratio (P, H),
        as predicted or, less `TIE`, with the last packet's worst wait (eligibility)."""
        m = {k: np.nan_to_num(v) for k, v in self.evaluate(genes).items()}
        base = {k: v[0] for k, v in self.baseline.items()}
        r = ratios(m, base, self.options.energy)
        # a pick must be as fast as the default as the engine predicts it, and within the
        # throughput tie of it with the last packet's worst wait (`end_robust`)
        worst_end = ratios(end_robust(self.config, m), end_robust(self.config, base),
                           False)[..., 0]
        lowest = np.minimum(r[..., 0], worst_end + TIE)
        bad = violations(self.config, m, m["fragile"])
        groups = self.encoding.host_transmissions
        return (gmean(r), bad.sum(axis=1), group_mean(r, groups), group_sum(bad, groups),
                group_min(lowest, groups))

    def _evaluated(self, genes: list[list[float]]) -> list[Any]:
        matrix = np.array(genes, dtype=float)
        values, bad, host_values, host_bad, host_worst = self.score(matrix)
        assert self.state is not None
        for h, cols in enumerate(self.encoding.host_genes):
            self.state.archives[h].update(matrix[:, cols], host_values[:, h], host_bad[:, h],
                                          host_worst[:, h])
        self.state.evaluations += len(genes)
        out = []
        for g, fit in zip(genes, fitness(values, bad), strict=True):
            ind = self.individual(g)
            ind.fitness.values = fit
            out.append(ind)
        return out

    # ------------------------------------------------------------------ the loop
    def start(self) -> None:
        """Generation 0: the defaults, the corners of the box, uniform random individuals."""
        o = self.options
        rng = np.random.default_rng(o.seed)
        self.state = State(options=o, config_hash=self.config.digest, generation=0,
                           evaluations=0, population=[], fitness=[], crowding=[],
                           archives=[HostArchive(np.zeros((0, len(c))), np.zeros(
                               (0, 4 if o.energy else 3)), np.zeros(0), np.zeros(0))
                               for c in self.encoding.host_genes])
        seeds = [self.encoding.default_genes(), *self.encoding.corners()][:o.population]
        genes = [*seeds, *rng.random((o.population - len(seeds), self.encoding.size)).tolist()]
        t0 = time.perf_counter()
        pop = tools.selNSGA2(self._evaluated(genes), o.population)
        self._record(pop, rng)
        self._report(t0)

    def run(self) -> State:
        """Run (or continue) to `options.generations`, checkpointing on the way; when
        `stop_requested` is set, stop after the generation under way (and save it)."""
        if self.state is None:
            self.start()
        assert self.state is not None
        pop = self._population()
        rng = np.random.default_rng()
        rng.bit_generator.state = self.state.numpy_state
        while self.state.generation < self.options.generations and not self.stop_requested:
            t0 = time.perf_counter()
            pop = tools.selNSGA2(pop + self._evaluated(self._offspring(pop, rng)),
                                 self.options.population)
            self.state.generation += 1
            self._record(pop, rng)
            self._report(t0)
            if self.state.generation % self.options.checkpoint_every == 0:
                self.save()
        self.save()
        return self.state

    def _report(self, started: float) -> None:
        """Tell `progress` of the generation just recorded (evaluated since `started`)."""
        if self.progress and self.state is not None:
            last = self.state.logbook[-1]
            self.progress(self.state.generation, self.options.generations,
                          last[f"{self.options.prefer}_throughput_gain_pct"], int(last["front"]),
                          self.options.population / max(time.perf_counter() - started, 1e-9))

    def _offspring(self, pop: list[Any], rng: np.random.Generator) -> list[list[float]]:
        """A quarter NSGA-II offspring (tournament, SBX, mutation) of the population; the
        rest mutants of the per-host archives, each row testing one block per host; then
        one composite per preference and a probe."""
        n = self.options.population
        composites = [*(self.composite(p) for p in PREFERENCES), self._probe()][:max(0, n - 1)]
        pairs = (n - len(composites)) // 8
        genes = np.array(pop, dtype=float)[tournament(pop, 2 * pairs, rng)]
        a, b = crossover(genes[:pairs], genes[pairs:], ETA_CX, CXPB, rng)
        kids = mutate(np.concatenate([a, b]), ETA_MUT, 1.0 / GENES_PER_NIC, rng)
        local = bounds(mutate(self._from_archives(n - len(composites) - 2 * pairs, rng),
                              ETA_MUT, ARCHIVE_MUTATION, rng), BOUNDARY, rng,
                       GENES_PER_NIC)
        return [*np.concatenate([kids, local]).tolist(), *composites]

    def _probe(self) -> list[float]:
        """The throughput composite with one gene of every NIC block moved to a bound,
        cycling through genes and bounds by generation: a coordinate probe that tries
        e.g. `same_core` or the largest ring on each host's best setting in turn."""
        assert self.state is not None
        g = np.array(self.composite("throughput")).reshape(-1, GENES_PER_NIC)
        step = self.state.generation % (2 * GENES_PER_NIC)
        g[:, step % GENES_PER_NIC] = float(step // GENES_PER_NIC)
        return g.ravel().tolist()

    def _from_archives(self, k: int, rng: np.random.Generator) -> np.ndarray:
        """k rows whose block for each host is a member of that host's archive: half the
        time one of its preference picks, else any member."""
        assert self.state is not None
        out = np.zeros((k, self.encoding.size))
        for archive, cols in zip(self.state.archives, self.encoding.host_genes, strict=True):
            picks = np.array([archive.best(p) for p in PREFERENCES])
            index = np.where(rng.random(k) < 0.5, picks[rng.integers(0, len(picks), k)],
                             rng.integers(0, len(archive.genes), k))
            out[:, cols] = archive.genes[index]
        return out

    def composite(self, prefer: str) -> list[float]:
        """Genes made of every host's archive pick for `prefer`."""
        assert self.state is not None
        genes = np.zeros(self.encoding.size)
        for archive, cols in zip(self.state.archives, self.encoding.host_genes, strict=True):
            genes[cols] = archive.genes[archive.best(prefer)]
        return genes.tolist()

    def plan_values(self, prefer: str) -> np.ndarray:
        """Individual-level objectives of the composite for `prefer` (from the archives)."""
        assert self.state is not None
        logs = np.zeros(self.state.archives[0].values.shape[1])
        for archive, cols in zip(self.state.archives, self.encoding.host_transmissions,
                                 strict=True):
            logs += np.log(np.maximum(archive.values[archive.best(prefer)], 1e-300)) * len(cols)
        return np.exp(logs / len(self.encoding.transmissions))

    def _record(self, pop: list[Any], rng: np.random.Generator) -> None:
        assert self.state is not None
        s = self.state
        s.population = [list(map(float, ind)) for ind in pop]
        s.fitness = [tuple(ind.fitness.values) for ind in pop]
        s.crowding = [float(getattr(ind.fitness, "crowding_dist", 0.0)) for ind in pop]
        s.numpy_state = rng.bit_generator.state
        values = np.array(s.fitness)
        feasible = values[values[:, 0] > -1.0]
        front = int((~dominated(feasible)).sum()) if len(feasible) else 0
        record = {"generation": s.generation, "evaluations": s.evaluations,
                  "feasible": len(feasible), "front": front}
        for prefer in PREFERENCES:
            v = self.plan_values(prefer)
            record[f"{prefer}_throughput_gain_pct"] = 100.0 * (v[0] - 1.0)
            record[f"{prefer}_interrupts_ratio"] = float(v[1])
            record[f"{prefer}_cpu_ratio"] = float(v[2])
        record["population_best_throughput_ratio"] = float(feasible[:, 0].max()) if len(
            feasible) else 0.0
        record["population_min_interrupts_ratio"] = float(feasible[:, 1].min()) if len(
            feasible) else 0.0
        s.logbook.append(record)

    def _population(self) -> list[Any]:
        assert self.state is not None
        pop = []
        for genes, fit, dist in zip(self.state.population, self.state.fitness,
                                    self.state.crowding, strict=True):
            ind = self.individual(genes)
            ind.fitness.values = fit
            ind.fitness.crowding_dist = dist
            pop.append(ind)
        return pop

    def save(self) -> None:
        """Write `out/checkpoint.json` (atomically) if the run has a directory."""
        if self.out is not None and self.state is not None:
            try:
                save_checkpoint(self.state, self.config.source, self.out)
            except OSError as exc:
                raise RunError(f"cannot write the checkpoint in {self.out}: "
                               f"{exc.strerror or exc}") from None
            self.checkpointed = True

    def resume(self, state: State) -> None:
        """Continue from `state`. What shaped the search must be the same; how long it
        runs and how the plan is picked and checked may change, and the checkpoint is
        saved with this run's options from now on."""
        if state.config_hash != self.config.digest:
            raise InputError(f"{self.config.source}: the config changed since the checkpoint "
                             "was written (config hash differs); start a new run instead")
        check_same_search(state.options, self.options, f"resuming in {self.out}")
        try:
            genes = np.array(state.population, dtype=float)
        except (TypeError, ValueError):
            genes = np.empty(0)  # rows of several lengths, or not numbers
        if genes.shape != (len(state.population), self.encoding.size) or \
                not np.isfinite(genes).all() or [
                a.genes.shape[1] for a in state.archives] != [
                len(cols) for cols in self.encoding.host_genes]:
            raise InputError(f"{self.out}: damaged checkpoint: its individuals or host "
                             "archives do not fit this config's genes (or are not numbers)")
        self.state = replace(state, options=self.options)
