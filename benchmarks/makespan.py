"""Makespan on a DAG of steps with simulated latencies: batch vs eager vs the critical path.

The DAG has ``--layers`` layers of ``--width`` steps (60 by default). Every
step of a layer after the first depends on 1 to 3 random steps of the layer
before and, with probability 0.3, on one random step of an earlier layer. Each
step sleeps a latency drawn uniformly from 5 to 50 ms (seeded, so every run
measures the same DAG). No schedule can finish sooner than the critical path,
the longest path of latencies through the DAG; batch mode needs at least the sum
over batches of each batch's longest latency. The result is one line,
`bench_harness.RESULT_PREFIX` and a JSON object::

    python benchmarks/makespan.py --seed 1 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from bench_harness import RESULT_PREFIX, phase  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

LatencyDag = list[tuple[str, tuple[str, ...], float]]


def latency_dag(
    seed: int, layers: int, width: int, low: float, high: float
) -> tuple[LatencyDag, list[list[str]]]:
    """The seeded DAG as ``(name, depends_on, seconds)`` and its layers."""
    rng = random.Random(seed)
    dag: LatencyDag = []
    names: list[list[str]] = []
    for layer in range(layers):
        current = [f"l{layer}s{index}" for index in range(width)]
        for name in current:
            deps: list[str] = []
            if names:
                deps = rng.sample(names[-1], rng.randint(1, min(3, width)))
                if len(names) > 1 and rng.random() < 0.3:
                    deps.append(rng.choice(rng.choice(names[:-1])))
            dag.append((name, tuple(deps), rng.uniform(low, high)))
        names.append(current)
    return dag, names


def critical_path(dag: LatencyDag) -> float:
    """The longest path of latencies (the DAG is in topological order)."""
    finish: dict[str, float] = {}
    for name, deps, seconds in dag:
        finish[name] = seconds + max((finish[dep] for dep in deps), default=0.0)
    return max(finish.values())


def batch_bound(dag: LatencyDag, layers: list[list[str]]) -> float:
    """The least batch mode can take: each batch lasts as long as its slowest step."""
    latency = {name: seconds for name, _, seconds in dag}
    return sum(max(latency[name] for name in layer) for layer in layers)


def sleeper(seconds: float) -> Callable[[Mapping[str, Any]], Awaitable[float]]:
    """A step that waits ``seconds``, standing in for an LLM call."""

    async def step(ctx: Mapping[str, Any]) -> float:
        del ctx
        await asyncio.sleep(seconds)
        return seconds

    return step


async def makespan(workflow: Workflow, schedule: str | None) -> float:
    """Wall seconds of one run, checkpointing into a list.

    Raises:
        TypeError: If ``schedule`` is given and `Workflow.run` does not take it.
    """
    saved: list[WorkflowCheckpoint] = []
    options: dict[str, Any] = {} if schedule is None else {"schedule": schedule}
    start = time.perf_counter()
    await workflow.run(checkpoint_fn=saved.append, **options)
    return time.perf_counter() - start


async def measure(dag: LatencyDag, repeat: int) -> dict[str, list[float] | str]:
    """Seconds per run in batch mode (the default) and in eager mode, if it exists yet.

    Each schedule runs once untimed first, so that no timed run pays for imports
    or caches the first run fills.
    """
    workflow = Workflow(
        Step(name, sleeper(seconds), depends_on=deps) for name, deps, seconds in dag
    )
    phase("running in batch mode")
    results: dict[str, list[float] | str] = {
        "batch": [await makespan(workflow, None) for _ in range(repeat + 1)][1:]
    }
    phase("running in eager mode")
    try:
        results["eager"] = [await makespan(workflow, "eager") for _ in range(repeat + 1)][1:]
    except TypeError:
        results["eager"] = "not available yet"
    return results


def main(argv: list[str] | None = None) -> int:
    """Measure as the command line says and print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--min-ms", type=float, default=5.0)
    parser.add_argument("--max-ms", type=float, default=50.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    dag, layers = latency_dag(
        args.seed, args.layers, args.width, args.min_ms / 1000, args.max_ms / 1000
    )
    runs = asyncio.run(measure(dag, args.repeat))
    result: dict[str, object] = {
        "steps": len(dag),
        "edges": sum(len(deps) for _, deps, _ in dag),
        "seed": args.seed,
        "latency_ms": [args.min_ms, args.max_ms],
        "critical_path_s": critical_path(dag),
        "batch_bound_s": batch_bound(dag, layers),
        "runs_s": runs,
        "median_s": {
            schedule: statistics.median(seconds)
            for schedule, seconds in runs.items()
            if isinstance(seconds, list)
        },
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
