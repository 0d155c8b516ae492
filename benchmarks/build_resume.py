"""What building a workflow and resuming a completed checkpoint cost, next to running it.

For a chain of ``--sizes`` async no-op steps, each round measures, in one
process and with the garbage collector as it is (on):

- ``build``: ``Workflow([Step(...) for ...])``, the steps included;
- ``run``: ``run(checkpoint_fn=saved.append)`` on that workflow;
- ``resume``: ``WorkflowCheckpoint.from_dict(data)`` of the last checkpoint's
  ``to_dict()`` (taken outside the timing), then ``run(resume_from=...)``, which
  runs nothing; ``from_dict`` alone is shown too.

Each figure is the median over ``--rounds`` rounds (after one warm-up round) in
microseconds per step, and the ratios are each round's build ÷ run and resume ÷
run, medians with their range. Issue 23's targets: build ÷ run at most 1, and
resume ÷ run at most 0.5. Prints a Markdown table::

    python benchmarks/build_resume.py [--sizes 1000,10000,100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import source

source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402


async def noop(ctx: Any) -> int:
    """An async step that does nothing."""
    del ctx
    return 1


def build(size: int) -> Workflow:
    """A chain of ``size`` no-op steps, each depending on the one before."""
    names = [f"s{n}" for n in range(size)]
    return Workflow(
        [
            Step(name, noop, depends_on=() if n == 0 else (names[n - 1],))
            for n, name in enumerate(names)
        ]
    )


def one_round(size: int) -> dict[str, float]:
    """Seconds per step of build, run, from_dict and resume (from_dict + run), once."""
    began = time.perf_counter()
    workflow = build(size)
    built = time.perf_counter() - began

    saved: list[WorkflowCheckpoint] = []
    began = time.perf_counter()
    result = asyncio.run(workflow.run(checkpoint_fn=saved.append))
    ran = time.perf_counter() - began
    assert len(result.executed) == size  # noqa: S101 - a benchmark's sanity check
    data = saved[-1].to_dict()
    del saved, result

    began = time.perf_counter()
    checkpoint = WorkflowCheckpoint.from_dict(data)
    decoded = time.perf_counter() - began
    resumed = asyncio.run(workflow.run(resume_from=checkpoint))
    restored = time.perf_counter() - began
    assert not resumed.executed  # noqa: S101
    assert len(resumed.restored) == size  # noqa: S101
    return {
        "build": built / size,
        "run": ran / size,
        "from_dict": decoded / size,
        "resume": restored / size,
    }


def measure(size: int, rounds: int) -> dict[str, list[float]]:
    """Every round's figures (after a warm-up round), by what was measured."""
    one_round(size)
    found: dict[str, list[float]] = {}
    for _ in range(rounds):
        for what, seconds in one_round(size).items():
            found.setdefault(what, []).append(seconds)
    found["build/run"] = [b / r for b, r in zip(found["build"], found["run"], strict=True)]
    found["resume/run"] = [b / r for b, r in zip(found["resume"], found["run"], strict=True)]
    return found


def _us(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e6:.1f}"


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}× [{min(values):.2f}–{max(values):.2f}]"  # noqa: RUF001


def main() -> None:
    """Measure each size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        "| steps | build µs/step | run µs/step | from_dict µs/step | resume µs/step "
        "| build ÷ run | resume ÷ run |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        found = measure(size, args.rounds)
        print(
            f"| {size:,} | {_us(found['build'])} | {_us(found['run'])} "
            f"| {_us(found['from_dict'])} | {_us(found['resume'])} "
            f"| {_ratio(found['build/run'])} | {_ratio(found['resume/run'])} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
