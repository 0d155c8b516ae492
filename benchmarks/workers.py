"""How many ``executionkit worker`` processes a database holds: the cost of a look, and throughput.

Two measures, on SQLite and (with ``--postgres auto``, a throwaway server from the
``pgserver`` wheel) on PostgreSQL:

- **look**: what one idle worker costs its database. A database holds
  ``--finished`` finished runs and ``--waiting`` runs waiting for an answer; a
  `Worker` looks at it once (loading every checkpoint), then the median of
  ``--repeat`` further looks is timed: each reads the runs' seqs, the
  submissions, the saved answers and the runs left alone (a query each) and
  loads nothing that did not change. A worker looks every ``--poll`` seconds
  (2 by default), so N idle workers cost the database N x look / poll of its time.
- **throughput**: ``--runs`` submitted runs of a workflow of five steps that each
  wait ``--latency`` seconds (a model call: no CPU), carried by 1, 2, 4 and 8
  worker processes (``--concurrency 8``, ``--poll 0.2``); the seconds until every
  run finished, and runs per second.

Run::

    python benchmarks/workers.py [--postgres auto] [--runs 200] [--finished 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import source

source.put_on_path()

from pg_server import databases  # noqa: E402

from executionkit import Step, Workflow  # noqa: E402
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._worker import Worker  # noqa: E402

FLOW = """\
import asyncio
import os

from executionkit import Step, Workflow

LATENCY = float(os.environ.get("EK_BENCH_LATENCY", "0.05"))


def step(name, after=()):
    async def call(ctx):
        await asyncio.sleep(LATENCY)
        return name

    return Step(name, call, depends_on=after)


workflow = Workflow(
    [step("a"), step("b", ("a",)), step("c", ("b",)), step("d", ("c",)), step("e", ("d",))]
)
"""


def asking() -> Workflow:
    """A step, then a question: what the runs of the look measure record or wait on."""
    return Workflow(
        [
            Step("draft", lambda _ctx: "text"),
            Step.ask("approve", lambda _ctx: "ok?", depends_on=("draft",)),
        ]
    )


def fill(store: Any, finished: int, waiting: int) -> None:
    """Store ``finished`` finished runs and ``waiting`` runs waiting for an answer."""
    flow = asking()
    for index in range(waiting):
        flow.run_sync(checkpoint_fn=store, run_id=f"waiting-{index}")
    for index in range(finished):
        saved: list[Any] = []
        flow.run_sync(checkpoint_fn=saved.append, run_id=f"done-{index}")
        flow.run_sync(checkpoint_fn=store, resume_from=saved[-1], answers={"approve": True})


def look_cost(location: str, repeat: int) -> tuple[float, float]:
    """Seconds of the first look (everything loaded) and the median of the later ones."""

    async def looks() -> tuple[float, float]:
        worker = Worker(parse_location(location), asking(), log=lambda _line: None)
        try:
            began = time.perf_counter()
            assert not await worker.step()  # noqa: S101 - nothing can go on
            first = time.perf_counter() - began
            times = []
            for _ in range(repeat):
                began = time.perf_counter()
                started = await worker.step()
                times.append(time.perf_counter() - began)
                assert not started  # noqa: S101 - nothing can go on: only the look is timed
            return first, statistics.median(times)
        finally:
            await worker.stop()

    return asyncio.run(looks())


def throughput(location: str, store: Any, runs: int, workers: int, folder: Path) -> float:
    """Seconds until ``workers`` processes finished ``runs`` submitted runs."""
    (folder / "bench_flow.py").write_text(FLOW, encoding="utf-8")
    sys.path.insert(0, str(folder))
    bench_flow = importlib.import_module("bench_flow")  # written just now

    for index in range(runs):
        bench_flow.workflow.submit(store, run_id=f"w{workers}-{index}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source.directory()), str(folder)])}
    command = [sys.executable, "-m", "executionkit", "worker", location, "--workflow",
               "bench_flow:workflow", "--poll", "0.2", "--concurrency", "8"]  # fmt: skip
    began = time.perf_counter()
    started = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(workers)
    ]
    try:
        done: set[str] = set()
        seen: dict[str, int] = {}
        while len(done) < runs:
            for run_id, seq in store.run_seqs().items():
                if not run_id.startswith(f"w{workers}-") or seen.get(run_id) == seq:
                    continue
                seen[run_id] = seq
                if "e" in store.load(run_id).outputs:
                    done.add(run_id)
            time.sleep(0.05)
        return time.perf_counter() - began
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=60)


def main() -> None:
    """Measure and print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a connection string, or 'auto' for a throwaway server")
    parser.add_argument("--finished", type=int, default=1000)
    parser.add_argument("--waiting", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--workers", default="1,2,4,8")
    args = parser.parse_args()
    os.environ["EK_BENCH_LATENCY"] = str(args.latency)
    with tempfile.TemporaryDirectory() as name, databases(args.postgres, Path(name)) as found:
        folder = Path(name)
        print(f"look: {args.finished} finished runs and {args.waiting} waiting, one idle worker")
        print(
            "| database | first look (loads all) | later looks, median "
            "| idle workers that use one second of database time per second at --poll 2 |"
        )
        print("| --- | ---: | ---: | ---: |")
        for label, location, store in found:
            fill(store, args.finished, args.waiting)
            first, later = look_cost(location, args.repeat)
            print(
                f"| {label} | {first * 1000:.0f} ms | {later * 1000:.1f} ms | {2 / later:,.0f} |"
            )
        print()
        print(f"throughput: {args.runs} runs of 5 steps of {args.latency * 1000:.0f} ms each")
        print("| database | workers | seconds | runs/s |")
        print("| --- | ---: | ---: | ---: |")
        for label, location, store in found:
            for workers in map(int, args.workers.split(",")):
                seconds = throughput(location, store, args.runs, workers, folder)
                print(f"| {label} | {workers} | {seconds:.1f} | {args.runs / seconds:.1f} |")


if __name__ == "__main__":
    main()
