"""The hand-written asyncio baseline: the same work as a workflow run, without a library.

This is what a careful engineer writes by hand for "run these async steps in
dependency order and checkpoint after each batch", and it is the limit the
benchmarks compare executionkit against:

1. Topological batches are computed once, before the run, by indegree
   counting: the first batch is every step without dependencies; each next
   batch is every step whose last dependency was in the batch before.
2. Per batch: ``await asyncio.gather(*(step(outputs) for step in batch))``.
   Every step receives the one ``outputs`` dict (no copy, no read-only view).
3. The results are stored in ``outputs``, a dict keyed by step name.
4. After each batch, a small immutable record ``(len(outputs), cost)`` is
   appended to a list, where ``cost`` is a tuple of token counters: the
   checkpoint. Nothing is copied; the record does not hold the outputs.

It has none of a library's guarantees (no validation, no failure handling, no
cancellation cleanup, no resume, no frozen snapshot a caller could store), so
a library can approach it but not beat it. Run it under the benchmark protocol
with ``python benchmarks/baseline.py --shape chain --size 1000`` (see
`bench_harness`); `benchmarks/run.py` does that for every shape and size.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

import bench_harness

if TYPE_CHECKING:
    import shapes
    from bench_harness import RunFn

StepFn: TypeAlias = Callable[[dict[str, object]], Awaitable[object]]
Batch: TypeAlias = list[tuple[str, StepFn]]
Checkpoint: TypeAlias = tuple[int, tuple[int, int, int]]


def plan(steps: list[tuple[str, tuple[str, ...], StepFn]]) -> list[Batch]:
    """Topological batches of ``(name, depends_on, fn)`` steps, by indegree counting."""
    indegree = {name: len(deps) for name, deps, _ in steps}
    dependents: dict[str, list[str]] = {name: [] for name, _, _ in steps}
    for name, deps, _ in steps:
        for dep in deps:
            dependents[dep].append(name)
    fns = {name: fn for name, _, fn in steps}
    ready = [name for name, _, _ in steps if not indegree[name]]
    batches: list[Batch] = []
    while ready:
        batches.append([(name, fns[name]) for name in ready])
        following: list[str] = []
        for name in ready:
            for child in dependents[name]:
                indegree[child] -= 1
                if not indegree[child]:
                    following.append(child)
        ready = following
    return batches


async def run_batches(batches: list[Batch], saved: list[Checkpoint]) -> dict[str, object]:
    """Run ``batches`` in order, each concurrently; append a checkpoint record after each."""
    outputs: dict[str, object] = {}
    cost = (0, 0, 0)  # input tokens, output tokens, calls: no-op steps cost nothing
    for batch in batches:
        results = await asyncio.gather(*(fn(outputs) for _, fn in batch))
        for (name, _), result in zip(batch, results, strict=True):
            outputs[name] = result
        saved.append((len(outputs), cost))
    return outputs


async def noop(outputs: dict[str, object]) -> int:
    """A step that does nothing and returns a small value."""
    del outputs
    return 1


def counting(name: str, counts: dict[str, int]) -> StepFn:
    """A no-op step that also counts its calls in ``counts[name]``."""

    async def step(outputs: dict[str, object]) -> int:
        del outputs
        counts[name] = counts.get(name, 0) + 1
        return 1

    return step


def build(dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The benchmark protocol's ``build``: plan once; each call runs the plan afresh."""
    batches = plan(
        [(name, deps, noop if counts is None else counting(name, counts)) for name, deps in dag]
    )

    async def run() -> Callable[[], int]:
        saved: list[Checkpoint] = []
        await run_batches(batches, saved)
        return saved.__len__

    return run


if __name__ == "__main__":
    sys.exit(bench_harness.main(build, "hand-written"))
