"""What checkpoints cost a chain: no checkpoint_fn, one that drops each, one that keeps all.

The speed benchmarks keep every checkpoint in a list (``saved.append``), as a
unit test does; a store writes each one out and drops it. This script times
executionkit chains three ways, each (way, size) in a fresh process, under the
same protocol as the suite (`bench_harness`: warm-up, then 5 repeats, median):

- ``none``: no ``checkpoint_fn`` (the runner takes no checkpoint at all);
- ``drop``: ``checkpoint_fn=lambda checkpoint: None``;
- ``keep``: ``checkpoint_fn=saved.append``, as benchmarked.

The difference between ``none`` and ``drop`` is what taking a checkpoint costs;
the growth of ``keep`` with size, next to ``drop``'s, is what keeping thousands
of them alive costs. Prints a Markdown table::

    python benchmarks/checkpoint_cost.py [--sizes 100,4000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import TYPE_CHECKING

import source

source.put_on_path()

import bench_harness  # noqa: E402
from bench_executionkit import counting, noop  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

    import shapes
    from bench_harness import RunFn

WAYS = ("none", "drop", "keep")
TIMES = "\N{MULTIPLICATION SIGN}"


def build(way: str, dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The protocol's ``build`` for one way of handling checkpoints."""
    # With counts: the protocol's check that every step runs once.
    workflow = Workflow(
        Step(name, noop if counts is None else counting(name, counts), depends_on=deps)
        for name, deps in dag
    )

    async def run() -> Callable[[], int]:
        saved: list[WorkflowCheckpoint] = []
        if way == "none":
            await workflow.run()
        elif way == "drop":
            await workflow.run(checkpoint_fn=_drop)
        else:
            await workflow.run(checkpoint_fn=saved.append)
        return saved.__len__

    return run


def _drop(checkpoint: WorkflowCheckpoint) -> None:
    del checkpoint


def measure_one(way: str, size: int, repeat: int) -> float:
    """Median microseconds per step of one way at one size, in this process."""
    result = bench_harness.measure(
        lambda dag, counts: build(way, dag, counts),
        "chain",
        size,
        bench_harness.Timing(repeat=repeat),
    )
    runs: list[float] = sorted(result["runs_s"])  # type: ignore[call-overload]
    return runs[len(runs) // 2] / size * 1e6


def main() -> int:
    """Measure every (way, size) in a process of its own and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,4000", help="chain lengths, default 100,4000")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats (median)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # way:size, in a child process
    args = parser.parse_args()
    if args.case:
        way, size = args.case.split(":")
        print(json.dumps(measure_one(way, int(size), args.repeat)))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    table: dict[tuple[str, int], float] = {}
    for way in WAYS:
        for size in sizes:
            child = [sys.executable, __file__, "--case", f"{way}:{size}", "--repeat"]
            child.append(str(args.repeat))
            done = subprocess.run(child, capture_output=True, text=True, check=True)
            table[way, size] = float(done.stdout.strip().splitlines()[-1])
    first = sizes[0]
    print(f"| checkpoint_fn | {' | '.join(f'{size:,} steps' for size in sizes)} | growth |")
    print(f"|---|{'---:|' * len(sizes)}---:|")
    for way in WAYS:
        cells = " | ".join(f"{table[way, size]:.2f} µs" for size in sizes)
        growth = table[way, sizes[-1]] / table[way, first]
        print(f"| {way} | {cells} | {growth:.2f}{TIMES} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
