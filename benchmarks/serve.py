"""What ``executionkit serve`` takes to serve its pages, and what following a run costs it.

Three measurements, each the median of ``--requests`` requests through
`http.client` to an in-process server (with [min-max]), in milliseconds:

- **runs page, 1,000 runs**: ``GET /`` over an SQLite database of ``--runs``
  runs (real runs of a four-step workflow, a quarter of them waiting for an
  answer, a quarter failed); the page shows the newest 50 with their status.
- **run page, 10,000-item map**: ``GET /run?id=big`` of a run whose map over
  ``--items`` items stopped at a failed item, every other item recorded, each
  with its usage (a row of the checkpoint's ledger each).
- **live poll**: ``GET /run?id=big&live=1``, what the page's script fetches
  every half second while a run goes on.

Then **following a run**: a chain of ``--steps`` steps checkpointed after each
step into SQLite, run alone and run while a client polls its page (``live=1``)
as the page's script does, every half second; and, as a worst case, while a
client polls it without pause. Each as the ratio followed / alone, median of
``--rounds`` interleaved rounds. The targets are 200 ms per page on a 2-core
machine, and a ratio of 1 within noise for the page's own polling.

::

    python benchmarks/serve.py [--runs 1000] [--items 10000] [--requests 30] [--steps 1000]
        [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from executionkit import PatternResult, Step, TokenUsage, Workflow  # noqa: E402
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App, start_server  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402
from executionkit.stores import SQLiteStore  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping


def _fail(ctx: Mapping[str, Any]) -> str:
    if ctx["kind"] == "fail":
        msg = "the model answered nonsense"
        raise RuntimeError(msg)
    return "parsed"


def small() -> Workflow:
    """Four steps; a run asks a question or fails, by its ``kind`` input."""
    return Workflow(
        [
            Step("fetch", lambda _ctx: "text " * 40),
            Step("parse", _fail, depends_on=("fetch",)),
            Step.ask("approve", lambda ctx: {"draft": ctx["fetch"]}, depends_on=("parse",)),
            Step("publish", lambda _ctx: "done", depends_on=("approve",)),
        ]
    )


def big_map(items: int) -> Workflow:
    """A map over ``items`` items whose item ``items - 3`` fails."""

    async def double(item: int, _ctx: Mapping[str, Any]) -> PatternResult[int]:
        if item == items - 3:
            msg = f"item {item} failed"
            raise ValueError(msg)
        return PatternResult(item * 2, cost=TokenUsage(120, 30, 1))  # a ledger row each

    return Workflow(
        [Step("items", lambda _ctx: list(range(items))), Step.map("double", double, over="items")]
    )


def _constant(value: int) -> Any:
    return lambda _ctx: value


def chain(steps: int) -> Workflow:
    """``steps`` steps, each after the one before."""
    return Workflow(
        [
            Step(f"s{n}", _constant(n), depends_on=(() if n == 0 else (f"s{n - 1}",)))
            for n in range(steps)
        ]
    )


def _run(workflow: Workflow, store: SQLiteStore, run_id: str, context: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        workflow.run_sync(context, checkpoint_fn=store, run_id=run_id)


@contextlib.contextmanager
def served(app: App) -> Iterator[Any]:
    """Serve ``app`` in a thread, on a free port of 127.0.0.1; stop it in every outcome."""
    server = start_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        app.close()


@contextlib.contextmanager
def serving(location: str, workflow: Workflow) -> Iterator[tuple[str, int]]:
    """An in-process server of ``location``: its host and port."""
    with served(App(Source(parse_location(location), workflow), None, "bench:workflow")) as server:
        yield "127.0.0.1", server.server_address[1]


def get(address: tuple[str, int], path: str, *, ok: tuple[int, ...] = (200,)) -> int:
    """One GET of ``path``; the size of the body (a status not in ``ok`` fails)."""
    host, port = address
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.request("GET", path, headers={"Host": f"{host}:{port}"})
        response = connection.getresponse()
        body = response.read()
        if response.status not in ok:
            msg = f"GET {path}: status {response.status}"
            raise RuntimeError(msg)
        return len(body)
    finally:
        connection.close()


def timed(address: tuple[str, int], path: str, requests: int) -> tuple[list[float], int]:
    """Milliseconds of each of ``requests`` GETs of ``path`` (after one warm-up)."""
    size = get(address, path)
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        get(address, path)
        times.append((time.perf_counter() - start) * 1000)
    return times, size


def spread(values: list[float], unit: str = " ms", digits: int = 1) -> str:
    """``12.3 ms [11.0-15.2]``."""
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{middle:.{digits}f}{unit} [{low:.{digits}f}-{high:.{digits}f}]"


def pages(folder: Path, runs: int, items: int, requests: int) -> None:
    """The three page measurements."""
    store = SQLiteStore(folder / "runs.db")
    workflow = small()
    start = time.perf_counter()
    for number in range(runs):
        kind = ("fail", "ask", "ask", "ask")[number % 4]
        _run(workflow, store, f"run-{number:05}", {"kind": kind})
    print(f"made {runs:,} runs in {time.perf_counter() - start:.1f} s")
    with serving(f"sqlite:///{folder / 'runs.db'}", workflow) as address:
        times, size = timed(address, "/", requests)
        print(f"| runs page, {runs:,} runs (50 shown) | {spread(times)} | {size:,} bytes |")
    mapped = big_map(items)
    big = SQLiteStore(folder / "big.db")
    _run(mapped, big, "big", {})
    with serving(f"sqlite:///{folder / 'big.db'}", mapped) as address:
        times, size = timed(address, "/run?id=big", requests)
        print(f"| run page, {items:,}-item map | {spread(times)} | {size:,} bytes |")
        times, size = timed(address, "/run?id=big&live=1", requests)
        print(f"| live poll of that page | {spread(times)} | {size:,} bytes |")


def following(folder: Path, steps: int, rounds: int) -> None:
    """A run alone, and followed by a client polling its page without pause."""
    workflow = chain(steps)
    paced: list[float] = []
    flat_out: list[float] = []
    for number in range(rounds):
        alone = _timed_run(folder / f"alone-{number}.db", workflow, every=None)
        paced.append(_timed_run(folder / f"paced-{number}.db", workflow, every=0.5) / alone)
        flat_out.append(_timed_run(folder / f"flat-{number}.db", workflow, every=0.0) / alone)
    print(
        f"| a {steps}-step run followed by the page (a poll every 0.5 s), followed / alone "
        f"| {spread(paced, '', 2)} | {rounds} rounds |"
    )
    print(
        f"| the same run polled without pause (worst case), followed / alone "
        f"| {spread(flat_out, '', 2)} | {rounds} rounds |"
    )


def _timed_run(path: Path, workflow: Workflow, *, every: float | None) -> float:
    store = SQLiteStore(path)
    _run(Workflow([Step("s0", lambda _ctx: 0)]), store, "warm", {})  # the file and its tables
    stop = threading.Event()
    polls = [0]

    def poller(address: tuple[str, int]) -> None:
        while not stop.is_set():
            get(address, "/run?id=followed&live=1", ok=(200, 404))  # 404: not saved yet
            polls[0] += 1
            if every:
                stop.wait(every)

    with serving(f"sqlite:///{path}", workflow) as address:
        thread = threading.Thread(target=poller, args=(address,))
        if every is not None:
            thread.start()
        start = time.perf_counter()
        asyncio.run(_chain_run(workflow, store))
        elapsed = time.perf_counter() - start
        stop.set()
        if every is not None:
            thread.join()
    return elapsed


async def _chain_run(workflow: Workflow, store: SQLiteStore) -> None:
    await workflow.run({}, checkpoint_fn=store, run_id="followed", checkpoint_every="step")


def main() -> None:
    """Run the measurements and print them as Markdown table rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print("| page | median [min-max] | size |")
        print("| --- | --- | --- |")
        pages(Path(folder), args.runs, args.items, args.requests)
        following(Path(folder), args.steps, args.rounds)


if __name__ == "__main__":
    main()
