"""What plain-function steps and map items cost, in each schedule and checkpoint mode.

Since issue 30 a plain function runs in a worker thread unless it is marked
``inline=True``; the first table compares, per step, no-op async functions,
plain functions in threads and inline plain functions (batch mode, one
checkpoint per batch). A tree without ``inline`` (before issue 30) runs plain
functions inline: its "threads" column then measures that.

Inline plain functions block the event loop while they run, so since issue 19 a run
with a ``checkpoint_fn`` hands each completed plain step to it before the next
starts in eager mode and with ``checkpoint_every="step"``, and each plain map
item always; ``checkpoint_every="batch"`` is unchanged. This measures, per step
(or item), no-op plain functions :

- ``wide``: ``--size`` independent plain steps (one batch);
- ``chain``: ``--size`` plain steps, each depending on the one before;
- ``map``: a ``Step.map`` of ``--size`` plain items;

in batch mode with ``checkpoint_every="batch"`` and ``"step"``, and in eager
mode. The ``checkpoint_fn`` counts the checkpoints and keeps none, and the
garbage collector is off while a run is timed (as `timeit` does), so that the
figures are the runner's, not the collector's. Medians of ``--repeat`` runs
after two warm-up runs, in microseconds per step.
To compare two trees, run it with ``EXECUTIONKIT_BENCH_SOURCE`` pointing at
each (see `source`)::

    python benchmarks/plain_steps.py [--size 1000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import source

source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402

MODES = (("batch", "batch"), ("batch", "step"), ("eager", "batch"))


def noop(ctx: Any) -> int:
    del ctx
    return 1


def item(value: int, ctx: Any) -> int:
    del ctx
    return value


async def noop_async(ctx: Any) -> int:
    del ctx
    return 1


async def item_async(value: int, ctx: Any) -> int:
    del ctx
    return value


KINDS = ("async", "threads", "inline")


def build(shape: str, size: int, kind: str = "inline") -> tuple[Workflow, dict[str, Any]]:
    """The graph of ``shape``: async steps, plain ones in threads, or inline plain ones."""
    options: dict[str, Any] = {"inline": True} if kind == "inline" else {}
    step_fn: Any = noop_async if kind == "async" else noop
    item_fn: Any = item_async if kind == "async" else item
    if shape == "map":
        return (
            Workflow([Step.map("items", item_fn, over="values", **options)]),
            {"values": list(range(size))},
        )
    names = [f"s{n}" for n in range(size)]
    if shape == "wide":
        return Workflow(Step(name, step_fn, **options) for name in names), {}
    steps = [
        Step(name, step_fn, depends_on=() if n == 0 else (names[n - 1],), **options)
        for n, name in enumerate(names)
    ]
    return Workflow(steps), {}


def has_inline() -> bool:
    """Whether the tree measured knows ``Step(inline=...)`` (issue 30 and later)."""
    try:
        Step("x", noop, inline=True)  # type: ignore[call-arg, unused-ignore]
    except TypeError:
        return False
    return True


def measure(
    shape: str, size: int, schedule: Any, every: Any, repeat: int, *, kind: str = "inline"
) -> float:
    if kind == "inline" and not has_inline():
        kind = "threads"  # before issue 30 every plain function ran inline
    workflow, context = build(shape, size, kind)
    times = []
    taken = [0]

    def count(checkpoint: WorkflowCheckpoint) -> None:
        del checkpoint
        taken[0] += 1

    for attempt in range(repeat + 2):
        gc.collect()
        gc.disable()
        try:
            began = time.perf_counter()
            workflow.run_sync(
                context, checkpoint_fn=count, schedule=schedule, checkpoint_every=every
            )
            took = time.perf_counter() - began
        finally:
            gc.enable()
        if attempt >= 2:  # two warm-up runs
            times.append(took / size * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"| µs per step ({args.size}), batch mode | async | plain, threads | plain, inline |")
    print("|---|---:|---:|---:|")
    for shape in ("wide", "chain", "map"):
        cells = [
            f"{measure(shape, args.size, 'batch', 'batch', args.repeat, kind=kind):.1f}"
            for kind in KINDS
        ]
        print(f"| {shape} | {' | '.join(cells)} |")
    print()
    print(f"| µs per inline step ({args.size}) | batch, every batch | batch, every step | eager |")
    print("|---|---:|---:|---:|")
    for shape in ("wide", "chain", "map"):
        cells = [
            f"{measure(shape, args.size, schedule, every, args.repeat):.1f}"
            for schedule, every in MODES
        ]
        print(f"| {shape} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
