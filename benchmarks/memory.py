"""Peak memory of one wide run, measured with tracemalloc, in a process of its own.

``--impl executionkit`` builds a `Workflow` of ``--size`` independent no-op
steps and runs it with ``checkpoint_fn=saved.append``; ``--impl baseline`` does
the same with the hand-written runner of `baseline`. Reported, in bytes:

- ``build_bytes``: what the built workflow holds (traced memory after
  construction, minus before);
- ``run_peak_bytes``: the highest traced memory during the run, minus the
  memory traced just before it (so the workflow itself is not counted);
- ``retained_bytes``: what is still held after the run (result and checkpoints).

The result is one line, `bench_harness.RESULT_PREFIX` and a JSON object::

    python benchmarks/memory.py --impl executionkit --size 100000
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


def build(impl: str, dag: shapes.Dag) -> Callable[[], Coroutine[object, object, object]]:
    """A function that runs ``dag`` once with ``impl`` and returns what the run keeps."""
    if impl == "baseline":
        batches = baseline.plan([(name, deps, baseline.noop) for name, deps in dag])

        async def run_baseline() -> object:
            saved: list[baseline.Checkpoint] = []
            return (await baseline.run_batches(batches, saved), saved)

        return run_baseline
    workflow = Workflow(Step(name, noop, depends_on=deps) for name, deps in dag)

    async def run_executionkit() -> tuple[WorkflowResult, list[WorkflowCheckpoint]]:
        saved: list[WorkflowCheckpoint] = []
        return (await workflow.run(checkpoint_fn=saved.append), saved)

    return run_executionkit


def measure(impl: str, size: int) -> dict[str, object]:
    """Traced bytes for building and running a wide graph of ``size`` steps."""
    dag = shapes.wide(size)
    gc.collect()
    tracemalloc.start()
    before_build = tracemalloc.get_traced_memory()[0]
    run = build(impl, dag)
    gc.collect()
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
        "steps": size,
        "build_bytes": before_run - before_build,
        "run_peak_bytes": peak - before_run,
        "retained_bytes": after_run - before_run,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure as the command line says and print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("executionkit", "baseline"), default="executionkit")
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args(argv)
    print(RESULT_PREFIX + json.dumps(measure(args.impl, args.size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
