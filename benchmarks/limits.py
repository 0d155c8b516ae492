"""What a generous limit costs a map: 10,000 no-op items with ``limit=`` against none.

Issue 32 asks that a map of 10,000 no-op items drawing on a limit that never
makes them wait costs at most 1.2 times the same map without limits. This
times, in one process, a ``Step.map`` of ``--items`` no-op async items three
ways, each with a ``checkpoint_fn`` that keeps nothing:

- ``none``: no limit;
- ``concurrency``: ``limit="api"`` with ``Limit("api", concurrency=10**6)``;
- ``window``: ``Limit("api", requests=10**9, tokens=10**12, per=60)``, a sliding
  window of every start and every token reservation;

and prints the median seconds of ``--repeat`` runs of each (the ways taking
turns, after a warm-up round) and the median of each way's ratios to the
``none`` run of the same round, in the same command::

    python benchmarks/limits.py [--items 10000] [--repeat 7]

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

from executionkit import Limit, Step, Workflow  # noqa: E402


async def noop(item: int, _ctx: Any) -> int:
    """Does nothing: what is timed is the map's own work."""
    return item


def workflow(items: int, *, limited: bool) -> Workflow:
    """A map of ``items`` no-op items, drawing on limit ``api`` or on none."""
    options: dict[str, Any] = {"limit": "api"} if limited else {}
    return Workflow(
        [
            Step("split", lambda _ctx: list(range(items))),
            Step.map("each", noop, over="split", **options),
        ]
    )


WAYS: dict[str, list[Limit] | None] = {
    "none": None,
    "concurrency": [Limit("api", concurrency=10**6)],
    "window": [Limit("api", requests=10**9, tokens=10**12, per=60)],
}


def timed(flow: Workflow, limits: list[Limit] | None) -> float:
    """Seconds of one run of ``flow``, the garbage collector off."""
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        flow.run_sync(checkpoint_fn=lambda _checkpoint: None, limits=limits)
        return time.perf_counter() - began
    finally:
        gc.enable()


def medians(items: int, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds of each way, and the median of its ratios to ``none`` round by round.

    The ways take turns round by round (a warm-up round first), and each
    ratio is to the ``none`` run of the same round: a machine that slows down
    or speeds up meanwhile weighs on both sides of every ratio alike.
    """
    flows = {name: workflow(items, limited=limits is not None) for name, limits in WAYS.items()}
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    for round_ in range(repeat + 1):
        for name, limits in WAYS.items():
            took = timed(flows[name], limits)
            if round_:
                times[name].append(took)
    seconds = {name: statistics.median(values) for name, values in times.items()}
    ratios = {
        name: statistics.median(t / base for t, base in zip(values, times["none"], strict=True))
        for name, values in times.items()
    }
    return seconds, ratios


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    seconds, ratios = medians(args.items, args.repeat)
    print(f"map of {args.items:,} no-op items, median of {args.repeat} runs")
    print(f"{'limit':<12} {'seconds':>9} {'ratio':>7}")
    for name, took in seconds.items():
        print(f"{name:<12} {took:>9.3f} {ratios[name]:>6.2f}x")


if __name__ == "__main__":
    main()
