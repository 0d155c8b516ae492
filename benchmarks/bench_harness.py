"""The measurement protocol every implementation runs under, in its own process.

Each implementation (this checkout, the hand-written baseline, each peer) is a
script that defines one function, ``build(dag, counts) -> run``, and hands it
to `main`. ``build`` turns a `shapes.Dag` into the library's own objects (that
is the construction time); ``run()`` executes the graph once, from scratch, with
a checkpoint after every batch into a fresh list, and returns a function that
counts the checkpoints it recorded (called after the clock stopped, so that
counting is never timed). When ``counts`` is a dict, every step adds 1 to
``counts[name]``; `main` uses that on a small graph first to prove each step
runs exactly once, then times the graph with plain no-op steps.

Timing: one process measures one (shape, size). First the graph runs again and
again, untimed, for ``--warm-up`` seconds (code, caches, allocator and CPU
clock settle), except that a first run longer than `EXPENSIVE_RUN_SECONDS`
counts as the first repeat instead (a run that long hardly needs warming up,
and another would cost too much). Each repeat then runs the graph enough times
to last ``--min-repeat`` seconds and divides, as ``timeit`` does, so small
graphs are not lost in timer noise. ``gc.collect()`` runs before each repeat;
the collector stays on during it. Repeats stop early once the whole
measurement has used ``--budget`` seconds (at least one is kept).

The result is one line on standard output: `RESULT_PREFIX` and a JSON object.
Progress goes to standard error as `PHASE_PREFIX` lines, so that a measurement
killed for taking too long can say where it was.
Standard library only: the peer scripts import this inside their virtual
environments.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import shapes

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    RunFn: TypeAlias = Callable[[], Coroutine[Any, Any, Callable[[], int]]]
    """Runs the graph once; returns a function counting the checkpoints of that run."""
    BuildFn: TypeAlias = Callable[[shapes.Dag, dict[str, int] | None], RunFn]
    """Builds the graph; with a counts dict, every step counts its calls in it."""

RESULT_PREFIX = "BENCH-RESULT "
PHASE_PREFIX = "BENCH-PHASE "
EXPENSIVE_RUN_SECONDS = 1.0
VERIFY_SIZE = 30


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options `benchmarks/run.py` passes to every implementation script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, choices=shapes.SHAPES)
    parser.add_argument("--size", required=True, type=int)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--warm-up", type=float, default=0.3, help="seconds of untimed runs")
    parser.add_argument("--min-repeat", type=float, default=0.2, help="seconds per repeat")
    return parser.parse_args(argv)


def verify(build: BuildFn, shape: str, n: int) -> None:
    """Run a small graph with counting steps; every step must run exactly once."""
    dag = shapes.make(shape, n)
    counts: dict[str, int] = {}
    asyncio.run(build(dag, counts)())
    expected = {name: 1 for name, _ in dag}
    if counts != expected:
        wrong = {name: counts.get(name, 0) for name in expected if counts.get(name, 0) != 1}
        msg = f"{shape} with {n} steps: steps not run exactly once: {wrong}"
        raise AssertionError(msg)


@dataclass(frozen=True, slots=True)
class Timing:
    """How to time: repeats, and the seconds for the warm-up, a repeat and everything."""

    repeat: int = 5
    warm_up: float = 0.3
    min_repeat: float = 0.2
    budget: float = 60.0


async def _time_runs(run: RunFn, timing: Timing, deadline: float) -> tuple[list[float], int, int]:
    """Per-run seconds of each repeat, runs per repeat, and checkpoints of one run."""
    gc.collect()
    start = time.perf_counter()
    count = await run()
    probe = time.perf_counter() - start
    seconds = [probe] if probe > EXPENSIVE_RUN_SECONDS else []
    while not seconds and time.perf_counter() - start < timing.warm_up:
        await run()
    loops = max(1, math.ceil(timing.min_repeat / max(probe, 1e-7)))
    while len(seconds) < timing.repeat and not (seconds and time.perf_counter() > deadline):
        gc.collect()
        start = time.perf_counter()
        for _ in range(loops):
            await run()
        seconds.append((time.perf_counter() - start) / loops)
    return seconds, loops, count()


def phase(what: str) -> None:
    """Say on standard error what the measurement is doing (named when it times out)."""
    print(f"{PHASE_PREFIX}{what}", file=sys.stderr, flush=True)


def measure(build: BuildFn, shape: str, n: int, timing: Timing) -> dict[str, object]:
    """Verify on a small graph, then build and time the graph of ``shape`` with ``n`` steps."""
    began = time.perf_counter()
    phase("checking that each step runs once")
    verify(build, shape, min(n, VERIFY_SIZE))
    dag = shapes.make(shape, n)
    gc.collect()
    phase("building the graph")
    start = time.perf_counter()
    run = build(dag, None)
    build_seconds = time.perf_counter() - start
    phase(f"running the graph (built in {build_seconds:.1f} s)")
    runs, loops, checkpoints = asyncio.run(_time_runs(run, timing, began + timing.budget))
    return {
        "shape": shape,
        "steps": n,
        "build_s": build_seconds,
        "runs_s": runs,
        "loops": loops,
        "checkpoints": checkpoints,
        "python": platform.python_version(),
    }


def main(build: BuildFn, version: str, argv: list[str] | None = None) -> int:
    """Measure as the command line says and print the result line."""
    args = parse_args(argv)
    timing = Timing(args.repeat, args.warm_up, args.min_repeat, args.budget)
    result = measure(build, args.shape, args.size, timing)
    result["version"] = version
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0
