"""The search state and its JSON checkpoint (`DIR/checkpoint.json`; never pickle).

The checkpoint holds the options, the config hash, the generation, the population's genes,
fitness values and crowding distances, the per-host archives, the logbook and the NumPy
generator's `bit_generator.state`: everything `--resume` needs to continue exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nictune.errors import TOO_LONG, InputError
from nictune.files import atomic_write
from nictune.optimizer.archive import HostArchive
from nictune.optimizer.objectives import PREFERENCES
from nictune.simulator import ENGINES
from nictune.units import is_finite_number, is_number, shown_int

CHECKPOINT = "checkpoint.json"
CHECKPOINT_FORMAT = 2  # 2: the archives' eligibility holds the worst end (1 did not)
VERIFY = ("des", "none")

MIN_POPULATION = 4
MAX_POPULATION = 10_000  # (each generation compares every pair of a host's archive, O(n²):
# on paper-47 3 000 take 31 s for two generations, 20 000 none in 10 min; a million was
# accepted and asked for 116 GiB)


@dataclass(frozen=True)
class Options:
    """What a run searches with and how it picks and checks its plan; saved in the
    checkpoint and restored by `--resume` (checkpoints older than `verify` and `prefer`
    get their defaults)."""

    population: int = 64
    generations: int = 50
    seed: int = 0
    engine: str = "fast"
    energy: bool = False
    checkpoint_every: int = 5
    window: int = 200_000  # DES steady-state window when `engine` is des
    verify: str = "des"  # after the search: re-simulate the plan with the DES, or none
    prefer: str = "throughput"  # which point of the front becomes the plan


def check_same_search(saved: Options, options: Options, where: str) -> None:
    """Refuse to resume a checkpoint written with `saved` under `options` that shaped the
    search differently; how long it runs and how the plan is picked and checked may
    change."""
    for key in ("population", "seed", "engine", "energy", "window"):
        old, new = getattr(saved, key), getattr(options, key)
        if old != new:
            raise InputError(f"{where}: {key} {new} differs from the checkpoint ({old}); "
                             "leave it out or start a new run")


@dataclass
class State:
    """Everything a checkpoint holds."""

    options: Options
    config_hash: str
    generation: int
    evaluations: int
    population: list[list[float]]
    fitness: list[tuple[float, ...]]
    crowding: list[float]
    archives: list[HostArchive]
    logbook: list[dict[str, float]] = field(default_factory=list)
    numpy_state: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(state: State, config_source: str, out: Path) -> None:
    """Write `out/checkpoint.json` atomically (an interrupt never leaves half a file)."""
    s = state
    doc = {
        "nictune_checkpoint": CHECKPOINT_FORMAT, "config": config_source,
        "config_hash": s.config_hash, "options": asdict(s.options),
        "generation": s.generation, "evaluations": s.evaluations,
        "population": s.population, "fitness": [list(f) for f in s.fitness],
        "crowding": [_json_number(c) for c in s.crowding],
        "archives": [a.to_json() for a in s.archives], "logbook": s.logbook,
        "numpy_state": s.numpy_state,
    }
    atomic_write(out / CHECKPOINT, json.dumps(doc))


def _json_number(x: float) -> float | str:
    return "inf" if x == float("inf") else x


def load_checkpoint(directory: str | Path) -> State:
    """Read `DIR/checkpoint.json`; a missing or damaged one is an `InputError`."""
    path = Path(directory) / CHECKPOINT
    try:
        raw = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise InputError(f"{path}: damaged checkpoint: not UTF-8 text") from None
    except OSError:
        raise InputError(f"--resume {directory}: no checkpoint ({path} is missing); "
                         "run without --resume to start") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: damaged checkpoint: {exc.msg} at line {exc.lineno}") from None
    except ValueError:  # (an integer past Python's limit for reading one)
        raise InputError(f"{path}: damaged checkpoint: {TOO_LONG}") from None
    except RecursionError:
        raise InputError(f"{path}: damaged checkpoint: nested too deeply") from None
    if isinstance(raw, dict) and raw.get("nictune_checkpoint") == 1:
        raise InputError(f"{path}: a checkpoint of an earlier nictune (format 1): its "
                         "archives hold picks from before the last packet's worst wait was "
                         "checked; start a new run")
    if not isinstance(raw, dict) or raw.get("nictune_checkpoint") != CHECKPOINT_FORMAT:
        raise InputError(f"{path}: not a nictune checkpoint (nictune_checkpoint: "
                         f"{CHECKPOINT_FORMAT} expected)")
    try:
        options = Options(**raw["options"])
        state = State(
            options=options, config_hash=raw["config_hash"],
            generation=int(raw["generation"]), evaluations=int(raw["evaluations"]),
            population=raw["population"], fitness=[tuple(f) for f in raw["fitness"]],
            crowding=[float(c) for c in raw["crowding"]],
            archives=[HostArchive.from_json(a) for a in raw["archives"]],
            logbook=raw["logbook"], numpy_state=raw["numpy_state"])
        _check_state(state)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"{path}: damaged checkpoint: {exc}") from None
    return state


def _count(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_logbook(logbook: object, generation: int) -> None:
    """ValueError unless `logbook` is a row per generation so far, each with the same
    keys (the first "generation") and numbers for values, as `Search._record` writes."""
    if not isinstance(logbook, list) or len(logbook) != generation + 1:
        raise ValueError(f"logbook: expected a list of {generation + 1} rows")
    keys = list(logbook[0]) if isinstance(logbook[0], dict) else []
    for row in logbook:
        if keys[:1] != ["generation"] or not isinstance(row, dict) or list(row) != keys or \
                not all(is_number(v) for v in row.values()):
            raise ValueError(f"logbook: a malformed row {str(row)[:60]}")


def _check_state(s: State) -> None:
    """ValueError naming the first thing a search could not resume from."""
    o = s.options
    if o.verify not in VERIFY or o.prefer not in PREFERENCES or o.engine not in ENGINES:
        raise ValueError(f"options engine {o.engine!r}, verify {o.verify!r}, prefer "
                         f"{o.prefer!r}")
    for name, least, most in (("population", MIN_POPULATION, MAX_POPULATION),
                              ("generations", 0, None), ("seed", 0, None),
                              ("checkpoint_every", 1, None), ("window", 1, None)):
        value = getattr(o, name)
        if not _count(value, least) or (most is not None and value > most):
            shown = shown_int(value) if isinstance(value, int) else repr(value)
            raise ValueError(f"options {name} {shown}")
    if s.generation < 0 or s.evaluations < 0:
        raise ValueError(f"generation {s.generation}, evaluations {s.evaluations}")
    if not s.population or not len(s.population) == len(s.fitness) == len(s.crowding):
        raise ValueError(f"{len(s.population)} individuals, {len(s.fitness)} fitnesses, "
                         f"{len(s.crowding)} crowding distances")
    arity = 3 + o.energy  # (the genes' shape is the config's: Search.resume checks it)
    if any(len(f) != arity for f in s.fitness):
        raise ValueError(f"fitnesses of the wrong shape ({arity} objectives)")
    if not all(is_finite_number(v) for f in s.fitness for v in f) or \
            not all(is_finite_number(c) or c == math.inf for c in s.crowding):
        raise ValueError("a fitness or crowding distance that is not a finite number")
    if not s.archives or any(a.genes.ndim != 2 or not len(a.genes) for a in s.archives):
        raise ValueError("an empty or malformed host archive")
    for a in s.archives:  # (rows of genes, values, violation and worst belong together)
        n = len(a.genes)
        if a.values.ndim != 2 or len(a.values) != n or a.violation.shape != (n,) or \
                a.worst.shape != (n,):
            raise ValueError("a host archive whose genes, values, violation and worst "
                             "differ in length")
        if not all(np.isfinite(x).all() for x in (a.genes, a.values, a.violation, a.worst)):
            raise ValueError("a host archive with a value that is not a finite number")
    if not all(isinstance(g, list) and all(is_finite_number(x) for x in g)
               for g in s.population):
        raise ValueError("an individual whose genes are not finite numbers")
    _check_logbook(s.logbook, s.generation)
    try:
        np.random.Generator(np.random.PCG64()).bit_generator.state = s.numpy_state
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"numpy_state: {exc}") from None
