"""ExecutionKit 0.4.0 (from PyPI) under the benchmark protocol (see `bench_harness`).

Runs with the Python of ``benchmarks/.venvs/executionkit04``. Each step is
``Step(name, noop, depends_on=deps)`` from ``executionkit.workflow``; one run is
``await workflow.run(checkpoint_fn=saved.append)``, exactly as for this
checkout.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import _peer
import bench_harness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import shapes
    from bench_harness import RunFn

DISTRIBUTION = "executionkit"
VERSION = "0.4.0"


async def noop(ctx: dict[str, Any]) -> int:
    """A step that does nothing and returns a small value."""
    del ctx
    return 1


def counting(name: str, counts: dict[str, int]) -> Callable[[dict[str, Any]], Awaitable[int]]:
    """A no-op step that also counts its calls in ``counts[name]``."""

    async def step(ctx: dict[str, Any]) -> int:
        del ctx
        counts[name] = counts.get(name, 0) + 1
        return 1

    return step


def build(dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The benchmark protocol's ``build``: one 0.4.0 ``Workflow``; each call runs it afresh."""
    module = importlib.import_module("executionkit.workflow")
    step_type: Any = module.Step
    workflow: Any = module.Workflow(
        [
            step_type(name, noop if counts is None else counting(name, counts), depends_on=deps)
            for name, deps in dag
        ]
    )

    async def run() -> Callable[[], int]:
        saved: list[object] = []
        await workflow.run(checkpoint_fn=saved.append)
        return saved.__len__

    return run


def version() -> str:
    """The installed version, checked against the pin."""
    module = importlib.import_module("executionkit")
    return _peer.installed(DISTRIBUTION, VERSION, module.__file__)


if __name__ == "__main__":
    sys.exit(bench_harness.main(build, version()))
