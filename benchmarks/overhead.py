"""Per-step overhead against the hand-written loop, as ratios within one process.

`run.py` times executionkit and the loop in separate processes, one after the
other, so a busy machine moves one of them and not the other. This script
builds both from the same graph in one process and one event loop, and times
them in turn, round after round (each round: a batch of runs of one, then of
the other, the order alternating), so both see the same machine. It prints,
per shape and size, the per-step times and executionkit ÷ loop as the median
of the rounds with its range::

    python benchmarks/overhead.py --sizes 100,1000,10000 --rounds 7

Times are the thread's CPU time (``time.thread_time``) unless ``--clock wall``:
on a machine shared with other work, CPU time does not count the moments the
process waited for a core, which wall time would charge to whichever side ran
then. Both sides are CPU-bound (no I/O), so on a quiet machine the two clocks
agree. ``EXECUTIONKIT_BENCH_SOURCE`` picks the executionkit measured (see
`source`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import TYPE_CHECKING

import source

source.put_on_path()

import baseline  # noqa: E402
import bench_executionkit  # noqa: E402
import shapes  # noqa: E402

if TYPE_CHECKING:
    from bench_harness import RunFn


CLOCK = {"cpu": time.thread_time, "wall": time.perf_counter}
clock = time.thread_time


async def _per_run(run: RunFn, loops: int) -> float:
    gc.collect()
    start = clock()
    for _ in range(loops):
        await run()
    return (clock() - start) / loops


async def _compare(shape: str, size: int, rounds: int, seconds: float) -> tuple[list[float], ...]:
    dag = shapes.make(shape, size)
    kit = bench_executionkit.build(dag, None)
    loop = baseline.build(dag, None)
    for run in (kit, loop, kit, loop):  # warm up both
        await run()
    probe = await _per_run(kit, 1)
    loops = max(1, round(seconds / max(probe, 1e-7)))
    kit_times: list[float] = []
    loop_times: list[float] = []
    for turn in range(rounds):
        if turn % 2:
            loop_times.append(await _per_run(loop, loops))
            kit_times.append(await _per_run(kit, loops))
        else:
            kit_times.append(await _per_run(kit, loops))
            loop_times.append(await _per_run(loop, loops))
    ratios = [k / b for k, b in zip(kit_times, loop_times, strict=True)]
    return kit_times, loop_times, ratios


def main(argv: list[str] | None = None) -> int:
    """Print the per-step table for the shapes and sizes asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--shapes", default=",".join(shapes.SHAPES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.2, help="per batch of runs")
    parser.add_argument("--clock", choices=sorted(CLOCK), default="cpu")
    args = parser.parse_args(argv)
    global clock  # noqa: PLW0603 - one setting for the whole script
    clock = CLOCK[args.clock]
    print(f"source {source.fingerprint()}, clock {args.clock}")
    print("| shape | steps | executionkit µs/step | loop µs/step | ratio median [min-max] |")
    print("|---|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            kit, loop, ratios = asyncio.run(_compare(shape, size, args.rounds, args.seconds))
            print(
                f"| {shape} | {size:,} | {statistics.median(kit) / size * 1e6:.2f} "
                f"| {statistics.median(loop) / size * 1e6:.2f} "
                f"| {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
