"""`nictune optimize CONFIG ...`: search settings with NSGA-II and write the plan."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

from nictune.argtypes import count, out_dir
from nictune.errors import InputError, RunError
from nictune.model import load_config
from nictune.optimizer.checkpoint import (
    CHECKPOINT,
    MAX_POPULATION,
    MIN_POPULATION,
    VERIFY,
    Options,
    State,
    check_same_search,
    load_checkpoint,
)
from nictune.optimizer.encoding import Encoding
from nictune.optimizer.evaluate import Evaluator
from nictune.optimizer.export import OUTPUTS, json_document, outcome, write_all
from nictune.optimizer.objectives import PREFERENCES
from nictune.optimizer.parallel import dask_address, mapper
from nictune.optimizer.search import Search
from nictune.simulator import ENGINES

DEFAULTS = Options()
MAX_WORKERS = 1024
# bytes a DES worker may take (default_workers): a window of des.GROWN_PACKETS ×
# des.PACKET_BYTES (1.6 GB) and the interpreter with its libraries (~0.4 GB)
WORKER_MEMORY = 2 << 30
MANY = 500  # transmissions from which writing the results is announced


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize", help="search NIC settings with a genetic algorithm and write a plan",
        description="Search every transmission's NIC setting with NSGA-II over the fast "
                    "engine, verify the plan with the DES, write DIR/plan.yaml and reports.")
    p.add_argument("config", metavar="CONFIG", help="YAML config (see configs/README.md)")
    p.add_argument("--out", type=out_dir, metavar="DIR",
                   help="output directory (default runs/<config stem>)")
    p.add_argument("--population", type=count(MIN_POPULATION, MAX_POPULATION), metavar="N",
                   help=f"individuals per generation (default {DEFAULTS.population})")
    p.add_argument("--generations", type=count(0), metavar="N",
                   help=f"generations (default {DEFAULTS.generations})")
    p.add_argument("--seed", type=count(0), metavar="S", help="random seed (default 0)")
    p.add_argument("--engine", choices=ENGINES,
                   help="engine that evaluates the population (default fast)")
    p.add_argument("--verify", choices=VERIFY,
                   help="re-simulate the plan with the DES and flag disagreements (default des)")
    p.add_argument("--workers", type=count(1, MAX_WORKERS), metavar="N",
                   help="processes for DES runs (default: one per CPU and per 2 GiB of "
                        "available memory, at most two per host of the config with --verify "
                        "des, 1 with --verify none)")
    p.add_argument("--dask", metavar="ADDRESS|local", type=dask_address,
                   help="run DES tasks on a Dask scheduler (ADDRESS) or 'local' (2 workers)")
    p.add_argument("--prefer", choices=PREFERENCES,
                   help="which point of the front becomes the plan (default throughput)")
    p.add_argument("--energy", action="store_true", help="minimise energy as well")
    p.add_argument("--checkpoint-every", type=count(1), metavar="N",
                   help=f"generations between checkpoints (default {DEFAULTS.checkpoint_every})")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run checkpointed in DIR with its options; --generations, "
                        "--checkpoint-every, --verify and --prefer may be changed")
    p.add_argument("--json", action="store_true", help="print a JSON document, not the table")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> tuple[Options, State | None]:
    """Options from the command line, or from the checkpoint when resuming (with the
    checkpoint): what shaped the search must match it, what comes after (how long, the
    plan's pick and check) may change."""
    given = {k: getattr(args, k) for k in ("population", "seed", "engine")
             if getattr(args, k) is not None} | ({"energy": True} if args.energy else {})
    extra = {k: getattr(args, k) for k in ("generations", "checkpoint_every", "verify",
                                           "prefer") if getattr(args, k) is not None}
    if not args.resume:
        return replace(DEFAULTS, **given, **extra), None
    state = load_checkpoint(args.resume)
    options = replace(state.options, **given, **extra)
    check_same_search(state.options, options, f"--resume {args.resume}")
    return options, state


def _out_directory(args: argparse.Namespace) -> Path:
    """--out, the --resume directory or runs/<config stem>, checked before the search
    (not after it)."""
    if args.out:
        out = args.out
    else:
        given = args.resume or str(Path("runs") / Path(args.config).stem)
        try:
            out = out_dir(given)
        except argparse.ArgumentTypeError as exc:
            what = "--resume" if args.resume else "the default output directory (give --out)"
            raise InputError(f"{what}: {exc}") from None
    taken = [n for n in (*OUTPUTS, CHECKPOINT) if (out / n).is_dir()]
    if taken:
        raise InputError(f"{out}: {taken[0]} is a directory; the run writes a file there")
    return out


def _remove_last_plan(out: Path) -> None:
    """From the search's start the directory holds this run's checkpoint: a plan.yaml
    beside it that this run did not write (it is interrupted, or fails writing its
    results) would be deployed as this run's. Called once every input is checked."""
    try:
        (out / "plan.yaml").unlink(missing_ok=True)
    except OSError as exc:
        raise RunError(f"{out}: cannot remove the last run's plan.yaml: "
                       f"{exc.strerror or exc}") from None


def default_workers(engine: str, verify: str, hosts: int, memory: int | None = None) -> int:
    """Processes for the DES runs when `--workers` is not given: one per CPU this process
    may use; verifying a fast-engine search runs two DES tasks per host (defaults and
    plan), so no more than that; none are needed without DES runs. And no more than
    `memory` (bytes; default `available_memory()`) allows at WORKER_MEMORY each."""
    if engine != "des" and verify == "none":
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    memory = available_memory() if memory is None else memory
    fit = cpus if memory is None else max(1, memory // WORKER_MEMORY)
    return max(1, min(fit, cpus if engine == "des" else min(cpus, 2 * hosts)))


def available_memory(meminfo: Path = Path("/proc/meminfo"),
                     cgroups: Path = Path("/proc/self/cgroup"),
                     root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes this process may still take: the node's MemAvailable, or less where its
    cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves less (a container limited to
    4 GiB on a 256 GiB node); None where neither says."""
    room = [r for r in (_meminfo_available(meminfo), *_cgroup_room(cgroups, root))
            if r is not None]
    return min(room) if room else None


def _meminfo_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable" and value.split()[-1:] == ["kB"]:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _cgroup_room(cgroups: Path, root: Path) -> list[int]:
    """Limit minus usage of each memory cgroup of this process that sets a limit."""
    try:
        lines = cgroups.read_text().splitlines()
    except OSError:
        return []
    room = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        # the cgroup's own directory, and the mount's top: a container without a cgroup
        # namespace sees its host's path in /proc but has its own cgroup mounted there
        rels = dict.fromkeys([path.lstrip("/"), ""])
        if controllers == "":  # v2, mounted at root or root/unified
            files = [(d / rel / "memory.max", d / rel / "memory.current")
                     for d in (root, root / "unified") for rel in rels]
        elif "memory" in controllers.split(","):
            files = [(root / "memory" / rel / "memory.limit_in_bytes",
                      root / "memory" / rel / "memory.usage_in_bytes") for rel in rels]
        else:
            continue
        for limit_file, usage_file in files:
            try:
                limit, usage = limit_file.read_text().strip(), usage_file.read_text().strip()
                if limit != "max" and int(limit) < 1 << 60:  # (v1's "none": ~2^63)
                    room.append(max(0, int(limit) - int(usage)))
            except (OSError, ValueError):
                continue
    return room


class _Progress:
    """The run's progress on stderr: a line per generation, and DES runs counted as they
    come in (a DES generation or the plan's check can take minutes; fast-engine runs take
    milliseconds and are not counted). On a terminal one line is rewritten in place — the
    last generation's, the DES runs of the next one appended; elsewhere a line per
    generation, and a DES count at most every `every` seconds."""

    def __init__(self, tty: bool | None = None, every: float = 10.0,
                 prefer: str = "throughput"):
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.every, self.last, self.line, self.prefer = every, time.monotonic(), "", prefer

    def generation(self, gen: int, total: int, gain: float, front: int, rate: float) -> None:
        width = 20
        done = width * gen // max(total, 1)
        speed = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"  # (a DES generation: 0.05)
        line = (f"gen {gen:>4}/{total} [{'#' * done}{'-' * (width - done)}] {self.prefer} "
                f"plan {gain:+.3f} %, front {front}, {speed} evals/s")
        self.line = line if gen < total else ""
        self._write(f"\r{line}\033[K" + ("\n" if gen >= total else "") if self.tty else
                    f"{line}\n")

    def starting(self, engine: str) -> None:
        """On a terminal, what the silence before generation 0's line is (the line
        replaces it): the first run after an install compiles the fast engine."""
        if self.tty:
            extra = (" (the first run after an install also compiles the fast engine, "
                     "~15 s)" if engine == "fast" else "")
            self._write(f"\revaluating generation 0{extra}…\033[K")

    def des_run(self, done: int, total: int, engine: str) -> None:
        if engine != "des":
            return
        count = f"DES runs {done}/{total}"
        if self.tty:
            shown = self.line if done == total else (
                f"{self.line} · {count}" if self.line else f"  {count}")
            self._write(f"\r{shown}\033[K")
        elif time.monotonic() - self.last >= self.every:
            self._write(f"  {count}\n")
            self.last = time.monotonic()

    @staticmethod
    def _write(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    config = load_config(args.config)
    options, saved = _options(args)
    if args.dask and args.workers:
        raise InputError("--workers and --dask exclude each other; pick one")
    for line in config.over_link():
        print(f"note: {line}", file=sys.stderr)
    workers = args.workers or default_workers(options.engine, options.verify, len(config.hosts))
    out = _out_directory(args)
    search: Search | None = None
    stage = ""  # what an interrupt stops once the search is done
    try:
        with mapper(workers, args.dask) as map_fn:
            progress = _Progress(prefer=options.prefer)
            evaluator = Evaluator(config, Encoding(config), options.engine, options.seed,
                                  options.window, map_fn, progress.des_run)
            search = Search(config, options, evaluator, out, progress.generation)
            if saved is not None:
                search.resume(saved)
                if saved.generation >= options.generations:  # (it did so silently)
                    print(f"nictune optimize: the checkpoint has reached generation "
                          f"{saved.generation} (--generations {options.generations}): no "
                          "generation runs, the plan is picked again from its archives "
                          "(give more --generations to search on)", file=sys.stderr)
            else:
                progress.starting(options.engine)
            _remove_last_plan(out)
            with _Interrupts(search):
                search.run()
            if search.stop_requested:
                raise KeyboardInterrupt
            checked = time.perf_counter()
            stage = "while checking the plan"
            if options.verify == "des":  # (the longest silence of a run: say what it is)
                hosts = len(config.hosts)
                print(f"checking the plan with the DES: the defaults and the plan of {hosts} "
                      f"host{'s' * (hosts != 1)} on {workers} worker{'s' * (workers != 1)}",
                      file=sys.stderr, flush=True)
            result = outcome(search, options.prefer, options.verify)
            if options.verify == "des":
                print(f"checked in {time.perf_counter() - checked:.1f} s", file=sys.stderr,
                      flush=True)
            # (inside the map: the reports' ring choice evaluates settings through it)
            stage = "while writing the results"
            written, many = time.perf_counter(), len(config.transmissions) >= MANY
            if many:  # (2 000 transmissions: 10 s of reports)
                print(f"writing the results of {len(config.transmissions):,} transmissions "
                      f"to {out}", file=sys.stderr, flush=True)
            plan_path, meta, summary = write_all(search, result, options.prefer,
                                                 options.verify, started, out)
            stage = f"after writing the results ({plan_path} is whole)"  # (workers ending)
            if many:
                print(f"written in {time.perf_counter() - written:.1f} s", file=sys.stderr,
                      flush=True)
    except KeyboardInterrupt:  # outside the map, so its workers stop at once
        gen = search.state.generation if search and search.state else 0
        stage = stage or f"at generation {gen}"
        # (a checkpoint an earlier run left there is not this run's: --resume refused it)
        resumed_here = saved is not None and Path(args.resume).resolve() == out.resolve()
        ours = ((search is not None and search.checkpointed) or resumed_here) and (
            out / "checkpoint.json").exists()
        where = (f"the last checkpoint (generation {_saved_generation(out)}) is in {out}; "
                 f"continue with --resume {out}") if ours else "no checkpoint was written yet"
        print(f"\nnictune optimize: interrupted {stage}; {where}", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(json_document(plan_path, result, config, meta), indent=1))
    else:
        print(summary)
        others = ", ".join(n for n in OUTPUTS if n != plan_path.name)
        print(f"plan: {plan_path} (and {others} in {out})")
    return 0


class _Interrupts:
    """Ctrl-C during the search: the first asks it to stop after the generation under way
    (which is saved); a second stops at once. A KeyboardInterrupt raised inside NumPy can
    come out as another error (a TypeError from `np.unique` was seen), so the first one is
    a flag the loop reads between generations, and an error raised while the second is
    delivered counts as the interruption it is."""

    def __init__(self, search: Search):
        self.search, self.hard = search, False
        self.active = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> _Interrupts:
        if self.active:
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self.previous)
        if self.hard and exc is not None and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.search.stop_requested:
            self.hard = True
            raise KeyboardInterrupt
        self.search.stop_requested = True
        print("\nnictune optimize: stopping after this generation (Ctrl-C again to stop now)",
              file=sys.stderr, flush=True)


def _saved_generation(out: Path) -> int | str:
    try:
        return json.loads((out / "checkpoint.json").read_text())["generation"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "?"
