"""JsonLinesStore per checkpoint against the floor: one ~200-byte write + fsync (issue 23).

In one process, interleaved rounds: (a) the floor, ``os.write`` of a ~200-byte
line and ``os.fsync`` on a file kept open; (b) `JsonLinesStore`, timing only
``store(checkpoint)`` inside the ``checkpoint_fn`` of a chain of no-op steps
run with ``checkpoint_every="step"``. Prints the medians per round and the
ratio's median with [min-max]. ``--profile`` profiles the saves of one chain.

    python benchmarks/jsonl_floor.py [--steps 1000] [--rounds 5] [--dir /tmp] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executionkit import Step, Workflow, WorkflowCheckpoint
from executionkit.stores import JsonLinesStore


async def _noop(ctx: Any) -> int:
    del ctx
    return 1


def floor(folder: Path, count: int) -> float:
    """Median seconds of one ~200-byte ``os.write`` + ``os.fsync`` on an open file."""
    line = (b"x" * 199) + b"\n"
    path = folder / "floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)


def store_run(folder: Path, steps: int, profile: cProfile.Profile | None = None) -> float:
    """Median seconds of ``JsonLinesStore(checkpoint)`` over a chain of ``steps`` steps."""
    path = folder / "run.jsonl"
    store = JsonLinesStore(path)
    times: list[float] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if profile is not None:
            profile.enable()
        start = time.perf_counter()
        store(checkpoint)
        times.append(time.perf_counter() - start)
        if profile is not None:
            profile.disable()

    workflow = Workflow(
        Step(f"s{i}", _noop, depends_on=(f"s{i - 1}",) if i else ()) for i in range(steps)
    )
    asyncio.run(workflow.run(checkpoint_fn=save, checkpoint_every="step"))
    close = getattr(store, "close", None)
    if close is not None:
        close()
    path.unlink()
    return statistics.median(times)


def main() -> None:
    """Run the interleaved rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="folder for the files (default: a temp dir)")
    parser.add_argument("--profile", action="store_true", help="profile one chain's saves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as name:
        folder = Path(name)
        if args.profile:
            profile = cProfile.Profile()
            store_run(folder, args.steps, profile)
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)
            return
        ratios = []
        for round_ in range(1, args.rounds + 1):
            low = floor(folder, args.steps)
            saved = store_run(folder, args.steps)
            ratios.append(saved / low)
            print(
                f"round {round_}: floor {low * 1e6:.1f} us, store {saved * 1e6:.1f} us, "
                f"{saved / low:.2f}x"
            )
        print(
            f"ratio {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] over {args.rounds} rounds"
        )


if __name__ == "__main__":
    main()
