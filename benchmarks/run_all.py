"""Run every benchmark (`make bench`): each `benchmarks/bench_*.py` and `fidelity*.py`.

Each benchmark is a script with a `main()` that prints its own table; this runs them one
after another in fresh interpreters (so one's memory or threads do not skew the next) and
stops with exit 1 if any fails. `--only NAME ...` runs a subset (`make bench
BENCH_ARGS="--only bench_des"`). A benchmark that cannot run here (not root, no hping3)
prints `skipped: why` and exits 0; the last line names those, which measured nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIPPED = re.compile(r"^(?:\w+: )?skipped: ")  # a benchmark that could not run here


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
    failed, skipped = [], []
    for bench in chosen:
        print(f"\n=== {bench.name}", flush=True)
        started = time.perf_counter()
        # (unbuffered: through a pipe a script's lines came only when it ended)
        with subprocess.Popen([sys.executable, "-u", str(bench)], stdout=subprocess.PIPE,
                              text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                print(line, end="", flush=True)
                if SKIPPED.match(line):
                    skipped.append(f"{bench.name} ({line.split('skipped: ', 1)[1].strip()})")
        rc = proc.returncode
        print(f"=== {bench.name}: exit {rc} in {time.perf_counter() - started:.1f} s", flush=True)
        if rc:
            failed.append(bench.name)
    if skipped:
        print(f"skipped, nothing measured: {'; '.join(skipped)}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
