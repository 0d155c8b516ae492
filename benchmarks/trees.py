"""Two or more source trees of executionkit, per step, measured in turn: each ÷ the first.

Runs `bench_executionkit.py` (the suite's protocol: median of ``--repeat`` runs
in one process) once per tree per round, in a fresh process each time, the
order of the trees reversed every other round so that none always runs first,
for ``--rounds`` rounds; prints per tree the median µs per step and its ratio
to the first tree's, round by round, as the median with its range::

    git archive 73ea97d executionkit | tar -x -C /tmp/ek_before
    python benchmarks/trees.py --shape chain --size 1000 /tmp/ek_before .

A tree is a directory holding an ``executionkit`` package (see `source`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PREFIX = "BENCH-RESULT "


def per_step(tree: str, shape: str, size: int, repeat: int) -> float:
    """µs per step of one measurement of ``tree``, in a fresh process."""
    script = str(HERE / "bench_executionkit.py")
    command = [sys.executable, script, "--shape", shape, "--size", str(size)]
    done = subprocess.run(
        [*command, "--repeat", str(repeat)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "EXECUTIONKIT_BENCH_SOURCE": str(Path(tree).resolve())},
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith(PREFIX))
    result = json.loads(line.removeprefix(PREFIX))
    return float(statistics.median(result["runs_s"])) / size * 1e6


def main(argv: list[str] | None = None) -> int:
    """Measure the trees in turn and print one line per tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="directories holding executionkit/")
    parser.add_argument("--shape", default="chain")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for turn in range(args.rounds):
        for tree in args.trees if turn % 2 == 0 else reversed(args.trees):
            times[tree].append(per_step(tree, args.shape, args.size, args.repeat))
    first = times[args.trees[0]]
    for tree, values in times.items():
        ratios = [value / base for value, base in zip(values, first, strict=True)]
        print(
            f"{args.shape} {args.size:,} {tree}: {statistics.median(values):.2f} µs/step, "
            f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
