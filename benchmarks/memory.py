"""Peak memory of one run, measured with tracemalloc, in a process of its own.

``--impl executionkit`` builds a `Workflow` of ``--size`` no-op steps of
``--shape`` (wide by default) and runs it with ``checkpoint_fn=saved.append``
(``--keep all``) or with a callback that keeps only the last checkpoint
(``--keep last``); ``--impl baseline`` does the same with the hand-written
runner of `baseline`. Reported, in bytes:

- ``build_bytes``: what the built workflow holds (traced memory after
  construction, minus before);
- ``run_peak_bytes``: the highest traced memory during the run, minus the
  memory traced just before it (so the workflow itself is not counted);
- ``retained_bytes``: what is still held after the run (result and checkpoints);
- ``total_peak_bytes``: the highest traced memory from before construction to
  the end of the run: the workflow, the run and what it keeps, together.

The result is one line, `bench_harness.RESULT_PREFIX` and a JSON object::

    python benchmarks/memory.py --impl executionkit --size 100000
    python benchmarks/memory.py --impl baseline --shape chain --keep last --size 100000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tracemalloc
from typing import TYPE_CHECKING

import source

source.put_on_path()

import baseline  # noqa: E402
import shapes  # noqa: E402
from bench_harness import RESULT_PREFIX  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint, WorkflowResult  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


async def noop(ctx: object) -> int:
    """A step that does nothing and returns a small value."""
    del ctx
    return 1


class KeepLast(list):  # type: ignore[type-arg]
    """A list that keeps only the last item appended: ``--keep last``."""

    def append(self, item: object) -> None:
        self[:] = [item]


def build(
    impl: str, dag: shapes.Dag, keep: str
) -> Callable[[], Coroutine[object, object, object]]:
    """A function that runs ``dag`` once with ``impl`` and returns what the run keeps."""
    if impl == "baseline":
        batches = baseline.plan([(name, deps, baseline.noop) for name, deps in dag])

        async def run_baseline() -> object:
            saved: list[baseline.Checkpoint] = [] if keep == "all" else KeepLast()
            return (await baseline.run_batches(batches, saved), saved)

        return run_baseline
    workflow = Workflow(Step(name, noop, depends_on=deps) for name, deps in dag)

    async def run_executionkit() -> tuple[WorkflowResult, list[WorkflowCheckpoint]]:
        saved: list[WorkflowCheckpoint] = [] if keep == "all" else KeepLast()
        return (await workflow.run(checkpoint_fn=saved.append), saved)

    return run_executionkit


def measure(impl: str, size: int, shape: str = "wide", keep: str = "all") -> dict[str, object]:
    """Traced bytes for building and running a ``shape`` graph of ``size`` steps."""
    dag = shapes.make(shape, size)
    gc.collect()
    tracemalloc.start()
    before_build = tracemalloc.get_traced_memory()[0]
    run = build(impl, dag, keep)
    gc.collect()
    built_peak = tracemalloc.get_traced_memory()[1]
    before_run = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    kept: object = asyncio.run(run())
    peak = tracemalloc.get_traced_memory()[1]
    gc.collect()
    after_run = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return {
        "impl": impl,
        "shape": shape,
        "keep": keep,
        "steps": size,
        "build_bytes": before_run - before_build,
        "run_peak_bytes": peak - before_run,
        "retained_bytes": after_run - before_run,
        "total_peak_bytes": max(built_peak, peak) - before_build,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure as the command line says and print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("executionkit", "baseline"), default="executionkit")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--shape", choices=("wide", "chain", "layered"), default="wide")
    parser.add_argument("--keep", choices=("all", "last"), default="all")
    args = parser.parse_args(argv)
    result = measure(args.impl, args.size, args.shape, args.keep)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
