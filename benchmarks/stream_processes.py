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
page polling every 100 ms adds up to 100 ms to it: ``--page`` measures that too,
the whole way from ``stream()`` to the page's hands. It serves the location from
this process as ``executionkit serve`` without ``--workflow`` does (it runs
nothing) and asks ``/stream?id=RUN`` as the page's script does (100 ms after each
answer); the server reads the run's owner and the inbox at every request.

SQLite always; PostgreSQL with ``--postgres auto`` (a throwaway server from the
``pgserver`` wheel) or a connection string. Prints one Markdown table::

    python benchmarks/stream_processes.py [--postgres auto] [--pieces 200] [--seed 7] [--page]
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
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

from pg_server import databases  # noqa: E402
from serve import served  # noqa: E402

from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

PAGE_POLL = 0.1  # seconds the page's script waits after each answer of /stream

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


def measure(
    location: str, store: Any, folder: Path, pieces: int, poll: float, *, page: bool
) -> list[float]:
    """Each piece's latency in seconds, from ``stream`` in the worker to a read here.

    ``page``: read through a read-only server's ``/stream``, as the page does.
    """
    if not page:
        return _measure(location, store, folder, (pieces, poll), lambda ran: _stored(store, ran))
    with served(App(Source(parse_location(location), None), None, None)) as server:
        address = ("127.0.0.1", server.server_address[1])
        return _measure(
            location, store, folder, (pieces, PAGE_POLL), lambda ran: _paged(address, ran)
        )


def _stored(store: Any, run_id: str) -> str | None:
    """The text of step ``talk`` of ``run_id`` as the store's inbox holds it."""
    found = store.inbox.streams(run_id).get(("talk", None))
    return None if found is None else str(found[1])


def _paged(address: tuple[str, int], run_id: str) -> str | None:
    """The text of step ``talk`` of ``run_id`` as ``/stream`` answers it."""
    host, port = address
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.request("GET", f"/stream?id={run_id}", headers={"Host": f"{host}:{port}"})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status != http.HTTPStatus.OK:
        return None  # the store could not be read this time: the page tries again
    text = json.loads(body)["steps"].get("talk", {}).get("text")
    return None if text is None else str(text)


def _measure(
    location: str,
    store: Any,
    folder: Path,
    counts: tuple[int, float],
    read: Callable[[str], str | None],
) -> list[float]:
    """``measure``'s loop: ``counts`` is (pieces, seconds between reads)."""
    pieces, poll = counts
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
            found = read(run_id)
            now = time.monotonic()
            if found is not None:
                for index, sent in _PIECE.findall(found):
                    seen.setdefault(int(index), now - float(sent))
            time.sleep(poll)
    finally:
        worker.terminate()
        _out, err = worker.communicate(timeout=60)
    if len(seen) < pieces:
        msg = f"{location}: saw {len(seen)} of {pieces} pieces; the worker said:\n{err.decode()}"
        raise RuntimeError(msg)
    return [seen[index] for index in sorted(seen)]


def main() -> None:
    """Print the latencies of each database as one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a connection string, or 'auto' for a throwaway server")
    parser.add_argument("--pieces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--poll", type=float, default=0.005)
    parser.add_argument(
        "--page", action="store_true", help="read through a read-only server, as the page does"
    )
    args = parser.parse_args()
    os.environ["EK_BENCH_SEED"] = str(args.seed)
    os.environ["EK_BENCH_PIECES"] = str(args.pieces)
    if args.page:
        wait = PAGE_POLL * 1000
        print(f"{args.pieces} pieces streamed in a worker process, read in this one from "
              f"a read-only server's /stream, {wait:g} ms after each answer")  # fmt: skip
    else:
        print(f"{args.pieces} pieces streamed in a worker process, read in this one every "
              f"{args.poll * 1000:g} ms")  # fmt: skip
    print("| database | pieces seen | p50 | p95 | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as name, databases(args.postgres, Path(name)) as found:
        for label, location, store in found:
            latencies = sorted(
                measure(location, store, Path(name), args.pieces, args.poll, page=args.page)
            )
            p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
            print(
                f"| {label} | {len(latencies)} of {args.pieces} | "
                f"{statistics.median(latencies) * 1000:.0f} ms | {p95 * 1000:.0f} ms | "
                f"{latencies[-1] * 1000:.0f} ms |"
            )


if __name__ == "__main__":
    main()
