"""The fixed cost of one `Workflow.run`: tiny workflows, many runs inside one event loop.

Two workflows, each run ``--runs`` times in a row inside one event loop (so that
`asyncio.run`'s own cost is not counted), after a warm-up: one async no-op step,
and a 100-item `Step.map` of async no-op items with a ``checkpoint_fn`` that only
counts. Prints the best of ``--rounds`` passes, in microseconds per run. To
compare two trees, run it with ``EXECUTIONKIT_BENCH_SOURCE`` pointing at each
(see `source`)::

    python benchmarks/run_setup.py [--runs 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import source

source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402


async def noop(ctx: Any) -> int:
    del ctx
    return 1


async def item(value: int, ctx: Any) -> int:
    del ctx
    return value


def split(ctx: Any) -> list[int]:
    del ctx
    return list(range(100))


async def timed(workflow: Workflow, runs: int, **options: Any) -> float:
    began = time.perf_counter()
    for _ in range(runs):
        await workflow.run(**options)
    return (time.perf_counter() - began) / runs * 1e6


async def measure(runs: int, rounds: int) -> tuple[float, float]:
    one = Workflow([Step("a", noop)])
    mapped = Workflow(
        [Step("split", split), Step.map("each", item, over="split", max_concurrency=100)]
    )
    taken = [0]

    def count(checkpoint: WorkflowCheckpoint) -> None:
        del checkpoint
        taken[0] += 1

    await timed(one, 200)
    await timed(mapped, 50, checkpoint_fn=count)
    ones, maps = [], []
    for _ in range(rounds):
        ones.append(await timed(one, runs))
        maps.append(await timed(mapped, runs, checkpoint_fn=count))
    return min(ones), min(maps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    one, mapped = asyncio.run(measure(args.runs, args.rounds))
    print("| µs per run | one async step | Step.map of 100 items |")
    print("|---|---:|---:|")
    print(f"| {source.fingerprint()} | {one:.1f} | {mapped:.1f} |")


if __name__ == "__main__":
    main()
