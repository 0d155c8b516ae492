"""executionkit from this checkout under the benchmark protocol (see `bench_harness`).

The package is imported from the repository root (or from the commit that
``run.py --rev`` extracted; see `source`), never from an installed copy, so
the figures belong to the code measured. The result names that code's
fingerprint::

    python benchmarks/bench_executionkit.py --shape chain --size 1000

Each step is ``Step(name, noop, depends_on=deps)`` with an ``async def`` no-op;
one run is ``await workflow.run(checkpoint_fn=saved.append)``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

import bench_harness  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    import shapes
    from bench_harness import RunFn


async def noop(ctx: Mapping[str, Any]) -> int:
    """A step that does nothing and returns a small value."""
    del ctx
    return 1


def counting(name: str, counts: dict[str, int]) -> Callable[[Mapping[str, Any]], Awaitable[int]]:
    """A no-op step that also counts its calls in ``counts[name]``."""

    async def step(ctx: Mapping[str, Any]) -> int:
        del ctx
        counts[name] = counts.get(name, 0) + 1
        return 1

    return step


def build(dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The benchmark protocol's ``build``: one `Workflow`; each call runs it afresh."""
    workflow = Workflow(
        Step(name, noop if counts is None else counting(name, counts), depends_on=deps)
        for name, deps in dag
    )

    async def run() -> Callable[[], int]:
        saved: list[WorkflowCheckpoint] = []
        await workflow.run(checkpoint_fn=saved.append)
        return saved.__len__

    return run


if __name__ == "__main__":
    sys.exit(bench_harness.main(build, f"source {source.fingerprint()}"))
