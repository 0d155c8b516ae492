"""What `Step.map` costs per item, against a hand-written loop, and into the incremental stores.

A map of ``--sizes`` no-op async items (100, 1,000 and 10,000 by default), at
most ``--limit`` (100) running at once, each recorded as it completes, with a
``checkpoint_fn`` that only keeps ``len(checkpoint.new_items)``: the cost of the
map itself (fan-out, per-item recording, checkpoints), in microseconds per item
of wall time around ``asyncio.run``. The baseline is what one would write by
hand: ``asyncio.gather`` over the items under an ``asyncio.Semaphore``, each
result put into a dict and a small record appended per item.

Then the same map into `JsonLinesStore` and `SQLiteStore` (their defaults: an
fsync per checkpoint) at ``--store-sizes`` (1,000 and 10,000): microseconds per
item and the bytes the store wrote (``wchar`` of ``/proc/self/io`` while the
run ran, Linux only; the file's size elsewhere), per item, to show it does not
grow with the number of items. No-op items finish faster than a checkpoint is
written, so their checkpoints each hold many new items; the rows "one item at a
time" run the map with ``max_concurrency=1``, which takes a checkpoint after
every item: the case a store that rewrote every item would make quadratic.

Every (case, size) runs in a fresh process, warmed up by three untimed runs of
100 items, ``--repeat`` times (the median)::

    python benchmarks/map.py [--sizes 100,1000,10000] [--store-sizes 1000,10000]
        [--repeat 5] [--limit 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import source

source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit.stores import JsonLinesStore, SQLiteStore  # noqa: E402

CASES = ("map", "loop", "jsonl", "sqlite", "jsonl-1", "sqlite-1")
WARM_UP = 3
TIMES = "\N{MULTIPLICATION SIGN}"
LABELS = {
    "map": "Step.map",
    "loop": "hand-written gather + Semaphore",
    "jsonl": "Step.map into JsonLinesStore",
    "sqlite": "Step.map into SQLiteStore",
    "jsonl-1": "the same, one item at a time: JsonLinesStore",
    "sqlite-1": "the same, one item at a time: SQLiteStore",
}


def written_bytes() -> int | None:
    """Bytes this process passed to write calls so far (Linux), or None."""
    try:
        text = Path("/proc/self/io").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return None


async def item(value: int, _ctx: object) -> int:
    return value


def workflow(size: int, limit: int) -> Workflow:
    return Workflow(
        [
            Step("split", lambda _ctx: list(range(size))),
            Step.map("each", item, over="split", max_concurrency=limit),
        ]
    )


async def hand_written(size: int, limit: int) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """The loop one writes without a library: gather under a semaphore, record each result."""
    results: dict[str, int] = {}
    records: list[tuple[str, int]] = []
    semaphore = asyncio.Semaphore(limit)

    async def one(key: str, value: int) -> None:
        async with semaphore:
            result = await item(value, None)
        results[key] = result
        records.append((key, len(results)))

    await asyncio.gather(*(one(str(i), i) for i in range(size)))
    return results, records


def measure(case: str, size: int, limit: int) -> dict[str, Any]:
    """One timed run of ``case`` at ``size`` items, in this process, after warming up.

    The warm-up (untimed runs of 100 items, ``WARM_UP`` times) loads the code and
    fills the caches, as the suite's harness does, so the first run's imports are
    not counted per item.
    """
    for _ in range(WARM_UP):
        once(case, min(size, 100), limit)
    return once(case, size, limit)


def once(case: str, size: int, limit: int) -> dict[str, Any]:
    """One run of ``case`` at ``size`` items."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        kept: list[int] = []
        store: Any = None
        if case.startswith("jsonl"):
            store = JsonLinesStore(folder / "run.jsonl")
        elif case.startswith("sqlite"):
            store = SQLiteStore(folder / "runs.db")
        if case.endswith("-1"):
            limit = 1  # each item lands alone: a checkpoint per item

        def cheap(checkpoint: WorkflowCheckpoint) -> None:
            kept.append(len(checkpoint.new_items))

        def stored(checkpoint: WorkflowCheckpoint) -> None:
            store(checkpoint)
            kept.append(len(checkpoint.new_items))

        flow = workflow(size, limit)
        before = written_bytes()
        began = time.perf_counter()
        if case == "loop":
            results, _ = asyncio.run(hand_written(size, limit))
            assert len(results) == size  # noqa: S101 - a benchmark's sanity check
        else:
            done = asyncio.run(flow.run(checkpoint_fn=cheap if store is None else stored))
            assert len(done.outputs["each"]) == size  # noqa: S101
        elapsed = time.perf_counter() - began
        after = written_bytes()
        if store is None:
            written = 0
        elif before is not None and after is not None:
            written = after - before
        else:
            written = sum(path.stat().st_size for path in folder.iterdir())
        if isinstance(store, SQLiteStore):
            store.close()
    return {"us_per_item": elapsed / size * 1e6, "bytes": written, "checkpoints": len(kept)}


