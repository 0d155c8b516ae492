"""From `stream()` in a worker process to the text readable from the store in another: p50, p95.

`stream_latency.py` measures the page of ``executionkit serve`` showing a run it
runs itself. Most runs are carried by another process; this measures the store
path their text takes instead: an ``executionkit worker`` process runs a submitted
run whose step streams ``--pieces`` pieces at random intervals (20 to 80 ms,
seeded: 12 to 50 tokens a second), each holding the moment it was streamed
(``time.monotonic()``, one clock for every process of the machine). The worker
keeps the text in the store (its `StreamPublisher`, a write every 100 ms at
most); this process reads ``store.inbox.streams(run_id)`` every
``--poll`` seconds (5 ms: the store's latency, not a page's poll) and notes when
each piece first appears. A piece's latency is that moment minus its own. A
page polling every 100 ms adds up to 100 ms to it.

SQLite always; PostgreSQL with ``--postgres auto`` (a throwaway server from the
``pgserver`` wheel) or a connection string. Prints one Markdown table::

    python benchmarks/stream_processes.py [--postgres auto] [--pieces 200] [--seed 7]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from executionkit.stores import PostgresStore, SQLiteStore  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator

FLOW = """\
import os
import random
import time

from executionkit import Step, Workflow, current_step


def talk(ctx):
    chance = random.Random(int(os.environ["EK_BENCH_SEED"]))
    step = current_step()
    for index in range(int(os.environ["EK_BENCH_PIECES"])):
        time.sleep(chance.uniform(0.02, 0.08))
        step.stream(f"<{index}@{time.monotonic():.6f}>")
    time.sleep(1.0)  # the text goes when the step ends: leave the last pieces time to be read
    return "done"


workflow = Workflow([Step("talk", talk)])
"""
_PIECE = re.compile(r"<(\d+)@([0-9.]+)>")


def measure(location: str, store: Any, folder: Path, pieces: int, poll: float) -> list[float]:
    """Each piece's latency in seconds, from ``stream`` in the worker to a read here."""
    (folder / "stream_bench_flow.py").write_text(FLOW, encoding="utf-8")
    sys.path.insert(0, str(folder))
    flow = importlib.import_module("stream_bench_flow")  # written just now
    run_id = f"talk-{time.monotonic_ns()}"
    flow.workflow.submit(store, run_id=run_id)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source.directory()), str(folder)])}
    command = [sys.executable, "-m", "executionkit", "worker", location, "--workflow",
               "stream_bench_flow:workflow", "--poll", "0.2"]  # fmt: skip
    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, float] = {}
    try:
        deadline = time.monotonic() + pieces * 0.08 + 60
        while len(seen) < pieces and time.monotonic() < deadline:
            found = store.inbox.streams(run_id).get(("talk", None))
            now = time.monotonic()
            if found is not None:
                for index, sent in _PIECE.findall(found[1]):
                    seen.setdefault(int(index), now - float(sent))
            time.sleep(poll)
    finally:
        worker.terminate()
        _out, err = worker.communicate(timeout=60)
    if len(seen) < pieces:
        msg = f"{location}: saw {len(seen)} of {pieces} pieces; the worker said:\n{err.decode()}"
        raise RuntimeError(msg)
    return [seen[index] for index in sorted(seen)]


@contextlib.contextmanager
def databases(postgres: str | None, folder: Path) -> Iterator[list[tuple[str, str, Any]]]:
    """(name, location, store) of each database measured."""
    found: list[tuple[str, str, Any]] = [
        ("SQLite", f"sqlite:///{folder}/runs.db", SQLiteStore(folder / "runs.db"))
    ]
    if postgres is None:
        yield found
        return
    import pg_server  # noqa: PLC0415

    with contextlib.ExitStack() as stack:
        uri = postgres
        if postgres == "auto":
            uri = stack.enter_context(pg_server.throwaway_server())
        found.append(("PostgreSQL", uri, PostgresStore(uri)))
        yield found
        for _, _, store in found:
            store.close()


def main() -> None:
    """Print the latencies of each database as one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a connection string, or 'auto' for a throwaway server")
    parser.add_argument("--pieces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--poll", type=float, default=0.005)
    args = parser.parse_args()
    os.environ["EK_BENCH_SEED"] = str(args.seed)
    os.environ["EK_BENCH_PIECES"] = str(args.pieces)
    print(f"{args.pieces} pieces streamed in a worker process, read in this one every "
          f"{args.poll * 1000:g} ms")  # fmt: skip
    print("| database | pieces seen | p50 | p95 | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as name, databases(args.postgres, Path(name)) as found:
        for label, location, store in found:
            latencies = sorted(measure(location, store, Path(name), args.pieces, args.poll))
            p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
            print(
                f"| {label} | {len(latencies)} of {args.pieces} | "
                f"{statistics.median(latencies) * 1000:.0f} ms | {p95 * 1000:.0f} ms | "
                f"{latencies[-1] * 1000:.0f} ms |"
            )


if __name__ == "__main__":
    main()
