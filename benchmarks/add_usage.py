"""What reporting usage costs a step: ``current_step().add_usage`` against no report.

Issue 32 asks that a step reporting its usage costs at most 3 µs more than one
that reports none. This runs, in one event loop, a wide batch of ``--size``
no-op async steps three ways:

- ``none``: the step reports nothing;
- ``add_usage``: the step calls ``current_step().add_usage(usage, model="m")`` once;
- ``result``: the step returns a ``PatternResult`` with a ``cost``;

with a ``checkpoint_fn`` that keeps nothing (the ledger rows are written into
each checkpoint all the same). The garbage collector is off while a run is
timed. Medians of ``--repeat`` runs after two warm-up rounds, the ways taking
turns round by round, in microseconds per step, and each way's difference from
``none`` in the same command::

    python benchmarks/add_usage.py [--size 2000] [--repeat 9]

To compare two trees, point ``EXECUTIONKIT_BENCH_SOURCE`` at each (see `source`).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import source

source.put_on_path()

from executionkit import PatternResult, Step, TokenUsage, Workflow, current_step  # noqa: E402

USAGE = TokenUsage(120, 30, 1)


async def silent(_ctx: Any) -> int:
    """Reports nothing."""
    return 1


async def reporting(_ctx: Any) -> int:
    """Reports its usage as it spends it."""
    current_step().add_usage(USAGE, model="m")
    return 1


async def with_result(_ctx: Any) -> PatternResult[int]:
    """Reports its usage with its result."""
    return PatternResult(1, cost=USAGE)


WAYS = {"none": silent, "add_usage": reporting, "result": with_result}


def per_step(size: int, repeat: int) -> dict[str, float]:
    """Median µs per step of each way: a wide batch of ``size`` steps running its function.

    The ways take turns round by round (after two warm-up rounds), so a machine
    that slows down or speeds up meanwhile weighs on each alike.
    """
    flows = {way: Workflow([Step(f"s{n}", fn) for n in range(size)]) for way, fn in WAYS.items()}
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_ in range(repeat + 2):
        for way, workflow in flows.items():
            gc.collect()
            gc.disable()
            try:
                began = time.perf_counter()
                workflow.run_sync(checkpoint_fn=lambda _checkpoint: None)
                took = time.perf_counter() - began
            finally:
                gc.enable()
            if round_ >= 2:  # two warm-up rounds
                times[way].append(took)
    return {way: statistics.median(values) / size * 1e6 for way, values in times.items()}


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    figures = per_step(args.size, args.repeat)
    base = figures["none"]
    print(f"| way ({args.size} steps, median of {args.repeat}) | µs per step | more than none |")
    print("|---|---:|---:|")
    for way, value in figures.items():
        print(f"| {way} | {value:.1f} | {value - base:+.1f} |")


if __name__ == "__main__":
    main()