def run_case(case: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """The median of ``--repeat`` fresh processes."""
    runs = []
    for _ in range(args.repeat):
        command = [
            sys.executable,
            __file__,
            "--case",
            f"{case}:{size}",
            "--limit",
            str(args.limit),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=args.timeout
        )
        runs.append(json.loads(done.stdout))
    return {
        "us_per_item": statistics.median(run["us_per_item"] for run in runs),
        "bytes": statistics.median(run["bytes"] for run in runs),
        "checkpoints": statistics.median(run["checkpoints"] for run in runs),
    }


def main() -> int:
    """Measure, then print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="items of the map")
    parser.add_argument("--store-sizes", default="1000,10000", help="items, into the stores")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")
    parser.add_argument("--limit", type=int, default=100, help="items running at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # case:size, in a child process
    args = parser.parse_args()
    if args.case:
        case, size = args.case.split(":")
        print(json.dumps(measure(case, int(size), args.limit)))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    store_sizes = [int(size) for size in args.store_sizes.split(",")]
    found = {(case, size): run_case(case, size, args) for case in CASES[:2] for size in sizes}
    header = " | ".join(f"{size:,} items" for size in sizes)
    print(f"| µs per item | {header} |")
    print("| --- |" + " --- |" * len(sizes))
    for case in ("map", "loop"):
        cells = " | ".join(f"{found[case, size]['us_per_item']:.1f}" for size in sizes)
        print(f"| {LABELS[case]} | {cells} |")
    ratios = " | ".join(
        f"{found['map', size]['us_per_item'] / found['loop', size]['us_per_item']:.2f}{TIMES}"
        for size in sizes
    )
    print(f"| ratio | {ratios} |")
    checkpoints = " | ".join(f"{found['map', size]['checkpoints']:,.0f}" for size in sizes)
    print(f"| checkpoints taken by Step.map | {checkpoints} |")
    print()
    times_header = " | ".join(f"µs per item, {size:,}" for size in store_sizes)
    bytes_header = " | ".join(f"bytes per item, {size:,}" for size in store_sizes)
    counts_header = " | ".join(f"checkpoints, {size:,}" for size in store_sizes)
    print(f"| store | {times_header} | {bytes_header} | {counts_header} |")
    print("| --- |" + " --- |" * (3 * len(store_sizes)))
    for case in ("jsonl", "sqlite", "jsonl-1", "sqlite-1"):
        measured = [run_case(case, size, args) for size in store_sizes]
        times = " | ".join(f"{m['us_per_item']:.1f}" for m in measured)
        per_item = " | ".join(
            f"{m['bytes'] / size:,.0f}" for m, size in zip(measured, store_sizes, strict=True)
        )
        counts = " | ".join(f"{m['checkpoints']:,.0f}" for m in measured)
        print(f"| {LABELS[case]} | {times} | {per_item} | {counts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
