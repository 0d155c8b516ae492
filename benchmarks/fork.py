"""Forking a long run: `Workflow.fork` of the last checkpoint of a chain, one step overridden.

A chain of ``--sizes`` (1,000 and 10,000) steps, each returning a distinct text
of ``--output-size`` (100) characters, is run once, keeping its last
checkpoint. Then `Workflow.fork` of it, overriding the step in the middle (so
that half the chain is dropped), is timed ``--repeat`` (21) times, median in
milliseconds, two ways:

- ``in memory``: the checkpoint the run returned, as a program that forks
  right after a run would;
- ``loaded``: a checkpoint read back with `WorkflowCheckpoint.from_dict` from
  the JSON a store wrote, made anew before each timed fork (not timed), as
  ``executionkit fork`` does after loading the parent.

Only the fork is timed: it is pure, so neither the run nor a store is in the
figure. The target is at most 50 ms for 1,000 steps on 2 cores::

    python benchmarks/fork.py [--sizes 1000,10000] [--repeat 21] [--output-size 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import TYPE_CHECKING

import source

source.put_on_path()

from store_outputs import text  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable


def chain(steps: int, size: int) -> Workflow:
    """``steps`` steps, each depending on the one before and returning its text."""

    def make(number: int) -> Step:
        def run(_ctx: object) -> str:
            return text(number, size)

        return Step(f"s{number}", run, depends_on=(f"s{number - 1}",) if number else ())

    return Workflow([make(number) for number in range(steps)])


def median_ms(
    make: Callable[[], WorkflowCheckpoint], fork: Callable[..., object], repeat: int
) -> float:
    """The median of ``repeat`` timed forks, each of a checkpoint ``make()`` gives (not timed)."""
    times = []
    for _ in range(repeat):
        checkpoint = make()
        started = time.perf_counter()
        fork(checkpoint)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def measure(steps: int, args: argparse.Namespace) -> dict[str, float | int]:
    """Run the chain once, then time forking its last checkpoint, in memory and loaded."""
    workflow = chain(steps, args.output_size)
    last: list[WorkflowCheckpoint] = []

    def keep(checkpoint: WorkflowCheckpoint) -> None:
        last[:] = [checkpoint]  # only the last: 10,000 snapshots would only cost memory

    result = workflow.run_sync(checkpoint_fn=keep)
    parent = last[-1]
    assert len(result.outputs) == steps  # noqa: S101 - else the figures would mean nothing
    middle = f"s{steps // 2}"

    def fork(checkpoint: WorkflowCheckpoint) -> object:
        forked = workflow.fork(checkpoint, override={middle: "fixed by hand"})
        assert len(forked.outputs) == steps // 2 + 1  # noqa: S101 - half the chain dropped
        return forked

    saved = json.dumps(parent.to_dict())
    return {
        "steps": steps,
        "in_memory": median_ms(lambda: parent, fork, args.repeat),
        "loaded": median_ms(
            lambda: WorkflowCheckpoint.from_dict(json.loads(saved)), fork, args.repeat
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="chain lengths, comma-separated")
    parser.add_argument("--repeat", type=int, default=21, help="timed forks per figure")
    parser.add_argument("--output-size", type=int, default=100, help="characters per output")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = [measure(steps, args) for steps in sizes]
    print(
        f"Workflow.fork of a chain's last checkpoint, the middle step overridden; median of "
        f"{args.repeat} forks, {args.output_size}-character outputs ({source.fingerprint()}).\n"
    )
    print("| steps | in memory | loaded (from_dict) |")
    print("|---:|---:|---:|")
    for row in rows:
        print(f"| {row['steps']:,} | {row['in_memory']:.2f} ms | {row['loaded']:.2f} ms |")


if __name__ == "__main__":
    main()
