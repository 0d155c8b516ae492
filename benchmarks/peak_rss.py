"""Peak memory of a whole process that builds and runs a workflow, against the hand-written loop.

Each measurement is a fresh interpreter that imports executionkit (both
sides, so the imports cancel out), makes the graph's ``(name, depends_on)``
list, then either builds a `Workflow` of no-op async steps and runs it with a
``checkpoint_fn`` (executionkit), or plans and runs the same graph with
`baseline` (the loop). It reports the process's peak resident set size
(``ru_maxrss``): what a user sees as the run's memory, the definition, the run
and its result together. ``--keep last`` keeps only the latest checkpoint (a
callback that stores it elsewhere); ``--keep all`` appends every one to a list.
Rounds alternate the two sides; the table shows medians and the ratio's median
with [min-max] over the rounds (issue 23's target: at most 1.3x at 100,000).

    python benchmarks/peak_rss.py [--shapes chain,wide] [--size 100000] [--rounds 5]

``EXECUTIONKIT_BENCH_SOURCE=DIR`` measures the package in ``DIR`` (see `source`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(impl: str, shape: str, size: int, keep: str) -> None:
    """Build and run once, then print the peak RSS in bytes (run in a fresh process)."""
    sys.path.insert(0, str(HERE))
    import source  # noqa: PLC0415

    source.put_on_path()
    import baseline  # noqa: PLC0415
    import shapes  # noqa: PLC0415
    from memory import KeepLast, noop  # noqa: PLC0415

    from executionkit import Step, Workflow  # noqa: PLC0415

    dag = shapes.make(shape, size)
    saved: list[object] = [] if keep == "all" else KeepLast()
    if impl == "baseline":
        batches = baseline.plan([(name, deps, baseline.noop) for name, deps in dag])
        outputs = asyncio.run(baseline.run_batches(batches, saved))  # type: ignore[arg-type]
        if len(outputs) != size:
            sys.exit(f"the loop ran {len(outputs)} steps of {size}")
    else:
        workflow = Workflow(Step(name, noop, depends_on=deps) for name, deps in dag)
        result = asyncio.run(workflow.run(checkpoint_fn=saved.append))
        if len(result.outputs) != size:
            sys.exit(f"executionkit ran {len(result.outputs)} steps of {size}")
    print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def measure(impl: str, shape: str, size: int, keep: str) -> int:
    """Peak RSS in bytes of one fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", impl, shape, str(size), keep],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    """Measure as the command line says and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="chain,wide")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--keep", default="last,all")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, shape, size, keep = args.child
        child(impl, shape, int(size), keep)
        return 0
    print("| shape | keep | steps | loop MB | executionkit MB | ratio, median [min-max] |")
    print("|---|---|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        for keep in args.keep.split(","):
            loops, kits, ratios = [], [], []
            for _ in range(args.rounds):
                loop = measure("baseline", shape, args.size, keep)
                kit = measure("executionkit", shape, args.size, keep)
                loops.append(loop)
                kits.append(kit)
                ratios.append(kit / loop)
            print(
                f"| {shape} | {keep} | {args.size:,} | {statistics.median(loops) / 2**20:.1f} "
                f"| {statistics.median(kits) / 2**20:.1f} | {statistics.median(ratios):.2f}x "
                f"[{min(ratios):.2f}-{max(ratios):.2f}] |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
