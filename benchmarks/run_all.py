"""Run every benchmark (`make bench`): each `benchmarks/bench_*.py` and `fidelity*.py`.

Each benchmark is a script with a `main()` that prints its own table; this runs them one
after another in fresh interpreters (so one's memory or threads do not skew the next) and
stops with exit 1 if any fails. `--only NAME ...` runs a subset.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> list[Path]:
    return sorted(HERE.glob("bench_*.py")) + sorted(HERE.glob("fidelity*.py"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="stems to run, e.g. bench_des fidelity")
    args = parser.parse_args()
    chosen = [b for b in benchmarks() if not args.only or b.stem in args.only]
    if not chosen:
        print(f"no benchmark matches {args.only}", file=sys.stderr)
        return 2
    failed = []
    for bench in chosen:
        print(f"\n=== {bench.name}", flush=True)
        started = time.perf_counter()
        rc = subprocess.call([sys.executable, str(bench)])
        print(f"=== {bench.name}: exit {rc} in {time.perf_counter() - started:.1f} s", flush=True)
        if rc:
            failed.append(bench.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
